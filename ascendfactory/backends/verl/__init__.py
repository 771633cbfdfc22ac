"""The `verl` backend: Volcano Engine RL (python -m verl.trainer.main_ppo on Ray). Validated only so far."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.doctor import Check, module_check
from ascendfactory.backends.install import InstallStep
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.validated_only import ValidatedOnlyBackend
from ascendfactory.errors import Problem


@register_backend
class VerlBackend(ValidatedOnlyBackend):
    name = "verl"
    description = "Volcano Engine RL (python -m verl.trainer.main_ppo on Ray)"
    stages = ("ppo", "grpo", "dapo")
    launcher = "ray"
    order = 3
    required = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path")
    log_format = "verl"
    throughput = "verl"

    def extra_checks(self, ctx: PlanContext) -> list[Problem]:
        bc = ctx.config.backend_config

        def section(node: object, key: str) -> dict:
            value = node.get(key) if isinstance(node, dict) else None
            return value if isinstance(value, dict) else {}

        tbs = section(bc, "data").get("train_batch_size")
        mini = section(section(bc, "actor_rollout_ref"), "actor").get("ppo_mini_batch_size")
        if isinstance(tbs, int) and isinstance(mini, int) and mini > 0 and tbs % mini:
            return [
                ctx.problem(
                    "backend_config.actor_rollout_ref.actor.ppo_mini_batch_size",
                    f"data.train_batch_size({tbs}) is not divisible by ppo_mini_batch_size({mini})",
                    fix=f"use a divisor of {tbs}",
                )
            ]
        return []

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return [module_check("ray")]

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return [InstallStep("install verl", (sys.executable, "-m", "pip", "install", "verl"))]
