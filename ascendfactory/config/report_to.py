"""`report_to`: the experiment trackers a run reports to, modelled once.

Short form, every tracker with its defaults:

    report_to: [mlflow, wandb]

Long form, settings per tracker (any left out keep their defaults):

    report_to:
      project: qwen-sft             # every tracker's project / experiment (default: af_model_name)
      run_name: lora-4k             # every tracker's run name (default: exp_name)
      mlflow: {tracking_uri: http://mlflow.internal:5000}
      wandb: {mode: offline}
      swanlab: {mode: local}
      tensorboard: {}

Offline first: with no location given, MLflow writes a SQLite store under `{af_output_dir}/trackers/mlflow/`,
W&B runs offline into `{af_output_dir}/trackers/`, SwanLab runs in local mode into
`{af_output_dir}/trackers/swanlog/`, TensorBoard into `{af_output_dir}/tensorboard/`. Credentials never go in
the file: MLflow, W&B and SwanLab read them from the environment (`MLFLOW_TRACKING_TOKEN`,
`MLFLOW_TRACKING_USERNAME`/`_PASSWORD`, `WANDB_API_KEY`, `SWANLAB_API_KEY`).

Each backend reaches a tracker through its framework's own mechanism (`Backend.tracker_keys`); a tracker the
framework cannot reach is a configuration error naming the backend.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ascendfactory.plan import TRACKERS, TrackerSpec

CREDENTIAL_ENV = {
    "mlflow": "MLFLOW_TRACKING_TOKEN (or MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD)",
    "wandb": "WANDB_API_KEY",
    "swanlab": "SWANLAB_API_KEY",
}
_CREDENTIAL_KEYS = ("api_key", "apikey", "token", "password", "key")


class _Tracker(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(
        None, min_length=1, description="Project (W&B, SwanLab) or experiment (MLflow); default `project`."
    )
    run_name: str | None = Field(None, min_length=1, description="The run's name; default `run_name`.")

    @model_validator(mode="before")
    @classmethod
    def _no_credentials(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if str(key).lower() in _CREDENTIAL_KEYS:
                    name = cls.__name__.removesuffix("Tracker").lower()
                    raise ValueError(
                        f"'{key}': credentials are read from the environment only; remove it and export "
                        f"{CREDENTIAL_ENV.get(name, 'the tracker’s credential variable')}"
                    )
        return data


class TensorboardTracker(_Tracker):
    """TensorBoard event files (the framework's own writer)."""

    dir: str | None = Field(
        None,
        description="Event file folder; default `tensorboard.tensorboard_dir`, else "
        "{af_output_dir}/tensorboard.",
    )


class MlflowTracker(_Tracker):
    """MLflow: a local SQLite store under the output tree unless a tracking URI is given."""

    tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI (http(s)://..., sqlite:///..., databricks); default "
        "sqlite:///{af_output_dir}/trackers/mlflow/mlflow.db. Env MLFLOW_TRACKING_URI is not read: write it "
        "here.",
    )


class WandbTracker(_Tracker):
    """Weights & Biases: offline by default (`wandb sync` uploads the run later)."""

    dir: str | None = Field(
        None, description="Where wandb writes its run folder; default {af_output_dir}/trackers."
    )
    mode: Literal["offline", "online", "disabled"] = Field(
        "offline", description="offline (default: no account, no network), online, or disabled."
    )
    entity: str | None = Field(None, min_length=1, description="W&B team or user (online mode).")


class SwanlabTracker(_Tracker):
    """SwanLab: local mode by default."""

    dir: str | None = Field(
        None, description="SwanLab's log folder; default {af_output_dir}/trackers/swanlog."
    )
    mode: Literal["local", "offline", "cloud", "disabled"] = Field(
        "local", description="local (default: no account, no network), offline, cloud, or disabled."
    )


class ReportTo(BaseModel):
    """The trackers the run reports to, each with its settings (the module docstring shows both forms)."""

    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(
        None,
        min_length=1,
        description="Project / MLflow experiment for every tracker; default af_model_name.",
    )
    run_name: str | None = Field(
        None, min_length=1, description="Run name for every tracker; default exp_name."
    )
    tensorboard: TensorboardTracker | None = Field(None, description="TensorBoard settings.")
    mlflow: MlflowTracker | None = Field(None, description="MLflow settings.")
    wandb: WandbTracker | None = Field(None, description="Weights & Biases settings.")
    swanlab: SwanlabTracker | None = Field(None, description="SwanLab settings.")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        """`[mlflow, wandb]` or `mlflow` -> `{mlflow: {}, wandb: {}}`; `mlflow: null` (long form) -> {}."""
        if isinstance(data, str):
            data = [data]
        if isinstance(data, (list, tuple)):
            unknown = [x for x in data if x not in TRACKERS]
            if unknown:
                raise ValueError(
                    f"unknown tracker(s) {', '.join(map(repr, unknown))}; use: {', '.join(TRACKERS)}"
                )
            return {name: {} for name in data}
        if isinstance(data, dict):
            return {k: ({} if k in TRACKERS and v is None else v) for k, v in data.items()}
        return data

    def names(self) -> list[str]:
        return [n for n in TRACKERS if getattr(self, n) is not None]


def tracker_specs(
    report: ReportTo | None,
    *,
    output_dir: str,
    model_name: str,
    exp_name: str,
    tensorboard_dir: str | None = None,
) -> tuple[TrackerSpec, ...]:
    """Every tracker of `report` with its defaults filled in (paths absolute: frameworks run elsewhere)."""
    if report is None:
        return ()
    root = os.path.abspath(output_dir)
    specs = []
    for name in report.names():
        t = getattr(report, name)
        project = t.project or report.project or model_name
        run_name = t.run_name or report.run_name or exp_name
        if name == "tensorboard":
            where = t.dir or tensorboard_dir or os.path.join(root, "tensorboard")
            spec = TrackerSpec(name, project, run_name, location=os.path.abspath(where))
        elif name == "mlflow":
            uri = t.tracking_uri or "sqlite:///" + os.path.join(root, "trackers", "mlflow", "mlflow.db")
            spec = TrackerSpec(
                name,
                project,
                run_name,
                location=uri,
                artifacts=os.path.join(root, "trackers", "mlflow", "artifacts"),
            )
        elif name == "wandb":
            where = os.path.abspath(t.dir or os.path.join(root, "trackers"))
            spec = TrackerSpec(name, project, run_name, location=where, mode=t.mode, entity=t.entity)
        else:
            where = os.path.abspath(t.dir or os.path.join(root, "trackers", "swanlog"))
            spec = TrackerSpec(name, project, run_name, location=where, mode=t.mode)
        specs.append(spec)
    return tuple(specs)
