"""The sinks: the null object, the container that drops a failing tracker, MLflow's real client on a local
store (a run created, reported to, and continued by its id), and a missing client named with its extra."""

from __future__ import annotations

import sys

import pytest

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers import Sink, Sinks, TrackerError, flatten, open_run


class Recording(Sink):
    name = "recording"

    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[tuple] = []
        self.fail_on = fail_on

    def log_metrics(self, metrics, step):
        if self.fail_on == "log_metrics":
            raise RuntimeError("store gone")
        self.calls.append(("metrics", dict(metrics), step))

    def close(self, *, state="finished"):
        self.calls.append(("close", state))


def test_the_container_drops_a_failing_sink_after_one_warning_and_keeps_the_others():
    good, bad, warnings = Recording(), Recording("log_metrics"), []
    sinks = Sinks([Sink(), bad, good], warn=warnings.append)
    assert sinks.sinks == [bad, good]  # the null sink is no sink
    sinks.log_metrics({"loss": 1.0}, 1)
    sinks.log_metrics({"loss": 0.5}, 2)
    sinks.log_metrics({}, 3)  # nothing to log: no call
    sinks.close(state="failed")
    assert good.calls == [("metrics", {"loss": 1.0}, 1), ("metrics", {"loss": 0.5}, 2), ("close", "failed")]
    assert len(warnings) == 1 and "recording: log_metrics failed (RuntimeError: store gone)" in warnings[0]
    assert not Sinks([Sink()])


def test_flatten_names_nested_keys_with_dots():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": "1", "a.c": "[1, 2]", "d": "null"}


def test_a_missing_client_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "swanlab", None)  # import swanlab -> ImportError
    with pytest.raises(TrackerError, match=r'pip install "ascendfactory-cli\[swanlab\]"'):
        open_run(TrackerSpec("swanlab", "p", "r", location="/nowhere"))


@pytest.mark.integration  # MLflow creates its SQLite store (~10-30 s here)
def test_mlflow_run_on_a_local_store_is_created_reported_and_continued(tmp_path):
    pytest.importorskip("mlflow")
    spec = TrackerSpec(
        "mlflow",
        "proj",
        "run-1",
        location=f"sqlite:///{tmp_path}/store/mlflow.db",
        artifacts=str(tmp_path / "artifacts"),
    )
    first = open_run(spec)
    first.log_params({"lr": "0.1", "seed": "1"})
    first.log_metrics({"loss": 2.0, "bad": "text"}, step=1)
    first.log_summary({"summary/throughput": 12.5, "summary/unit": "tokens/s"})
    (tmp_path / "plot.png").write_bytes(b"png")
    first.log_artifact(str(tmp_path / "plot.png"))
    first.close(state="finished")

    again = open_run(spec, run_id=first.run_id)  # a resumed segment: same run, changed value kept as it was
    assert again.run_id == first.run_id
    again.log_params({"lr": "0.2", "iters": "10"})
    again.log_metrics({"loss": 1.0}, step=2)
    again.close(state="failed")

    from mlflow import MlflowClient

    client = MlflowClient(spec.location)
    run = client.get_run(first.run_id)
    assert run.info.status == "FAILED" and run.info.run_name == "run-1"
    assert run.data.params == {"lr": "0.1", "seed": "1", "iters": "10"}
    assert {m.step: m.value for m in client.get_metric_history(first.run_id, "loss")} == {1: 2.0, 2: 1.0}
    assert run.data.metrics["summary/throughput"] == 12.5 and run.data.tags["summary/unit"] == "tokens/s"
    assert [a.path for a in client.list_artifacts(first.run_id)] == ["plot.png"]
    assert (tmp_path / "artifacts").is_dir()  # the experiment's artifacts under the output tree
    assert len(client.search_runs([run.info.experiment_id])) == 1
    assert open_run(spec, run_id="0" * 32).run_id != first.run_id  # an unknown id: a new run
