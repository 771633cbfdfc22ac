"""SwanLab through the `swanlab` SDK: local mode by default (`swanlab watch <logdir>` shows it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.sinks import Sink, client, finite


class SwanlabSink(Sink):
    """One SwanLab experiment. Local mode has no resume: a continued run is a new experiment."""

    name = "swanlab"

    def __init__(self, spec: TrackerSpec) -> None:
        self.swanlab = client("swanlab")
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

    def close(self, *, ok: bool = True) -> None:
        self.swanlab.finish(state="success" if ok else "crashed")
