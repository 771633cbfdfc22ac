"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory) -> Path:
    """The tiny Qwen2-style demo model (and tokenizer), built offline once per session."""
    from ascendfactory.engine.demo import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("demo") / "tiny-qwen2")
