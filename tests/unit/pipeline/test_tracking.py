"""The runner's tracker part without a tracker client: what it does with no run to open, the run-id file, the
summary figures it reports, and the framework's variables for a continued run."""

from __future__ import annotations

import json

from ascendfactory.pipeline.results import RunSummary
from ascendfactory.pipeline.tracking import RunTracking, summary_values
from ascendfactory.plan import TrackerSpec, Tracking


def test_tensorboard_alone_opens_no_run(tmp_path):
    tracking = Tracking((TrackerSpec("tensorboard", "p", "r", location=str(tmp_path / "tb")),), runs_file="")
    rt = RunTracking(tracking, warn=lambda text: (_ for _ in ()).throw(AssertionError(text)))
    rt.start()
    assert not rt.active and rt.wait() == [] and rt.env() == {}
    rt.report(RunSummary(str(tmp_path), [], 1.0), [])  # not prepared: nothing to report to
    assert not (tmp_path / "trackers").exists()


def test_the_run_id_file_is_read_leniently(tmp_path):
    runs = tmp_path / "runs.json"
    spec = TrackerSpec("wandb", "p", "r", location=str(tmp_path), mode="disabled", resume_env=(("X", "1"),))
    rt = RunTracking(Tracking((spec,), runs_file=str(runs)), warn=print)
    runs.write_text("{not json")
    assert rt._read_ids() == {}
    runs.write_text(json.dumps({"wandb": {"run_id": "abc123"}, "mlflow": "junk"}))
    assert rt._read_ids() == {"wandb": "abc123"}
    rt.ids, rt.continued = {"wandb": "abc123"}, {"wandb"}
    assert rt.env() == {"WANDB_RUN_ID": "abc123", "WANDB_RESUME": "allow", "X": "1"}


def test_summary_values_flatten_the_run_summary():
    s = RunSummary("o", [], 12.5, loss_start=3.0, loss_end=1.5, first_step=1, last_step=9, nan_iterations=0)
    s.throughput = {"value": 321.0, "unit": "tokens/s/device", "formula": "megatron"}
    s.metrics = {"critic/score/mean": {"first": 0.1, "last": 0.9, "mean": 0.5, "min": 0.1, "max": 0.9}}
    got = summary_values(s)
    assert got["summary/loss_end"] == 1.5 and got["summary/throughput"] == 321.0
    assert got["summary/throughput_unit"] == "tokens/s/device" and got["summary/nan_iterations"] == 0
    assert got["summary/critic/score/mean/last"] == 0.9 and "summary/peak_memory_mb" not in got
