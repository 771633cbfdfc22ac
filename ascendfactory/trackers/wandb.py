"""Weights & Biases through the `wandb` SDK: offline by default (`wandb sync <dir>` uploads it later). Its SDK
ends a run by exit code only (`Run.finish(exit_code=)`: 0 finished, anything else failed; "killed" is the
server's word for a run stopped from its UI), so an interrupted run ends failed with the shell's exit code
for an interrupt, 130."""

from __future__ import annotations

import os
import shutil
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
    new_run_id,
    sdk_tracker,
)

EXIT_CODES = {"finished": 0, "failed": 1, "killed": 130}


class WandbSettings(TrackerSettings):
    """Weights & Biases: offline by default (`wandb sync` uploads the run later)."""

    credentials = "WANDB_API_KEY"
    dir: str | None = Field(
        None, description="Where wandb writes its run folder; default {af_output_dir}/trackers."
    )
    mode: Literal["offline", "online", "disabled"] = Field(
        "offline", description="offline (default: no account, no network), online, or disabled."
    )
    entity: str | None = Field(None, min_length=1, description="W&B team or user (online mode).")


def resolve(settings: WandbSettings, names: RunNames) -> TrackerSpec:
    where = os.path.abspath(settings.dir or names.tree.trackers())
    return TrackerSpec(
        "wandb", names.project, names.run_name, location=where, mode=settings.mode, entity=settings.entity
    )


class WandbSink(Sink):
    """One W&B run, resumed by id (`resume="allow"`): an offline run continued later is a new folder
    `offline-run-<time>-<id>` with the same id, which `wandb sync` appends to the same run."""

    name = "wandb"

    def __init__(self, spec: TrackerSpec, *, run_id: str | None = None, quiet: bool = True) -> None:
        wandb = import_client("wandb", "wandb", TRACKER.install_hint())
        os.makedirs(spec.location, exist_ok=True)
        self.run_id = run_id or new_run_id()
        mode = spec.mode or os.environ.get("WANDB_MODE", "online")
        self.run = wandb.init(
            project=spec.project,
            name=spec.run_name,
            entity=spec.entity,
            dir=spec.location,
            mode=spec.mode,  # None: wandb's own WANDB_MODE
            id=self.run_id,
            resume="allow" if mode == "online" else None,  # offline: a new folder with the same id
            settings=wandb.Settings(quiet=quiet, silent=quiet, console="off"),
        )

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.run.config.update(dict(params), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(finite(metrics), step=int(step))

    def log_summary(self, values: Mapping[str, float | str]) -> None:
        self.run.summary.update(dict(values))

    def log_artifact(self, path: str) -> None:
        """Copied into the run's files (what `wandb sync` uploads with it)."""
        shutil.copy2(path, os.path.join(self.run.dir, os.path.basename(path)))

    def close(self, *, state: RunState = "finished") -> None:
        self.run.finish(exit_code=EXIT_CODES[state])


def tracker_env(spec: TrackerSpec) -> dict[str, str]:
    env = {
        "WANDB_MODE": spec.mode or "offline",
        "WANDB_DIR": spec.location,
        "WANDB_PROJECT": spec.project,
        "WANDB_NAME": spec.run_name,
    }
    if spec.entity:
        env["WANDB_ENTITY"] = spec.entity
    return env


def run_env(spec: TrackerSpec, run_id: str) -> dict[str, str]:
    """`wandb.init` resumes `WANDB_RUN_ID` with `WANDB_RESUME=allow`."""
    return {"WANDB_RUN_ID": run_id, "WANDB_RESUME": "allow"}


TRACKER = sdk_tracker(
    "wandb",
    version="0.16",
    offline_mode="offline",
    description="Weights & Biases: offline runs under the output tree (wandb sync), or online",
    settings=WandbSettings,
    resolve=resolve,
    env=tracker_env,
    run_env=run_env,
    open=WandbSink,
    run_ids="choose",
    states={k: f"exit code {v}" for k, v in EXIT_CODES.items()},
)
