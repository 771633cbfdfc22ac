"""Experiment trackers (`report_to`): one `Tracker` record each, offline first, in an open registry.

    base.py          the `Tracker` record, `TrackerSettings`, `TrackerKeys`, the sinks (`Sink`, `Sinks`)
    registry.py      the registry: `register_tracker`, `get_tracker`, `open_run`, `tracker_env`, `run_env`
    tensorboard.py, mlflow.py, wandb.py, swanlab.py   the built-in records (and their sinks)
    export.py        `logs export --to <tracker>`

A `Sink` is the null object: every method does nothing (no tracker asked for). The clients (mlflow, wandb,
swanlab) are optional extras, imported only when a run is opened; a missing one is a `TrackerError` naming
what to install.
"""

from ascendfactory.trackers.base import RunState, Sink, Sinks, Tracker, TrackerError, flatten
from ascendfactory.trackers.registry import (
    find_tracker,
    get_tracker,
    open_run,
    register_tracker,
    run_env,
    tracker_env,
    tracker_names,
)

__all__ = [
    "RunState",
    "Sink",
    "Sinks",
    "Tracker",
    "TrackerError",
    "find_tracker",
    "flatten",
    "get_tracker",
    "open_run",
    "register_tracker",
    "run_env",
    "tracker_env",
    "tracker_names",
]
