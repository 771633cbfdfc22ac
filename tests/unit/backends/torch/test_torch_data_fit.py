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


def test_the_fix_never_passes_the_models_positions(tmp_path):
    """The demo model takes 512 positions: answers starting at 600 fit no seq-length it takes, and the fix
    says so instead of suggesting seq-length 604 (which the layout check then refuses)."""
    prefix = given_data(tmp_path, [600] * 30 + [10] * 20)
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, f"--backend_config.training.data-path={prefix}")
    [p] = e.value.problems
    assert "604" not in p.fix and "seq-length: 604" not in p.message
    assert (
        "95% of the answers end by token 604, past the model's 512 positions (max_position_embeddings)"
        in (p.message)
    )
    assert (
        "at seq-length 512 40% of the answers stay whole and 30 samples still train on nothing" in p.message
    )
    assert p.fix.startswith("the data cannot fit this model: shorten the prompts, or drop the samples")
    assert "and seq-length: 512, the most the model takes," in p.fix
    (tmp_path / "w").mkdir()
    within = given_data(tmp_path / "w", [100] * 30 + [10] * 20)  # 104 tokens: within the model
    with pytest.raises(ConfigError, match=r"fix: seq-length: 104 \(or shorter prompts\)"):
        plan_for(tmp_path, f"--backend_config.training.data-path={within}")


def test_a_warning_gives_the_odds_of_the_nan_stop(tmp_path):
    """20 of 50 samples train on nothing, MBS 4: a micro-batch of four such samples is a NaN stop."""
    prefix = given_data(tmp_path, [80] * 20 + [10] * 30)
    args = [f"--backend_config.training.data-path={prefix}", "--backend_config.training.train-iters=60"]
    [warning] = [w for w in plan_for(tmp_path, *args).warnings if "20 of 50 samples" in w]
    q = 1 - (1 - (4845 / 230300)) ** 240  # C(20,4)/C(50,4) per micro-batch, 60 x 16 / 4 micro-batches
    assert f"a micro-batch made only of such samples stops the run: about {q:.0%} over this run's 240" in (
        warning
    )
    off = plan_for(tmp_path, *args, "--backend_config.training.no-check-for-nan-in-loss-and-grad=true")
    assert not [w for w in off.warnings if "stops the run" in w]


def test_the_check_step_is_told_the_positions_and_the_micro_batches(tmp_path, capsys):
    argv = plan_for(tmp_path).step("data-fit").argv
    assert "--max-positions=512" in argv and "--micro-batches=480" in argv and "--stops-on-nan" in argv
    prefix = given_data(tmp_path, [600] * 3)
    assert fit.main(["--data-path", prefix, "--seq-length", "64", "--max-positions", "512"]) == 2
    assert "fix: the data cannot fit this model" in capsys.readouterr().err
