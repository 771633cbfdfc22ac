"""Input paths not on this machine: a warning on --dry-run for every backend, an error on a real run that
says what a relative path is relative to and names the experiment file that makes it."""

from __future__ import annotations

import os
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
    args = [f"--af_output_dir={tmp_path}", f"--backend={backend}", "--accelerator=auto", *overrides]
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


def test_the_producer_lookup_loads_only_files_whose_output_dir_could_hold_the_path(tmp_path, monkeypatch):
    """Files beside the experiment are read as YAML; only one whose `af_output_dir`, as written, could hold
    the missing path (or that writes it with `${...}`) is loaded and validated."""
    from ascendfactory.backends import inputs
    from ascendfactory.config import load as load_module

    source = (REPO / "cfgs" / "quickstart.yaml").read_text()
    for i in range(6):  # unrelated experiments
        (tmp_path / f"other{i}.yaml").write_text(
            source.replace("af_output_dir:", f"af_output_dir: {tmp_path}/o{i} #")
        )
    (tmp_path / "maker.yaml").write_text(
        source.replace("af_output_dir:", f"af_output_dir: {tmp_path}/made #")
    )
    (tmp_path / "templated.yaml").write_text(
        source.replace("af_output_dir:", "af_output_dir: ${af_model_name}-x #")
    )
    (tmp_path / "broken.yaml").write_text(f"af_output_dir: {tmp_path}/made\nbackend: 3\n")
    exp = tmp_path / "exp.yaml"
    exp.write_text(source)
    loads: list[str] = []
    real = load_module.load_experiment
    monkeypatch.setattr(
        load_module, "load_experiment", lambda p, *a, **k: loads.append(p) or real(p, *a, **k)
    )
    inputs._experiments_in.cache_clear()
    inputs._output_dir.cache_clear()
    loaded = real(str(exp))

    class Ctx:
        pass

    ctx = Ctx()
    ctx.loaded = loaded  # type: ignore[attr-defined]
    assert inputs.producer(ctx, f"{tmp_path}/made/final/model") == str(tmp_path / "maker.yaml")  # type: ignore[arg-type]
    assert sorted(os.path.basename(p) for p in loads) == ["broken.yaml", "maker.yaml"]  # sorted: broken first
    loads.clear()
    assert inputs.producer(ctx, f"{tmp_path}/elsewhere") is None  # type: ignore[arg-type]
    assert [os.path.basename(p) for p in loads] == ["templated.yaml"]  # `${...}`: only a load tells
