"""`logs export --to <tracker>`: any log the parsers read (a run from another machine, a cluster job's
`run_log`) as a new tracker run, for every tracker whose record can export (`Tracker.export`: where DEST puts
the run; MLflow: a tracking URI, or a folder that gets a SQLite store; W&B: the folder of its offline run;
SwanLab: its local log folder).

Each record's metrics are logged at its step under the names the framework's own integration gives them
in a live run (the log format's `tracker_name`, e.g. Megatron's `lm loss value` on the validation line is
`lm loss validation`, as Megatron writes it to TensorBoard and W&B), so an exported run lines up with a
pipeline's; other kinds (progress lines, summaries) are left out. The log file itself is the run's
artifact, its path and format the run's parameters.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.base import TrackerError
from ascendfactory.trackers.registry import TRACKERS, find_tracker, get_tracker, open_run

KINDS = ("train", "memory", "eval", "test")  # record kinds a tracker gets


def export_targets() -> list[str]:
    """The trackers `logs export` can write (their records say where DEST puts a run)."""
    return [t.name for t in TRACKERS.entries() if t.export is not None and t.open is not None]


def can_export(name: str) -> bool:
    tracker = find_tracker(name)
    return tracker is not None and tracker.export is not None and tracker.open is not None


def export_spec(to: str, dest: str, *, project: str, run_name: str) -> TrackerSpec:
    """The tracker run `logs export` writes (offline and local by default, as `report_to`)."""
    tracker = get_tracker(to, key="--to")
    if tracker.export is None:
        raise TrackerError(f"{to}: this tracker has no run to export into; use one of {export_targets()}")
    return tracker.export(dest, project, run_name)


def default_name(kind: str, key: str) -> str:
    """A metric's name in a tracker when the format says nothing: training as is, others prefixed."""
    return key if kind in ("train", "memory") else f"{kind}/{key}"


def export_to_tracker(
    records: Iterable[Any],
    spec: TrackerSpec,
    *,
    source: str,
    fmt: str | None,
    name: Callable[[str, str], str] = default_name,
) -> tuple[int, str]:
    """Log `records` (metrics Records: step, metrics, kind) into a new run; (records logged, run id).
    `name(kind, key)`: the metric's name in the tracker (the log format's `tracker_name`)."""
    sink = open_run(spec)
    n = 0
    try:
        sink.log_params({"source": os.path.abspath(source), "format": fmt or "auto"})
        for rec in records:
            if rec.kind not in KINDS or not rec.metrics:
                continue
            sink.log_metrics({name(rec.kind, k): v for k, v in rec.metrics.items()}, rec.step)
            n += 1
        if os.path.isfile(source):
            sink.log_artifact(source)
    except Exception as e:
        sink.close(state="failed")
        raise TrackerError(
            f"{spec.name}: exporting to {spec.location} failed ({type(e).__name__}: {e})"
        ) from None
    sink.close(state="finished")
    return n, str(sink.run_id or "")
