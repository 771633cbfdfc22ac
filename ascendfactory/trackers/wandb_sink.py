"""Weights & Biases through the `wandb` SDK: offline by default (`wandb sync <dir>` uploads it later)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping
from typing import Any

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.sinks import Sink, client, finite


def new_run_id() -> str:
    """A W&B run id (the client accepts one chosen by the caller: lowercase letters and digits)."""
    return uuid.uuid4().hex[:12]


class WandbSink(Sink):
    """One W&B run, resumed by id (`resume="allow"`): an offline run continued later is a new folder
    `offline-run-<time>-<id>` with the same id, which `wandb sync` appends to the same run."""

    name = "wandb"

    def __init__(self, spec: TrackerSpec, *, run_id: str | None = None, quiet: bool = True) -> None:
        wandb = client("wandb")
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

    def close(self, *, ok: bool = True) -> None:
        self.run.finish(exit_code=0 if ok else 1)
