"""TensorBoard: event files the framework writes itself (its own writer); the pipeline opens no run of it."""

from __future__ import annotations

import os

from pydantic import Field

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.base import RunNames, Tracker, TrackerSettings


class TensorboardSettings(TrackerSettings):
    """TensorBoard event files (the framework's own writer)."""

    dir: str | None = Field(
        None,
        description="Event file folder; default `tensorboard.tensorboard_dir`, else "
        "{af_output_dir}/tensorboard.",
    )


def resolve(settings: TensorboardSettings, names: RunNames) -> TrackerSpec:
    where = settings.dir or names.tensorboard_dir or names.tree.tensorboard_dir
    return TrackerSpec("tensorboard", names.project, names.run_name, location=os.path.abspath(where))


def tracker_env(spec: TrackerSpec) -> dict[str, str]:
    return {"TENSORBOARD_DIR": spec.location}


TRACKER = Tracker(
    name="tensorboard",
    description="TensorBoard event files, written by the framework",
    settings=TensorboardSettings,
    resolve=resolve,
    env=tracker_env,
)
