"""The tracker registry: one `Tracker` record per tracker (`trackers.base.Tracker`), the built-ins in report
order, a plugin's from its entry point (`ascendfactory.registry`). What the rest of the house asks of a
tracker is derived from its record here: its environment, the run it continues, the sink on its run."""

from __future__ import annotations

from ascendfactory.plan import TrackerSpec
from ascendfactory.registry import Registry
from ascendfactory.trackers import mlflow, swanlab, tensorboard, wandb
from ascendfactory.trackers.base import Sink, Tracker

TRACKERS: Registry[Tracker] = Registry(
    "tracker",
    key="report_to",
    how="ascendfactory.trackers.registry.register_tracker(Tracker(...))",
)


def register_tracker(tracker: Tracker) -> Tracker:
    """Add a tracker (a plugin's module calls this at import). Its name must be new."""
    return TRACKERS.register(tracker.name, tracker)


for _builtin in (tensorboard.TRACKER, mlflow.TRACKER, wandb.TRACKER, swanlab.TRACKER):
    register_tracker(_builtin)


def find_tracker(name: str) -> Tracker | None:
    return TRACKERS.find(name)


def get_tracker(name: str, *, key: str = "report_to") -> Tracker:
    return TRACKERS.get(name, key=key)


def tracker_names() -> list[str]:
    """Every tracker's name, in report order (the built-ins, then the plugins')."""
    return TRACKERS.names()


def tracker_env(spec: TrackerSpec) -> dict[str, str]:
    """Where and how the tracker writes, in its own variables (no run id: `run_env` adds it at run time)."""
    return dict(get_tracker(spec.name).env(spec))


def run_env(spec: TrackerSpec, run_id: str) -> dict[str, str]:
    """What makes a framework's own integration log into the run `run_id` instead of starting a new one."""
    return dict(get_tracker(spec.name).run_env(spec, run_id))


def open_run(spec: TrackerSpec, *, run_id: str | None = None, quiet: bool = True) -> Sink:
    """A sink on the tracker's run `run_id` (continued), or on a new run when None; the null sink for a
    tracker the framework writes alone (TensorBoard)."""
    tracker = get_tracker(spec.name)
    return Sink() if tracker.open is None else tracker.open(spec, run_id=run_id, quiet=quiet)
