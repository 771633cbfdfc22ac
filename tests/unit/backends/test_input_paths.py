"""Input paths not on this machine: a warning on --dry-run for every backend, an error on a real run that
says what a relative path is relative to and names the experiment file that makes it."""

from __future__ import annotations

import shutil

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

MISSING = "/nonexistent/af27"


def _plan(path, *overrides: str, dry_run: bool):
    return make_plan(load_experiment(path, list(overrides)), dry_run=dry_run)


@pytest.mark.parametrize(
    "overrides,keys",
    [
        (
            [f"--backend_config.training.tokenizer-name-or-path={MISSING}/model"],
            ["backend_config.training.tokenizer-name-or-path"],
        ),
        (
            [f"--backend_config.preprocess_data.input={MISSING}/d.jsonl"],
            ["backend_config.preprocess_data.input"],
        ),
        ([f"--backend_config.training.data-path={MISSING}/prefix"], ["backend_config.training.data-path"]),
    ],
)
@pytest.mark.parametrize("backend", ["torch", "mindspeed-llm"])
def test_megatron_backends_warn_on_a_dry_run_and_refuse_a_real_run(tmp_path, backend, overrides, keys):
    args = [f"--af_output_dir={tmp_path}", f"--backend={backend}", *overrides]
    plan = _plan(REPO / "cfgs" / "quickstart.yaml", *args, dry_run=True)
    for key in keys:
        assert any(w.startswith(key) and "a real run stops here" in w for w in plan.warnings), plan.warnings
    if backend == "torch":  # a real mindspeed-llm run also lacks the checkout here
        with pytest.raises(ConfigError) as err:
            _plan(REPO / "cfgs" / "quickstart.yaml", *args, dry_run=False)
        assert [p.key for p in err.value.problems] == keys


def test_a_relative_path_says_what_it_is_relative_to(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        _plan(REPO / "cfgs" / "quickstart.yaml", f"--af_output_dir={tmp_path}/o", dry_run=False)
    texts = [p.message for p in err.value.problems]
    assert any(f"./demo_assets/tiny-qwen2 (relative to the current directory {tmp_path})" in t for t in texts)
    assert any(
        f"./cfgs/data/demo_sft.jsonl (relative to the current directory {tmp_path})" in t for t in texts
    )


def test_llamafactory_warns_about_a_missing_model_directory(tmp_path):
    args = [f"--af_output_dir={tmp_path}", f"--backend_config.training.model_name_or_path={MISSING}/m"]
    plan = _plan(REPO / "cfgs" / "quickstart_llamafactory.yaml", *args, dry_run=True)
    assert any(
        w.startswith("backend_config.training.model_name_or_path: model directory") for w in plan.warnings
    ), plan.warnings
    with pytest.raises(ConfigError) as err:
        _plan(REPO / "cfgs" / "quickstart_llamafactory.yaml", *args, dry_run=False)
    assert "backend_config.training.model_name_or_path" in [p.key for p in err.value.problems]


def test_the_grpo_step_names_the_warm_up_experiment_that_makes_its_model(tmp_path, monkeypatch):
    shutil.copytree(REPO / "cfgs", tmp_path / "cfgs")
    (tmp_path / "demo_assets").symlink_to(REPO / "demo_assets")
    monkeypatch.chdir(tmp_path)
    plan = _plan("cfgs/quickstart_grpo.yaml", dry_run=True)
    [warning] = [w for w in plan.warnings if "tokenizer_name_or_path" in w]
    assert "it is an output of cfgs/quickstart_grpo_sft.yaml" in warning
    assert "run `ascendfactory-cli train cfgs/quickstart_grpo_sft.yaml` first" in warning
    with pytest.raises(ConfigError) as err:
        _plan("cfgs/quickstart_grpo.yaml", dry_run=False)
    [problem] = err.value.problems
    assert problem.key == "backend_config.megatron_training.tokenizer_name_or_path"
    assert "does not exist" in problem.message and "cfgs/quickstart_grpo_sft.yaml" in problem.fix
