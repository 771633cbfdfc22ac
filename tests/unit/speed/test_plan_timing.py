"""The time estimate in the plan: what `estimate` and `train --dry-run` print, from the memory job's layout
(the flags the framework parses), on the run's device; the backends the model covers."""

from __future__ import annotations

import json

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.backends.timing import TIMED_BACKENDS
from ascendfactory.cli._output import out
from ascendfactory.cli.app import main
from ascendfactory.config.load import load_experiment
from tests.conftest import REPO

QUICKSTART = REPO / "cfgs" / "quickstart.yaml"
GOLDEN = REPO / "cfgs" / "golden" / "qwen25-7b-tune-4k-full.yaml"


@pytest.fixture(autouse=True)
def _human_mode():
    yield
    out.mode = "human"


def test_quickstart_plan_carries_the_cpu_estimate(tmp_path):
    plan = make_plan(load_experiment(str(QUICKSTART), [f"--af_output_dir={tmp_path}"]), dry_run=True)
    t = plan.timing
    assert t is not None and t["device"] == "cpu" and t["threads_per_process"] == 1  # 2 processes: 1 each
    w = t["workload"]
    assert (w["tp"], w["pp"], w["dp"], w["mbs"], w["gbs"], w["seq"], w["train_iters"]) == (
        1,
        1,
        2,
        4,
        16,
        128,
        120,
    )
    assert (w["layers"], w["hidden"], w["precision"], w["engine"]) == (2, 64, "fp32", "embedded")
    assert t["run_s"] == pytest.approx(t["step_s"] * 120)
    assert t["tokens_per_s_per_device"] == pytest.approx(16 * 128 / t["step_s"] / 2)
    assert plan.to_dict()["timing"] == t


def test_estimate_and_dry_run_print_it(capsys):
    args = [str(GOLDEN), "--memory_check.device=h200"]
    main(["estimate", *args, "--json"])
    data = json.loads(capsys.readouterr().out)
    t = data["timing"]
    assert t["device"] == "h200" and t["workload"]["pp"] == 2 and t["parts"]["bubble"] > 0
    assert t["calibration_error"] is not None and t["run_s"] > 0
    main(["train", *args, "--dry-run"])
    text = capsys.readouterr().out
    assert "time (estimate, before anything queues)" in text and "tokens/s per device" in text
    assert "whole run:" in text


def test_an_unknown_device_gives_no_figure_and_says_why(capsys, monkeypatch):
    from ascendfactory.memory import devices

    monkeypatch.setattr(devices, "probe_devices", lambda **_: None)  # as on a machine without nvidia-smi
    main(["estimate", str(GOLDEN), "--json"])
    t = json.loads(capsys.readouterr().out)["timing"]
    assert "step_s" not in t and "memory_check.device" in t["note"]


def test_every_timed_backend_is_registered():
    from ascendfactory.backends.registry import backend_names

    assert set(TIMED_BACKENDS) <= set(backend_names())
