"""Backends whose steps are not planned yet: their keys and topology are validated, a real run refuses.

`train --dry-run` validates the experiment; a real `train` stops with BackendNotRunnableError (exit 1,
nothing written) instead of pretending to run.
"""

from __future__ import annotations

from typing import ClassVar

from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.errors import BackendNotRunnableError, Problem
from ascendfactory.plan import LogNaming, LogSpec, Plan, ThroughputSpec, safe_name


class ValidatedOnlyBackend(Backend):
    runs = False
    required: ClassVar[tuple[str, ...]] = ()  # dotted keys under backend_config
    log_format: ClassVar[str] = "megatron"
    throughput: ClassVar[str] = "megatron"

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        cfg = ctx.config
        problems: list[Problem] = self.stage_problems(ctx, cfg.stage)
        for dotted in self.required:
            node = cfg.backend_config
            for part in dotted.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node in (None, ""):
                problems.append(
                    ctx.problem(
                        f"backend_config.{dotted}",
                        "required key is missing",
                        fix=f"set backend_config.{dotted}",
                    )
                )
        problems += self.extra_checks(ctx)
        self.raise_if(problems)
        if strict_paths:  # a real run: refuse rather than "finish" having run nothing
            from ascendfactory.backends.registry import all_backends

            runnable = ", ".join(b.name for b in all_backends() if b.runs)
            raise BackendNotRunnableError(
                f"backend '{self.name}': the configuration is valid, but running its steps is not "
                f"implemented in this version (nothing was run or written); use `train ... --dry-run` to "
                f"validate, or a backend that runs: {runnable}"
            )
        logs = LogSpec(
            format=self.log_format,
            naming=LogNaming(prefix=f"{safe_name(cfg.af_model_name)}-{safe_name(cfg.exp_name)}"),
            loss_rank="first",
            throughput=ThroughputSpec(self.throughput, devices=ctx.world_size),
        )
        plan = Plan(
            backend=cfg.backend,
            exp_name=cfg.exp_name,
            model_name=cfg.af_model_name,
            output_dir=cfg.af_output_dir,
            logs=logs,
            policy=ctx.run_policy(),
            source=ctx.loaded.source,
            env=cfg.env.extra_vars(),
            facts={
                "world_size": ctx.world_size,
                "nnodes": cfg.env.NNODES,
                "devices_per_node": ctx.devices.count,
            },
        )
        plan.warnings.append(
            f"backend '{self.name}': configuration validated, but its steps are not "
            f"implemented in this version; `train` will stop here"
        )
        return plan

    def extra_checks(self, ctx: PlanContext) -> list[Problem]:
        return []
