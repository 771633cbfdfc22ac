"""The Plan around a MindSpeed-RL GRPO run, whoever trains it (MindSpeed-RL on the cluster, or the embedded
trainer): AscendFactory's tree (docs/sources.md#output-tree), MindSpeed-RL's log line and metrics, Megatron
checkpoints in `saved_checkpoints`. The callers add the steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import MindSpeedRLConfig
from ascendfactory.backends.common.mindspeed_rl_experiment.tree import RLOutputTree
from ascendfactory.checkpoints.megatron import SAVED_MARKER
from ascendfactory.metrics.mindspeed_rl import TPS_KEYS
from ascendfactory.plan import CheckpointSpec, LogNaming, LogSpec, Plan, ThroughputSpec


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
        naming=LogNaming(prefix=ctx.log_prefix),
        loss_rank="first",  # the driver (node 0, rank 0) prints MindSpeed-RL's iteration line
        throughput=ThroughputSpec("mindspeed_rl", seq_length=d.seq_length, devices=d.world_size),
        loss_keys=("actor/pg_loss", "actor/kl_loss"),
        plot_metrics=shown,
        summary_metrics=(*shown, *TPS_KEYS),
    )
    return ctx.new_plan(
        layout.root,
        logs,
        checkpoints=CheckpointSpec(
            root=layout.saved_checkpoints,
            scheme="megatron",
            retain=cfg.save_total_limit,
            saved_marker=SAVED_MARKER,
        ),
        warnings=warnings,
        facts={**facts, "metrics_log": layout.metrics_log},
    )
