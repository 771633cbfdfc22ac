"""Tiny HF models (built once per session, seeded) shared by the converter's unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from convert_testlib import VARIANTS, variant_id


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Path]:
    """Each variant saved once: 4 layers, hidden 64, 8 heads / 4 KV heads, vocab 250 (pads under TP 4)."""
    from tests.support.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("tiny_hf")
    return {
        v: build_tiny_model(root / variant_id(v), v[0], tied=v[1], seed=i, num_heads=8, num_kv_heads=4)
        for i, v in enumerate(VARIANTS)
    }
