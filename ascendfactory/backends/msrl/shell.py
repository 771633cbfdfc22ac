"""The Plan around a MindSpeed-RL GRPO run, whoever trains it (MindSpeed-RL on the cluster, or the embedded
trainer): seed 000's tree, MindSpeed-RL's log line and metrics, Megatron checkpoints in `saved_checkpoints`.
The callers add the steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.msrl.experiment import MindSpeedRLConfig
from ascendfactory.backends.msrl.layout import RLOutputTree
from ascendfactory.checkpoints.megatron import SAVED_MARKER
from ascendfactory.metrics.mindspeed_rl import TPS_KEYS
from ascendfactory.plan import CheckpointSpec, LogNaming, LogSpec, Plan, ThroughputSpec, safe_name


def grpo_plan(
    ctx: PlanContext,
    rl: MindSpeedRLConfig,
    layout: RLOutputTree,
    *,
    reward_metrics: tuple[str, ...],
    warnings: list[str],
    facts: Mapping[str, Any],
) -> Plan:
    """The plan without steps. `reward_metrics` are the reward keys the trainer logs (plotted and
    summarised with the response length); `facts` are the caller's, `metrics_log` is added."""
    cfg, d = ctx.config, rl.derived
    shown = (*reward_metrics, "response_length/mean")
    logs = LogSpec(
        format="mindspeed_rl",
        naming=LogNaming(prefix=f"{safe_name(cfg.af_model_name)}-{safe_name(cfg.exp_name)}"),
        loss_rank="first",  # the driver (node 0, rank 0) prints MindSpeed-RL's iteration line
        throughput=ThroughputSpec("mindspeed_rl", seq_length=d.seq_length, devices=d.world_size),
        loss_keys=("actor/pg_loss", "actor/kl_loss"),
        plot_metrics=shown,
        summary_metrics=(*shown, *TPS_KEYS),
    )
    path, text = ctx.exp_config_file(layout.root)
    return Plan(
        backend=cfg.backend,
        exp_name=cfg.exp_name,
        model_name=cfg.af_model_name,
        output_dir=layout.root,
        logs=logs,
        checkpoints=CheckpointSpec(
            root=layout.saved_checkpoints,
            scheme="megatron",
            retain=cfg.save_total_limit,
            saved_marker=SAVED_MARKER,
        ),
        policy=ctx.run_policy(),
        files={path: text},
        source=ctx.loaded.source,
        warnings=warnings,
        env=cfg.env.extra_vars(),
        facts={**facts, "metrics_log": layout.metrics_log},
    )
