"""Experiment trackers (`report_to`): one `Tracker` record each, offline first, in an open registry.

    base.py          the `Tracker` record, `TrackerSettings`, `TrackerKeys`, the sinks (`Sink`, `Sinks`)
    registry.py      the registry: `register_tracker`, `get_tracker`, `open_run`, `tracker_env`, `run_env`
    tensorboard.py, mlflow.py, wandb.py, swanlab.py   the built-in records (and their sinks)
    export.py        `logs export --to <tracker>`

A `Sink` is the null object: every method does nothing (no tracker asked for). The clients (mlflow, wandb,
swanlab) are optional extras, imported only when a run is opened; a missing one is a `TrackerError` naming
what to install. The names below load on first use (PEP 562): importing `trackers.base` (a backend's
`TrackerKeys`) does not load every tracker's record.
"""

import importlib
from typing import Any

_HOME = {
    "RunState": "base",
    "Sink": "base",
    "Sinks": "base",
    "Tracker": "base",
    "TrackerError": "base",
    "flatten": "base",
    "find_tracker": "registry",
    "get_tracker": "registry",
    "open_run": "registry",
    "register_tracker": "registry",
    "run_env": "registry",
    "tracker_env": "registry",
    "tracker_names": "registry",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'ascendfactory.trackers' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ascendfactory.trackers.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
