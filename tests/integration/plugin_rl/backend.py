"""The rl-demo backend: its `Backend` class, registered when the distribution's entry point loads (with its
log format, formula and scheme, `formats.py`). It plans one Ray training step (`driver.py`, run by the
Ray launcher on every node), checkpoints under the house's `saved_checkpoints/`, and reaches trackers
through its framework's own `loggers` list (a tracker brings its row for it)."""

from __future__ import annotations

import os
import sys

from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.registry import register_backend
from ascendfactory.plan import CheckpointSpec, LogNaming, LogSpec, Plan, Ray, Role, Step, ThroughputSpec

from . import formats

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.py")
OPTIONS = {"steps": int, "group_size": int, "save_every": int, "save_total_limit": int, "loggers": list}


@register_backend
class RLDemoBackend(Backend):
    name = "rl-demo"
    description = "test backend: group-normalised policy gradient on Ray, global_stepN checkpoints"
    stages = ("grpo",)
    launcher = "ray"
    order = 92

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        cfg = ctx.config
        options = dict(cfg.backend_config)
        self.raise_if(self.option_problems(ctx, OPTIONS) + self.stage_problems(ctx, cfg.stage))
        nnodes, python = cfg.env.NNODES, ctx.python or sys.executable
        tree_root = os.path.abspath(cfg.af_output_dir)
        logs = LogSpec(
            format=formats.NAME,
            naming=LogNaming(prefix="rldemo", run_log="ray-node{node_rank}-of-{nnodes}"),
            loss_rank="first",
            throughput=ThroughputSpec(formats.NAME),
            loss_keys=("policy_loss",),
            plot_metrics=("reward", "policy_loss"),
            summary_metrics=("reward",),
        )
        plan = ctx.new_plan(tree_root, logs)
        saved = plan.tree.saved_checkpoints
        plan.checkpoints = CheckpointSpec(
            root=saved, scheme=formats.SCHEME_NAME, retain=int(options.get("save_total_limit", 0))
        )
        driver = [python, DRIVER, "--nodes", str(nnodes), "--save-dir", saved]
        for key in ("steps", "group_size", "save_every"):
            if key in options:
                driver += [f"--{key.replace('_', '-')}", str(options[key])]
        for logger in options.get("loggers") or ():
            driver += ["--logger", logger]
        done = formats.complete_steps(saved) if cfg.train_auto_resume else []
        if done:
            driver.append("--resume")
        launch = Ray(
            python=python,
            driver=tuple(driver),
            nnodes=nnodes,
            node_rank=cfg.env.NODE_RANK,
            head_address=cfg.env.MASTER_ADDR,
            port=cfg.env.MASTER_PORT,
            resources=(("CPU", float(nnodes)),),
            node_resources=(("CPU", 1.0),),
            job_id=cfg.exp_name,
        )
        note = [f"resumes from global_step{done[-1][0]}"] if done else []
        plan.add(
            Step(
                name="train", role=Role.TRAIN, launch=launch, env={"RAY_USAGE_STATS_ENABLED": "0"}, notes=note
            )
        )
        plan.add(Step(name="plot", role=Role.PLOT, outputs=[plan.tree.loss_plot]))
        plan.run = {"group_size": int(options.get("group_size", 16)), "nodes": nnodes}
        return plan

    def memory_target(self, run):
        """Its own kind of memory job (`memory.BanditJob`), the group size spelled as its experiment key."""
        from ascendfactory.memory.target import MemoryTarget

        from .memory import BanditJob

        return MemoryTarget(
            BanditJob(run["group_size"], run["nodes"]),
            spell=lambda knobs, job: {f"backend_config.{k}": v for k, v in knobs.items()},
            world_size=run["nodes"],
        )

    def checks(self, environ):
        from ascendfactory.backends.environment import module_check

        return [module_check("ray")]

    def install_steps(self, environ):
        from ascendfactory.backends.environment import InstallStep

        return [InstallStep("check ray", (sys.executable, "-c", "import ray"))]
