"""The embedded trainer's trackers: the scalars it writes to TensorBoard go to W&B (Megatron's
`--wandb-project` / `--wandb-exp-name` / `--wandb-save-dir`) and to every tracker `--af-report-to` names
(MLflow, SwanLab, and any registered tracker whose record the trainer can open from its variables,
`Tracker.from_env`), from the rank that logs the loss. Settings and the run to continue come from the
trackers' own environment variables, which the runner sets from the experiment's `report_to`
(`ascendfactory.trackers.tracker_env`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ascendfactory.plan import TrackerSpec
from ascendfactory.secrets import mask_secrets
from ascendfactory.trackers import Sinks, find_tracker, flatten, open_run


def specs_from_args(args: Any, environ: Mapping[str, str]) -> list[tuple[TrackerSpec, str | None]]:
    """(tracker, run id to continue) for each tracker the flags ask for."""
    out: list[tuple[TrackerSpec, str | None]] = []
    if args.wandb_project:
        where = args.wandb_save_dir or os.path.join(args.save or ".", "wandb")
        spec = TrackerSpec("wandb", args.wandb_project, args.wandb_exp_name or "", location=where)
        out.append((spec, environ.get("WANDB_RUN_ID")))
    for name in args.af_report_to or ():
        tracker = find_tracker(name)
        if tracker is not None and tracker.from_env is not None:
            out.append(tracker.from_env(environ))
    return out


def unknown_trackers(args: Any) -> list[str]:
    """The `--af-report-to` names this trainer cannot open (no such tracker, or none it opens itself)."""
    return [n for n in args.af_report_to or () if (t := find_tracker(n)) is None or t.from_env is None]


def open_sinks(args: Any, *, params: Mapping[str, Any], warn: Callable[[str], None]) -> Sinks:
    """One sink per tracker asked for, each with the run's parameters logged (secrets masked). A tracker
    that cannot be opened is reported through `warn` and left out: training goes on."""
    for name in unknown_trackers(args):
        warn(f"warning: --af-report-to {name}: not a tracker this trainer opens itself; ignored")
    return open_specs(specs_from_args(args, os.environ), params=params, warn=warn)


def open_specs(
    specs: list[tuple[TrackerSpec, str | None]], *, params: Mapping[str, Any], warn: Callable[[str], None]
) -> Sinks:
    """A sink per (tracker, run id to continue), the parameters logged (secrets masked); a tracker that
    cannot be opened is reported through `warn` and left out."""
    sinks = []
    for spec, run_id in specs:
        try:
            sinks.append(open_run(spec, run_id=run_id))
        except Exception as e:  # noqa: BLE001 - a tracker never stops training
            warn(f"warning: {spec.name} tracker not opened: {e}")
    out = Sinks(sinks, warn=lambda text: warn(f"warning: {text}"))
    out.log_params(flatten(mask_secrets(dict(params))))
    return out
