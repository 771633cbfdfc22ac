"""MLflow through its own client (`MlflowClient`): a local SQLite store by default, any tracking URI."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.sinks import Sink, TrackerError, client, finite

BATCH = 100  # MLflow's log_batch limit on params per call (and well under its metric limit)
PARAM_LEN = 6000  # MLflow's longest parameter value
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_\-. :/]")  # MLflow's rule for metric, parameter and tag names


def mlflow_name(key: str) -> str:
    """`key` with what MLflow refuses in a name replaced by `_` (`elapsed time per iteration (ms)`)."""
    return _NOT_IN_NAMES.sub("_", str(key))[:250]


class MlflowSink(Sink):
    """One MLflow run: created in the experiment `spec.project` (its artifacts under `spec.artifacts` for a
    local store), or continued by `run_id`."""

    name = "mlflow"

    def __init__(self, spec: TrackerSpec, *, run_id: str | None = None) -> None:
        mlflow = client("mlflow")
        if spec.location.startswith("sqlite:///"):
            os.makedirs(os.path.dirname(spec.location.removeprefix("sqlite:///")) or ".", exist_ok=True)
        try:
            self.client = mlflow.MlflowClient(tracking_uri=spec.location or None)  # "": MLflow's default
            self.run_id = run_id if run_id and self._exists(run_id) else self._create(spec)
        except mlflow.exceptions.MlflowException as e:
            raise TrackerError(f"report_to mlflow: cannot open {spec.location}: {e.message}") from None
        self.client.update_run(self.run_id, status="RUNNING")
        self._params = set(self.client.get_run(self.run_id).data.params)

    def _exists(self, run_id: str) -> bool:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.get_run(run_id).info.lifecycle_stage == "active"
        except MlflowException:
            return False

    def _create(self, spec: TrackerSpec) -> str:
        experiment = self.client.get_experiment_by_name(spec.project)
        if experiment is None:
            local = "://" not in spec.location or spec.location.startswith(("sqlite:", "file:"))
            where = "file://" + spec.artifacts if spec.artifacts and local else None
            experiment_id = self.client.create_experiment(spec.project, artifact_location=where)
        else:
            experiment_id = experiment.experiment_id
        return self.client.create_run(experiment_id, run_name=spec.run_name).info.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        """New parameters only: a continued run keeps the values it started with (MLflow refuses a change)."""
        from mlflow.entities import Param

        new = [(mlflow_name(k), str(v)[:PARAM_LEN]) for k, v in params.items()]
        new = [(k, v) for k, v in dict(new).items() if k not in self._params]
        for i in range(0, len(new), BATCH):
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in new[i : i + BATCH]])
        self._params.update(k for k, _ in new)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(mlflow_name(k), v, now, int(step)) for k, v in finite(metrics).items()]
        for i in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + BATCH])

    def log_summary(self, values: Mapping[str, float | str]) -> None:
        numbers = finite(values)
        self.log_metrics(numbers, step=0)
        for k, v in values.items():
            if k not in numbers:
                self.client.set_tag(self.run_id, mlflow_name(k), str(v))

    def log_artifact(self, path: str) -> None:
        self.client.log_artifact(self.run_id, path)

    def close(self, *, ok: bool = True) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if ok else "FAILED")
