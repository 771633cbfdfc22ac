"""A Python without the embedded backend's packages (a core `pip install .`) is refused when planning a real
torch-backend run, naming `pip install ".[torch]"`; a dry run warns. (The fresh-venv check is in
tests/integration/test_packaging.py.)"""

from __future__ import annotations

import importlib.util

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.backends.torch import backend as torch_backend
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO


@pytest.fixture
def no_tokenizers(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "tokenizers" else real(n, *a))


@pytest.mark.parametrize("file", ["quickstart.yaml", "quickstart_grpo_sft.yaml"])
def test_a_real_run_is_refused_naming_the_extra(tmp_path, no_tokenizers, file):
    loaded = load_experiment(REPO / "cfgs" / file, [f"--af_output_dir={tmp_path / 'out'}"])
    with pytest.raises(ConfigError) as e:
        make_plan(loaded, dry_run=False)
    [p] = [p for p in e.value.problems if p.key == "backend"]
    assert "need tokenizers, which this Python" in p.message and 'pip install ".[torch]"' in p.fix
    assert not (tmp_path / "out").exists()


def test_a_dry_run_warns_and_plans(tmp_path, no_tokenizers):
    loaded = load_experiment(REPO / "cfgs" / "quickstart.yaml", [f"--af_output_dir={tmp_path}"])
    plan = make_plan(loaded, dry_run=True)
    assert any('a real run stops here; fix: pip install ".[torch]"' in w for w in plan.warnings)


def test_every_program_module_is_listed():
    assert torch_backend.missing_packages() == []  # this environment has the extra
    assert set(torch_backend.EMBEDDED_PACKAGES) >= {"torch", "transformers", "safetensors", "tokenizers"}
