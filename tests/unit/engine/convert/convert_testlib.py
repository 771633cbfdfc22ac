"""Helpers shared by the converter's tests (a uniquely named module: several test dirs have a conftest.py)."""

from __future__ import annotations

from pathlib import Path

# (family, tied): llama tied and untied, qwen2 with QKV bias, qwen3 with q/k norm.
VARIANTS = [("llama2", True), ("llama2", False), ("qwen25", False), ("qwen3", False)]


def variant_id(v: tuple[str, bool]) -> str:
    return f"{v[0]}{'-tied' if v[1] else ''}"


def load_hf(path: Path) -> dict:
    """Every tensor of the safetensors files in an HF folder."""
    from safetensors.torch import load_file

    out = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out
