"""Experiment trackers (ground floor): MLflow, Weights & Biases and SwanLab runs, offline first.

    tracker_env(spec) -> {VAR: value}          the tracker's own environment variables for a framework
    run_env(spec, run_id) -> {VAR: value}      what makes a framework continue the run `run_id`
    open_run(spec, run_id=None) -> Sink        a run to log to (created, or continued by its id)
    Sinks([...])                               several sinks as one; a failing sink warns once and stops

A `Sink` is the null object: every method does nothing (no tracker asked for). The clients (mlflow,
wandb, swanlab) are optional extras, imported only when a run is opened; a missing one is a
`TrackerError` naming the package to install.
"""

from ascendfactory.trackers.env import PACKAGES, run_env, tracker_env
from ascendfactory.trackers.sinks import Sink, Sinks, TrackerError, flatten, open_run

__all__ = ["PACKAGES", "Sink", "Sinks", "TrackerError", "flatten", "open_run", "run_env", "tracker_env"]
