"""The torch backend's data-fit check: counted while planning when the data is given, else a CHECK step."""

from __future__ import annotations

import numpy as np
import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.engine.data import fit
from ascendfactory.engine.data.indexed import IndexedDatasetBuilder
from ascendfactory.errors import ConfigError
from ascendfactory.plan import Role
from tests.conftest import REPO

QUICK = REPO / "cfgs" / "quickstart.yaml"
P = fit.IGNORE_INDEX


def given_data(tmp_path, answer_starts: list[int]) -> str:
    """An sft dataset whose sample i has a prompt of answer_starts[i] tokens and a 4-token answer."""
    prefix = str(tmp_path / "data" / "own")
    (tmp_path / "data").mkdir()
    for key in ("input_ids", "attention_mask", "labels"):
        dtype = np.int32 if key == "labels" else np.uint16
        with IndexedDatasetBuilder(f"{prefix}_packed_{key}_document", dtype) as b:
            for start in answer_starts:
                ids = np.arange(start + 4) % 50 + 1
                row = {"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": ids.copy()}
                row["labels"][:start] = P
                b.add_document(row[key].astype(dtype))
            b.finalize()
    return prefix


def plan_for(tmp_path, *overrides: str):
    argv = [f"--af_output_dir={tmp_path}/out", "--backend_config.training.seq-length=64", *overrides]
    return make_plan(load_experiment(QUICK, argv), dry_run=True)


def test_preprocessed_by_the_run_gets_a_check_step_before_training(tmp_path):
    plan = plan_for(tmp_path)
    step = plan.step("data-fit")
    names = [s.name for s in plan.steps]
    assert step.role is Role.CHECK and names.index("data-fit") == names.index("preprocess") + 1
    argv = step.argv
    assert argv[argv.index("--seq-length") + 1] == "64" and argv[argv.index("--on-unfit") + 1] == "fail"
    assert (
        argv[argv.index("--data-path") + 1]
        == plan.step("train").argv[plan.step("train").argv.index("--data-path") + 1]
    )
    off = plan_for(tmp_path, "--check_data_fit=false").step("data-fit").argv
    assert off[off.index("--on-unfit") + 1] == "warn"


def test_given_data_that_mostly_misses_seq_length_is_refused_while_planning(tmp_path):
    prefix = given_data(tmp_path, [80] * 30 + [62] * 5 + [10] * 15)
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, f"--backend_config.training.data-path={prefix}")
    text = str(e.value)
    assert "backend_config.training.seq-length" in text
    assert "30 of 50 samples (60%) have every answer token at or past seq-length 64" in text
    assert "5 (10%) have their answer cut short" in text and "seq-length: 84" in text
    plan = plan_for(tmp_path, f"--backend_config.training.data-path={prefix}", "--check_data_fit=false")
    assert plan.step("data-fit") is None
    assert any("30 of 50 samples" in w for w in plan.warnings)


def test_given_data_with_a_minority_beyond_is_a_warning(tmp_path):
    prefix = given_data(tmp_path, [80] * 10 + [10] * 40)
    plan = plan_for(tmp_path, f"--backend_config.training.data-path={prefix}")
    assert [w for w in plan.warnings if "10 of 50 samples (20%)" in w]
    assert not [
        w
        for w in plan_for(
            tmp_path,
            f"--backend_config.training.data-path={prefix}",
            "--backend_config.training.seq-length=128",
        ).warnings
        if "samples" in w
    ]


def test_a_nan_stop_is_not_retried_by_auto_resume_on_either_megatron_backend():
    from ascendfactory.backends.registry import get_backend

    for name in ("torch", "mindspeed-llm"):
        assert "found NaN in" in get_backend(name).unretryable, name


@pytest.mark.parametrize(("value", "mode"), [("true", "fail"), ("false", "warn")])
def test_the_llamafactory_check_step_counts_the_data_against_cutoff_len(tmp_path, value, mode):
    import os

    lf = REPO / "cfgs" / "quickstart_llamafactory.yaml"
    loaded = load_experiment(lf, [f"--af_output_dir={tmp_path}", f"--check_data_fit={value}"])
    environ = {"AF_LLAMAFACTORY_ENV": "/nonexistent/lf-env", "PATH": os.environ.get("PATH", "")}
    argv = make_plan(loaded, dry_run=True, environ=environ).step("check").argv
    assert argv[1].endswith("lf_check.py") and argv[-1] == f"--data-fit={mode}"
