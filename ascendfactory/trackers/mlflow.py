"""MLflow through its own client (`MlflowClient`): a local SQLite store under the output tree unless a
tracking URI is given. Its run states are MLflow's `RunStatus` names (mlflow/entities/run_status.py):
FINISHED, FAILED, KILLED."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.base import (
    RunNames,
    RunState,
    Sink,
    Tracker,
    TrackerError,
    TrackerSettings,
    finite,
    import_client,
)

BATCH = 100  # MLflow's log_batch limit on params per call (and well under its metric limit)
PARAM_LEN = 6000  # MLflow's longest parameter value
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_\-. :/]")  # MLflow's rule for metric, parameter and tag names
STATES = {"finished": "FINISHED", "failed": "FAILED", "killed": "KILLED"}
# The client and the local SQLite store (MLflow 3 keeps the file store in maintenance). mlflow-skinny is the
# client without MLflow's server and UI (about 40 MB); `mlflow ui` and `search_runs` as a DataFrame need the
# full `mlflow` package (flask, pandas).
PACKAGES = ("mlflow-skinny>=2.9", "sqlalchemy>=2.0", "alembic>=1.12")


def mlflow_name(key: str) -> str:
    """`key` with what MLflow refuses in a name replaced by `_` (`elapsed time per iteration (ms)`)."""
    return _NOT_IN_NAMES.sub("_", str(key))[:250]


class MlflowSettings(TrackerSettings):
    """MLflow: a local SQLite store under the output tree unless a tracking URI is given."""

    credentials = "MLFLOW_TRACKING_TOKEN (or MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD)"
    tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI (http(s)://..., sqlite:///..., databricks); default "
        "sqlite:///{af_output_dir}/trackers/mlflow/mlflow.db. Env MLFLOW_TRACKING_URI is not read: write it "
        "here.",
    )


def resolve(settings: MlflowSettings, names: RunNames) -> TrackerSpec:
    uri = settings.tracking_uri or "sqlite:///" + names.tree.trackers("mlflow", "mlflow.db")
    return TrackerSpec(
        "mlflow",
        names.project,
        names.run_name,
        location=uri,
        artifacts=names.tree.trackers("mlflow", "artifacts"),
    )


class MlflowSink(Sink):
    """One MLflow run: created in the experiment `spec.project` (its artifacts under `spec.artifacts` for a
    local store), or continued by `run_id`. A continued run is never given a step twice: steps up to the
    newest one it already has are left out (a rerun that starts again below it, after an interrupt)."""

    name = "mlflow"

    def __init__(self, spec: TrackerSpec, *, run_id: str | None = None, **_: Any) -> None:
        mlflow = import_client("mlflow", "mlflow", TRACKER.install_hint())
        if spec.location.startswith("sqlite:///"):
            os.makedirs(os.path.dirname(spec.location.removeprefix("sqlite:///")) or ".", exist_ok=True)
        try:
            self.client = mlflow.MlflowClient(tracking_uri=spec.location or None)  # "": MLflow's default
            continued = bool(run_id) and self._exists(str(run_id))
            self.run_id = str(run_id) if continued else self._create(spec)
        except mlflow.exceptions.MlflowException as e:
            raise TrackerError(f"report_to mlflow: cannot open {spec.location}: {e.message}") from None
        self.client.update_run(self.run_id, status="RUNNING")
        data = self.client.get_run(self.run_id).data
        self._params = set(data.params)
        self.logged_up_to = self._newest_step(data.metrics) if continued else -1

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
        return str(self.client.create_run(experiment_id, run_name=spec.run_name).info.run_id)

    def _newest_step(self, metrics: Mapping[str, float]) -> int:
        """The highest step any training metric of the run has (the summary's figures, at step 0, aside)."""
        steps = [
            m.step
            for key in metrics
            if not key.startswith("summary/")
            for m in self.client.get_metric_history(self.run_id, key)
        ]
        return max(steps, default=-1)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """New parameters only: a continued run keeps the values it started with (MLflow refuses a change)."""
        from mlflow.entities import Param

        new = [(mlflow_name(k), str(v)[:PARAM_LEN]) for k, v in params.items()]
        new = [(k, v) for k, v in dict(new).items() if k not in self._params]
        for i in range(0, len(new), BATCH):
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in new[i : i + BATCH]])
        self._params.update(k for k, _ in new)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if int(step) <= self.logged_up_to:
            return
        self._log(metrics, int(step))

    def _log(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(mlflow_name(k), v, now, step) for k, v in finite(metrics).items()]
        for i in range(0, len(items), BATCH):
            self.client.log_batch(self.run_id, metrics=items[i : i + BATCH])

    def log_summary(self, values: Mapping[str, float | str]) -> None:
        numbers = finite(values)
        self._log(numbers, 0)
        for k, v in values.items():
            if k not in numbers:
                self.client.set_tag(self.run_id, mlflow_name(k), str(v))

    def log_artifact(self, path: str) -> None:
        self.client.log_artifact(self.run_id, path)

    def close(self, *, state: RunState = "finished") -> None:
        self.client.set_terminated(self.run_id, status=STATES[state])


def tracker_env(spec: TrackerSpec) -> dict[str, str]:
    return {"MLFLOW_TRACKING_URI": spec.location, "MLFLOW_EXPERIMENT_NAME": spec.project}


def run_env(spec: TrackerSpec, run_id: str) -> dict[str, str]:
    """MLflow's `start_run` continues `MLFLOW_RUN_ID` (every framework's integration calls it)."""
    return {"MLFLOW_RUN_ID": run_id}


def from_env(environ: Mapping[str, str]) -> tuple[TrackerSpec, str | None]:
    spec = TrackerSpec(
        "mlflow",
        project=environ.get("MLFLOW_EXPERIMENT_NAME", "Default"),
        run_name="train",
        location=environ.get("MLFLOW_TRACKING_URI", ""),
    )
    return spec, environ.get("MLFLOW_RUN_ID") or None


def export(dest: str, project: str, run_name: str) -> TrackerSpec:
    """A tracking URI as is; a folder gets a SQLite store (`<DEST>/mlflow.db`, artifacts in
    `<DEST>/artifacts`)."""
    if "://" in dest or dest.startswith(("sqlite:", "databricks")):
        return TrackerSpec("mlflow", project, run_name, location=dest)
    root = os.path.abspath(dest)
    return TrackerSpec(
        "mlflow",
        project,
        run_name,
        location="sqlite:///" + os.path.join(root, "mlflow.db"),
        artifacts=os.path.join(root, "artifacts"),
    )


TRACKER = Tracker(
    name="mlflow",
    description="MLflow runs: a SQLite store under the output tree, or any tracking URI",
    settings=MlflowSettings,
    resolve=resolve,
    client=("mlflow",),
    packages=PACKAGES,
    extra="mlflow",
    env=tracker_env,
    run_env=run_env,
    open=MlflowSink,
    run_ids="create",
    states=STATES,
    from_env=from_env,
    export=export,
)
