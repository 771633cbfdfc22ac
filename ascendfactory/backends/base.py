"""What every backend adapter receives and returns."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ascendfactory.checkpoints import CheckpointState
from ascendfactory.config.devices import DeviceCount
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.pipeline.plan import Plan


@dataclass
class PlanContext:
    """Facts about this machine and the run directory, gathered by the planner (not by the adapter)."""

    loaded: LoadedExperiment
    devices: DeviceCount
    python: str
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    saved_checkpoints: CheckpointState | None = None  # state of {af_output_dir}/saved_checkpoints

    @property
    def config(self):
        return self.loaded.config

    def problem(self, key: str, message: str, fix: str = "") -> Problem:
        return Problem(key=key, message=message, fix=fix, source=self.loaded.source_of(key))


class BackendAdapter:
    """Base class: `plan(ctx)` returns a Plan or raises ConfigError with every problem found."""

    def __init__(self, backend) -> None:
        self.backend = backend

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:  # pragma: no cover - interface
        """`strict_paths`: missing input paths are errors (a real run) or warnings (`--dry-run`)."""
        raise NotImplementedError

    @staticmethod
    def raise_if(problems: list[Problem]) -> None:
        if problems:
            raise ConfigError(problems)
