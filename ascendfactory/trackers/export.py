"""`logs export --to mlflow|wandb|swanlab`: any log the parsers read (a run from another machine, a cluster
job's `run_log`) as a new tracker run. DEST is where the run goes: for MLflow a tracking URI, or a folder that
gets a SQLite store (`<DEST>/mlflow.db`, artifacts in `<DEST>/artifacts`); for W&B the folder of its offline
run (upload later with `wandb sync`); for SwanLab its local log folder.

Each record's metrics are logged at its step: training records under their own names, evaluation records as
`eval/<name>`, test records as `test/<name>`; other kinds (progress lines, summaries) are left out. The log
file itself is the run's artifact, its path and format the run's parameters.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.sinks import TrackerError, open_run

TARGETS = ("mlflow", "wandb", "swanlab")
PREFIX = {"train": "", "memory": "", "eval": "eval/", "test": "test/"}


def export_spec(to: str, dest: str, *, project: str, run_name: str) -> TrackerSpec:
    """The tracker run `logs export` writes (offline and local by default, as `report_to`)."""
    if to == "mlflow":
        if "://" in dest or dest.startswith(("sqlite:", "databricks")):
            return TrackerSpec("mlflow", project, run_name, location=dest)
        root = os.path.abspath(dest)
        return TrackerSpec(
            "mlflow",
            project,
            run_name,
            location="sqlite:///" + os.path.join(root, "mlflow.db"),
            artifacts=os.path.join(root, "artifacts"),
        )
    mode = "offline" if to == "wandb" else "local"
    return TrackerSpec(to, project, run_name, location=os.path.abspath(dest), mode=mode)


def export_to_tracker(
    records: Iterable[Any], spec: TrackerSpec, *, source: str, fmt: str | None
) -> tuple[int, str]:
    """Log `records` (metrics Records: step, metrics, kind) into a new run; (records logged, run id)."""
    sink = open_run(spec)
    n = 0
    try:
        sink.log_params({"source": os.path.abspath(source), "format": fmt or "auto"})
        for rec in records:
            prefix = PREFIX.get(rec.kind)
            if prefix is None or not rec.metrics:
                continue
            sink.log_metrics({f"{prefix}{k}": v for k, v in rec.metrics.items()}, rec.step)
            n += 1
        if os.path.isfile(source):
            sink.log_artifact(source)
    except Exception as e:
        sink.close(ok=False)
        raise TrackerError(
            f"{spec.name}: exporting to {spec.location} failed ({type(e).__name__}: {e})"
        ) from None
    sink.close(ok=True)
    return n, str(sink.run_id or "")
