"""Backends whose step programs are not planned yet: their keys and topology are still validated.

Each has its own `backend_config` (the framework's native config). `train --dry-run` validates it; a real
`train` refuses with a clear error (exit 1, nothing written) instead of pretending to run.
"""

from __future__ import annotations

from ascendfactory.backends.base import BackendAdapter, PlanContext
from ascendfactory.errors import Problem
from ascendfactory.pipeline.plan import Plan


class _NotYetPlanned(BackendAdapter):
    required: tuple[str, ...] = ()

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        cfg = ctx.config
        problems: list[Problem] = []
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
            from ascendfactory.errors import BackendNotFoundError

            raise BackendNotFoundError(
                f"backend '{self.backend.name}': the configuration is valid, but running its steps is not "
                f"implemented in this version (nothing was run or written); use `train ... --dry-run` to "
                f"validate, or a backend that runs: torch, mindspeed-llm")
        plan = Plan(
            backend=cfg.backend.value,
            exp_name=cfg.exp_name,
            model_name=cfg.af_model_name,
            output_dir=cfg.af_output_dir,
            env=cfg.env.extra_vars(),
            facts={
                "world_size": cfg.env.NNODES * ctx.devices.count,
                "nnodes": cfg.env.NNODES,
                "devices_per_node": ctx.devices.count,
            },
        )
        plan.warnings.append(
            f"backend '{self.backend.name}': configuration validated, but its steps are not "
            f"implemented in this version; `train` will stop here"
        )
        return plan

    def extra_checks(self, ctx: PlanContext) -> list[Problem]:
        return []


class LlamaFactoryAdapter(_NotYetPlanned):
    required = ("training.model_name_or_path", "training.dataset")


class VerlAdapter(_NotYetPlanned):
    required = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path")

    def extra_checks(self, ctx: PlanContext) -> list[Problem]:
        bc = ctx.config.backend_config
        tbs = (bc.get("data") or {}).get("train_batch_size")
        actor = (bc.get("actor_rollout_ref") or {}).get("actor") or {}
        mini = actor.get("ppo_mini_batch_size")
        if isinstance(tbs, int) and isinstance(mini, int) and mini and tbs % mini:
            return [
                ctx.problem(
                    "backend_config.actor_rollout_ref.actor.ppo_mini_batch_size",
                    f"data.train_batch_size({tbs}) is not divisible by ppo_mini_batch_size({mini})",
                    fix=f"use a divisor of {tbs}",
                )
            ]
        return []


class MindSpeedRLAdapter(_NotYetPlanned):
    required = ("megatron_training.tokenizer_name_or_path",)


class MindSpeedMMAdapter(_NotYetPlanned):
    required = ("data.dataset_param.preprocess_parameters.model_name_or_path",)
