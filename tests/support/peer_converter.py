"""MindSpeed-LLM's own checkpoint converter run beside ours on the same tiny model (the opt-in comparisons
`tests/integration/test_convert_matches_mindspeed_v1.py` / `_v2.py`).

The peer runs in its own interpreter under `peer_standins.py` (stand-ins for the Ascend-only imports), from
`cwd`, with `pythonpath` (its checkout, MindSpeed, Megatron-LM) as its only PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

STANDINS = Path(__file__).resolve().parent / "peer_standins.py"
# the tiny models both comparisons convert (MoE families add 4 experts, top 2: tests/support/tiny_model.py)
SIZES: dict[str, Any] = dict(
    num_layers=4, hidden_size=128, num_heads=4, num_kv_heads=2, intermediate_size=256, vocab_size=512
)


def run_peer(
    python: str,
    script: str,
    flags: list[str],
    *,
    pythonpath: str,
    cwd: Path | str,
    without: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`script` (a MindSpeed-LLM converter) with `flags` under the stand-ins; `without`: modules the peer's
    own adaptor stands in for itself (MindSpeed 2.1.0 makes its own dummy `transformer_engine`)."""
    skip = ["--without", ",".join(without)] if without else []
    return subprocess.run(
        [python, str(STANDINS), *skip, script, *flags],
        env={**os.environ, **(env or {}), "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
    )


def run_ours(flags: list[str]) -> None:
    """`python -m ascendfactory.engine.convert` with `flags` (this interpreter, this checkout)."""
    subprocess.run(
        [sys.executable, "-m", "ascendfactory.engine.convert", *flags],
        check=True,
        capture_output=True,
        timeout=300,
    )


def hf_tensors(folder: Path) -> dict:
    """Every tensor of the safetensors files in `folder`."""
    from safetensors.torch import load_file

    out: dict = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out
