"""A controlled machine for mindspeed-llm plans: no device variables, no toolkit, fake checkouts."""

from __future__ import annotations

from pathlib import Path

import pytest

ENV_VARS = (
    "ASCEND_RT_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "AF_MINDSPEED_LLM_DIR",
    "ASCEND_TOOLKIT_HOME",
    "AF_THIRD_PARTY_DIR",
    "AF_MINDSPEED_MM_DIR",
    "AF_MINDSPEED_MM_GENERATION",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Unset what changes a plan; install.sh's location is an empty folder under tmp. Returns that folder."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    third = tmp_path / "third-party"
    monkeypatch.setenv("AF_THIRD_PARTY_DIR", str(third))
    return third


def make_checkout(root: Path, *, v1: bool = True, v2: bool = True, megatron: bool = True) -> Path:
    """An empty-file stand-in for a MindSpeed-LLM checkout (what the plan looks for, nothing more)."""
    root.mkdir(parents=True, exist_ok=True)
    names = ["pretrain_gpt.py", "posttrain_gpt.py", "preprocess_data.py"]
    names += ["convert_ckpt.py"] if v1 else []
    names += ["convert_ckpt_v2.py"] if v2 else []
    for name in names:
        (root / name).write_text("", encoding="utf-8")
    if megatron:
        (root / "megatron").mkdir(exist_ok=True)
    return root


@pytest.fixture
def fake_checkout():
    """The `make_checkout` factory, for tests that need a particular checkout."""
    return make_checkout


@pytest.fixture
def checkout(clean_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A fake MindSpeed-LLM 2.1.0-style checkout (v1 converter only) named by AF_MINDSPEED_LLM_DIR."""
    root = make_checkout(tmp_path / "MindSpeed-LLM", v2=False)
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(root))
    return root
