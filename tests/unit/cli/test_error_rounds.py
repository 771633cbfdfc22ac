"""Error messages: one problem per mistake, under the key the user gave and where they gave it, every
problem in one round (`show` and `--dry-run` alike), fixes in the form the user writes, and absurd command
lines as configuration errors (exit 2), never internal errors."""

from __future__ import annotations

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.cli.app import main
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

QUICK = REPO / "cfgs" / "quickstart.yaml"


def _problems(*overrides: str, path=QUICK):
    with pytest.raises(ConfigError) as err:
        make_plan(load_experiment(path, list(overrides), collect=True), dry_run=True)
    return err.value.problems


def test_a_misspelt_torch_flag_is_one_problem():
    problems = _problems("--backend_config.training.micro_batch_size=2")
    assert len(problems) == 1 and "did you mean: micro-batch-size?" in problems[0].message


def test_a_pipeline_size_that_does_not_fit_is_named_under_pp_and_its_source():
    problems = _problems("--backend_config.training.pipeline-model-parallel-size=4")
    world = next(p for p in problems if "does not divide world_size" in p.message)
    assert world.key == "backend_config.training.pipeline-model-parallel-size"
    assert world.source == "command line"


def test_a_minimal_file_gets_every_problem_at_once_and_show_agrees(tmp_path, capsys):
    path = tmp_path / "mini.yaml"
    path.write_text(
        "backend: torch\naf_model_name: tiny-demo\nexp_name: mini\n"
        f"dataset: {REPO}/cfgs/data/demo_sft.jsonl\nmodel_name_or_path: {REPO}/demo_assets/tiny-qwen2\n"
    )
    keys = {p.key for p in _problems(path=path)}
    assert {"af_output_dir", "backend_config.training.train-iters", "backend_config.training.lr"} <= keys
    assert main(["train", str(path), "--dry-run"]) == 2
    dry = capsys.readouterr().err
    assert main(["show", str(path)]) == 2
    assert capsys.readouterr().err == dry
    assert "fix: set backend_config.training.train-iters: <value>" in dry and "add --" not in dry


def test_absurd_command_lines_are_configuration_errors(capsys):
    long_key = "--" + "a." * 5000 + "b=1"
    assert main(["train", str(QUICK), "--dry-run", long_key]) == 2
    assert main(["train", str(QUICK), "--dry-run", "--" + "k" * 10_000 + "=1"]) == 2
    assert main(["train", str(QUICK), "--dry-run", "--save_total_limit=" + "9" * 5000]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err and "a number of 5000 digits" in err


def test_a_file_with_a_5000_digit_number_is_a_configuration_error(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(QUICK.read_text().replace("save_total_limit: 2", "save_total_limit: " + "9" * 5000))
    assert main(["train", str(path), "--dry-run"]) == 2
    assert "internal error" not in capsys.readouterr().err


def test_an_unknown_old_style_block_lists_the_valid_ones():
    multi = REPO / "cfgs" / "multi_model_cfgs.yaml"
    with pytest.raises(ConfigError, match="use one of: qwen2.5-7b"):
        load_experiment(multi, model_name="qwen2-7b", exp_name="full-4k")
