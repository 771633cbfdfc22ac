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

The trackers are the registered ones (`ascendfactory.trackers.registry`: TensorBoard, MLflow, W&B, SwanLab,
and any a plugin registers); each one's section is its record's settings model (in its module:
`trackers/mlflow.py`, ...), and a name no tracker has is refused with the valid names. Offline first: with no
location given, MLflow writes a SQLite store under `{af_output_dir}/trackers/mlflow/`, W&B runs offline into
`{af_output_dir}/trackers/`, SwanLab runs in local mode into `{af_output_dir}/trackers/swanlog/`,
TensorBoard into `{af_output_dir}/tensorboard/`. Credentials never go in the file: MLflow, W&B and SwanLab
read them from the environment (`MLFLOW_TRACKING_TOKEN`, `MLFLOW_TRACKING_USERNAME`/`_PASSWORD`,
`WANDB_API_KEY`, `SWANLAB_API_KEY`).

Each backend reaches a tracker through its framework's own mechanism (`Backend.tracker_keys`, or the rows a
tracker's record brings for it); a tracker the framework cannot reach is a configuration error naming the
backend.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    create_model,
    model_serializer,
    model_validator,
)

from ascendfactory.plan import TrackerSpec

if TYPE_CHECKING:  # the tracker records load when `report_to` is used, not with every experiment
    from ascendfactory.registry import Registry
    from ascendfactory.trackers.base import Tracker, TrackerSettings

SHARED = ("project", "run_name")  # the keys of `report_to` that are no tracker


def _registry() -> Registry[Tracker]:
    from ascendfactory.trackers.registry import TRACKERS

    return TRACKERS


def find_tracker(name: str) -> Tracker | None:
    return _registry().find(name)


def tracker_names() -> list[str]:
    return _registry().names()


def _unknown(names: list[str]) -> str:
    return f"unknown tracker(s) {', '.join(map(repr, names))}; use: {', '.join(tracker_names())}"


@functools.lru_cache(maxsize=64)
def _model(names: tuple[str, ...]) -> type[BaseModel]:
    """A model with one field per named tracker (its settings model) and the shared keys."""
    fields: dict[str, Any] = {name: (_registry().get(name).settings | None, None) for name in names}
    return create_model(
        "ReportToSections",
        __config__=ConfigDict(extra="forbid"),
        project=(str | None, None),
        run_name=(str | None, None),
        **fields,
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
    _trackers: dict[str, Any] = {}

    @model_validator(mode="wrap")
    @classmethod
    def _by_registry(cls, data: Any, handler: Any) -> ReportTo:
        """`[mlflow, wandb]` or `mlflow` -> `{mlflow: {}, wandb: {}}`; `mlflow: null` (long form) -> {}; each
        tracker's section validated by its record's settings model."""
        if isinstance(data, ReportTo):
            return data
        if isinstance(data, str):
            data = [data]
        if isinstance(data, (list, tuple)):
            unknown = [str(x) for x in data if not isinstance(x, str) or find_tracker(x) is None]
            if unknown:
                raise ValueError(_unknown(unknown))
            data = {_registry().canonical(x): {} for x in data}
        if not isinstance(data, dict):
            return handler(data)  # pydantic's own message for a wrong type
        unknown = [
            str(k) for k in data if k not in SHARED and (not isinstance(k, str) or find_tracker(k) is None)
        ]
        if unknown:
            raise ValueError(_unknown(unknown))
        sections = {
            (k if k in SHARED else _registry().canonical(k)): ({} if k not in SHARED and v is None else v)
            for k, v in data.items()
        }
        names = tuple(k for k in sections if k not in SHARED)
        validated = _model(names).model_validate(sections)
        self = handler({k: v for k, v in sections.items() if k in SHARED})
        self._trackers = {n: getattr(validated, n) for n in tracker_names() if n in names}
        return self

    @model_serializer(mode="wrap")
    def _with_sections(self, handler: Any, info: SerializationInfo) -> dict[str, Any]:
        out = handler(self)
        out.update({n: settings.model_dump(mode=info.mode) for n, settings in self._trackers.items()})
        return out

    @classmethod
    def section_names(cls) -> list[str]:
        """Every tracker's name: the keys `report_to` takes beside `project` and `run_name`."""
        return tracker_names()

    @classmethod
    def section_model(cls, name: str) -> type[TrackerSettings] | None:
        """The settings model of the tracker `name` (its section of `report_to`)."""
        tracker = find_tracker(name)
        return tracker.settings if tracker is not None else None

    def names(self) -> list[str]:
        """The trackers named, in report order."""
        return list(self._trackers)

    def settings(self, name: str) -> TrackerSettings | None:
        return self._trackers.get(name)


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
        settings = report.settings(name)
        assert settings is not None
        from ascendfactory.trackers.base import RunNames

        names = RunNames(
            output_dir=root,
            project=settings.project or report.project or model_name,
            run_name=settings.run_name or report.run_name or exp_name,
            tensorboard_dir=tensorboard_dir,
        )
        specs.append(_registry().get(name).resolve(settings, names))
    return tuple(specs)
