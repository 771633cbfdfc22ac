"""Read a run's trackers back with the trackers' own tools: MLflow's client on the run's store, W&B's
offline run files through wandb's own record reader (`wandb.sdk.internal.datastore`, the format
`wandb sync` uploads)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def run_ids(out: Path) -> dict[str, dict[str, str]]:
    return json.loads((out / "trackers" / "runs.json").read_text())


def mlflow_run(out: Path) -> tuple[Any, Any]:
    """(MlflowClient, the run) named in the output tree's `trackers/runs.json`."""
    from mlflow import MlflowClient

    entry = run_ids(out)["mlflow"]
    client = MlflowClient(tracking_uri=entry["location"])
    return client, client.get_run(entry["run_id"])


def mlflow_series(client: Any, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, key)}


@dataclass
class WandbSegment:
    """One offline run folder (`offline-run-<time>-<id>`): what it recorded."""

    run_id: str = ""
    project: str = ""
    name: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


def wandb_segments(root: Path) -> list[WandbSegment]:
    """Every offline run under `root` (W&B's `dir`), oldest first, read with wandb's own reader."""
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    segments = []
    for path in sorted(root.glob("wandb/offline-run-*/run-*.wandb")):
        seg = WandbSegment(files=sorted(p.name for p in (path.parent / "files").iterdir()))
        store = datastore.DataStore()
        store.open_for_scan(str(path))
        while (data := store.scan_data()) is not None:
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                seg.run_id, seg.project, seg.name = (
                    record.run.run_id,
                    record.run.project,
                    record.run.display_name,
                )
                seg.config.update({u.key: json.loads(u.value_json) for u in record.run.config.update})
            elif kind == "history":
                seg.history.append(
                    {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                )
            elif kind == "summary":
                seg.summary.update(
                    {u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in record.summary.update}
                )
            elif kind == "config":
                seg.config.update({u.key: json.loads(u.value_json) for u in record.config.update})
        segments.append(seg)
    return segments


def wandb_series(segments: list[WandbSegment], key: str) -> dict[int, float]:
    return {h["_step"]: h[key] for seg in segments for h in seg.history if key in h}


def check_quickstart_trackers(out: Path, loss_log: Path, summary: dict[str, Any]) -> None:
    """The quickstart with `report_to: [mlflow, wandb]`: every logged iteration's loss, the parameters, the
    pipeline's summary and artifacts, in MLflow's store and in W&B's offline run."""
    import pytest

    from ascendfactory.metrics import parse_file

    logged = {r.step: r.metrics["lm loss"] for r in parse_file(loss_log) if "lm loss" in r.metrics}
    client, run = mlflow_run(out)
    rid = run.info.run_id
    assert run.info.status == "FINISHED" and run.info.run_name == "quickstart-sft"
    assert mlflow_series(client, rid, "loss") == pytest.approx(logged, rel=1e-4)
    assert sorted(mlflow_series(client, rid, "learning-rate")) == sorted(logged)
    params = run.data.params
    assert params["experiment.backend_config.training.lr"] == "0.003"  # the experiment, from the pipeline
    assert params["lr"] == "0.003" and params["train_iters"] == "24"  # the trainer's resolved arguments
    assert {a.path for a in client.list_artifacts(rid)} >= {"training_loss.png", "exp-config.yaml"}
    metrics = run.data.metrics
    assert metrics["summary/loss_end"] == pytest.approx(summary["loss_end"])
    assert metrics["summary/throughput"] == pytest.approx(summary["throughput"]["value"])
    assert metrics["summary/nan_iterations"] == 0
    assert run.data.tags["summary/throughput_unit"] == "tokens/s/device"

    segments = wandb_segments(out / "trackers")
    wandb_id = run_ids(out)["wandb"]["run_id"]
    assert segments and {s.run_id for s in segments} == {wandb_id}
    assert wandb_series(segments, "loss") == pytest.approx(logged, rel=1e-4)
    assert segments[0].project == "tiny-demo" and segments[0].name == "quickstart-sft"
    assert segments[-1].summary["summary/throughput"] == pytest.approx(summary["throughput"]["value"])
    assert segments[-1].config["experiment.backend_config.training.lr"] == "0.003"
    assert {"training_loss.png", "exp-config.yaml"} <= set(segments[-1].files)


def check_rerun_continues(out: Path, ids_before: str) -> None:
    """The same command run again reports into the same MLflow run and the same W&B run id."""
    assert (out / "trackers" / "runs.json").read_text() == ids_before
    client, run = mlflow_run(out)
    assert len(client.search_runs([run.info.experiment_id])) == 1
    # a re-run with nothing left to train adds no summary: the training's own wall time stays the only one
    assert len(client.get_metric_history(run.info.run_id, "summary/wall_s")) == 1
    assert len(mlflow_series(client, run.info.run_id, "loss")) == 24
    segments = wandb_segments(out / "trackers")
    assert len(segments) >= 3 and {s.run_id for s in segments} == {run_ids(out)["wandb"]["run_id"]}


def check_llamafactory_mlflow(out: Path, logged: dict[int, float], summary: dict[str, Any]) -> None:
    """LLaMA-Factory with `report_to: [mlflow]`: transformers' MLflow integration, inside LLaMA-Factory's
    environment, logged every step's loss and its arguments into the run the pipeline opened, which also
    holds the experiment's parameters, the summary and the artifacts."""
    import pytest

    client, run = mlflow_run(out)
    rid = run.info.run_id
    assert run.info.status == "FINISHED"
    assert mlflow_series(client, rid, "loss") == pytest.approx(logged, rel=1e-3)
    params = run.data.params
    assert params["learning_rate"] == "0.001"  # transformers' TrainingArguments, logged by the framework
    assert (
        params["experiment.backend_config.training.learning_rate"] == "0.001"
    )  # the experiment, by the pipeline
    assert {a.path for a in client.list_artifacts(rid)} >= {"training_loss.png", "exp-config.yaml"}
    assert run.data.metrics["summary/throughput"] == pytest.approx(summary["throughput"]["value"])
    assert len(client.search_runs([run.info.experiment_id])) == 1
