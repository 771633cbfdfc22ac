"""SwanLab through the `swanlab` SDK: local mode by default (`swanlab watch <logdir>` shows it). Its run ends
in `swanlab.finish(state=)`: success or crashed, and in newer clients aborted (an interrupted run; an older
client, which refuses the word, records it crashed)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.base import (
    RunNames,
    RunState,
    Sink,
    TrackerSettings,
    finite,
    import_client,
    sdk_tracker,
)

STATES = {"finished": "success", "failed": "crashed", "killed": "aborted"}


class SwanlabSettings(TrackerSettings):
    """SwanLab: local mode by default."""

    credentials = "SWANLAB_API_KEY"
    dir: str | None = Field(
        None, description="SwanLab's log folder; default {af_output_dir}/trackers/swanlog."
    )
    mode: Literal["local", "offline", "cloud", "disabled"] = Field(
        "local", description="local (default: no account, no network), offline, cloud, or disabled."
    )


def resolve(settings: SwanlabSettings, names: RunNames) -> TrackerSpec:
    where = os.path.abspath(settings.dir or names.tree.trackers("swanlog"))
    return TrackerSpec("swanlab", names.project, names.run_name, location=where, mode=settings.mode)


class SwanlabSink(Sink):
    """One SwanLab experiment. Local mode has no resume: a continued run is a new experiment."""

    name = "swanlab"

    def __init__(self, spec: TrackerSpec, **_: Any) -> None:
        self.swanlab = import_client("swanlab", "swanlab", TRACKER.install_hint())
        os.makedirs(spec.location, exist_ok=True)
        self.run = self.swanlab.init(
            project=spec.project,
            experiment_name=spec.run_name,
            logdir=spec.location,
            mode=spec.mode or "local",
        )
        self.run_id = getattr(getattr(self.run, "public", None), "run_id", None)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.swanlab.config.update(dict(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.swanlab.log(finite(metrics), step=int(step))

    def log_summary(self, values: Mapping[str, float | str]) -> None:
        numbers = finite(values)
        if numbers:
            self.swanlab.log(numbers)
        texts = {k: self.swanlab.Text(str(v)) for k, v in values.items() if k not in numbers}
        if texts:
            self.swanlab.log(texts)

    def log_artifact(self, path: str) -> None:
        name = os.path.basename(path)
        if path.endswith(".png"):
            self.swanlab.log({name: self.swanlab.Image(path)})
        else:
            with open(path, encoding="utf-8") as f:
                self.swanlab.log({name: self.swanlab.Text(f.read())})

    def close(self, *, state: RunState = "finished") -> None:
        try:
            self.swanlab.finish(state=STATES[state])
        except (ValueError, TypeError, KeyError, AttributeError):  # a client before `aborted`
            self.swanlab.finish(state="crashed")


def tracker_env(spec: TrackerSpec) -> dict[str, str]:
    return {
        "SWANLAB_MODE": spec.mode or "local",
        "SWANLAB_LOG_DIR": spec.location,
        "SWANLAB_PROJ_NAME": spec.project,
        "SWANLAB_EXP_NAME": spec.run_name,
    }


def from_env(environ: Mapping[str, str]) -> tuple[TrackerSpec, str | None]:
    spec = TrackerSpec(
        "swanlab",
        project=environ.get("SWANLAB_PROJ_NAME", "ascendfactory"),
        run_name=environ.get("SWANLAB_EXP_NAME", "train"),
        location=environ.get("SWANLAB_LOG_DIR", "swanlog"),
        mode=environ.get("SWANLAB_MODE", "local"),
    )
    return spec, None


TRACKER = sdk_tracker(
    "swanlab",
    version="0.5",
    offline_mode="local",
    description="SwanLab: local-mode experiments under the output tree, or its cloud",
    settings=SwanlabSettings,
    resolve=resolve,
    env=tracker_env,
    open=SwanlabSink,
    states=STATES,
    from_env=from_env,
)
