"""The embedded trainer's trackers: the scalars it writes to TensorBoard go to W&B (Megatron's
`--wandb-project` / `--wandb-exp-name` / `--wandb-save-dir`), MLflow and SwanLab (`--af-report-to`) too,
from the rank that logs the loss. Settings and the run to continue come from the trackers' own environment
variables, which the runner sets from the experiment's `report_to` (`ascendfactory.trackers.tracker_env`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ascendfactory.plan import TrackerSpec
from ascendfactory.secrets import mask_secrets
from ascendfactory.trackers import Sinks, flatten, open_run


def specs_from_args(args: Any, environ: Mapping[str, str]) -> list[tuple[TrackerSpec, str | None]]:
    """(tracker, run id to continue) for each tracker the flags ask for."""
    out: list[tuple[TrackerSpec, str | None]] = []
    if args.wandb_project:
        where = args.wandb_save_dir or os.path.join(args.save or ".", "wandb")
        spec = TrackerSpec("wandb", args.wandb_project, args.wandb_exp_name or "", location=where)
        out.append((spec, environ.get("WANDB_RUN_ID")))
    for name in args.af_report_to or ():
        if name == "mlflow":
            spec = TrackerSpec(
                "mlflow",
                project=environ.get("MLFLOW_EXPERIMENT_NAME", "Default"),
                run_name=args.wandb_exp_name or "train",
                location=environ.get("MLFLOW_TRACKING_URI", ""),
            )
            out.append((spec, environ.get("MLFLOW_RUN_ID")))
        elif name == "swanlab":
            spec = TrackerSpec(
                "swanlab",
                project=environ.get("SWANLAB_PROJ_NAME", "ascendfactory"),
                run_name=environ.get("SWANLAB_EXP_NAME", "train"),
                location=environ.get("SWANLAB_LOG_DIR", "swanlog"),
                mode=environ.get("SWANLAB_MODE", "local"),
            )
            out.append((spec, None))
    return out


def unknown_trackers(args: Any) -> list[str]:
    return [n for n in args.af_report_to or () if n not in ("mlflow", "swanlab")]


def open_sinks(args: Any, *, params: Mapping[str, Any], warn: Callable[[str], None]) -> Sinks:
    """One sink per tracker asked for, each with the run's parameters logged (secrets masked). A tracker
    that cannot be opened is reported through `warn` and left out: training goes on."""
    for name in unknown_trackers(args):
        warn(f"warning: --af-report-to {name}: not a tracker of this trainer (mlflow, swanlab); ignored")
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
