"""The GRPO trainer's trackers, switched on in MindSpeed-RL's own spelling (`rl_config.use_wandb` with
`wandb_project` / `wandb_exp_name` / `wandb_save_dir`; `use_swanlab` with `swanlab_project` /
`swanlab_exp_name` / `swanlab_mode` / `swanlab_save_dir`). The first rank reports each iteration's scalars
(the metrics of its log line and its `[metrics]` phases) with the resolved yaml as the run's parameters
(secrets masked). W&B's mode and the run to continue come from wandb's own variables (`WANDB_MODE`,
`WANDB_RUN_ID`), which the runner sets from the experiment's `report_to`. MindSpeed-RL has no MLflow."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ascendfactory.engine.train.trackers import open_specs
from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers import Sinks


def problems(rl: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(key, message, fix) for a switched-on tracker without its project (MindSpeed-RL needs one too)."""
    out = []
    for tracker in ("wandb", "swanlab"):
        if rl.get(f"use_{tracker}") and not rl.get(f"{tracker}_project"):
            out.append(
                (
                    f"rl_config.{tracker}_project",
                    f"empty while rl_config.use_{tracker} is true",
                    f"name the {tracker} project, or set use_{tracker}: false",
                )
            )
    return out


def specs(
    rl: Mapping[str, Any], *, save: str | None, environ: Mapping[str, str]
) -> list[tuple[TrackerSpec, str | None]]:
    """(tracker, run id to continue) for each tracker `rl_config` switches on."""
    out: list[tuple[TrackerSpec, str | None]] = []
    if rl.get("use_wandb"):
        project = str(rl["wandb_project"])
        where = rl.get("wandb_save_dir") or os.path.join(save or ".", "wandb")
        spec = TrackerSpec("wandb", project, str(rl.get("wandb_exp_name") or project), location=str(where))
        out.append((spec, environ.get("WANDB_RUN_ID")))
    if rl.get("use_swanlab"):
        project = str(rl["swanlab_project"])
        spec = TrackerSpec(
            "swanlab",
            project=project,
            run_name=str(rl.get("swanlab_exp_name") or project),
            location=str(rl.get("swanlab_save_dir") or environ.get("SWANLAB_LOG_DIR", "swanlog")),
            mode=str(rl.get("swanlab_mode") or environ.get("SWANLAB_MODE", "local")),
        )
        out.append((spec, None))
    return out


def open_sinks(
    rl: Mapping[str, Any], *, save: str | None, params: Mapping[str, Any], warn: Callable[[str], None]
) -> Sinks:
    """The sinks `rl_config` asks for, the parameters logged; one that cannot be opened is warned about."""
    return open_specs(specs(rl, save=save, environ=os.environ), params=params, warn=warn)
