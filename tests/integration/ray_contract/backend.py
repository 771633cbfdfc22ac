"""A backend defined outside `ascendfactory/backends/`: the contract's test that a backend is one class.

It plans one Ray training step (its driver is `driver.py` beside this file), names its logs its own way,
reads the loss from the first rank (the head node's log), has no Megatron checkpoints and no conversion.
Registered by importing this module; `cli.py` runs the real CLI with it registered.
"""

from __future__ import annotations

import os
import sys

from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.registry import register_backend
from ascendfactory.plan import LogNaming, LogSpec, Plan, Ray, Role, Step, ThroughputSpec

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.py")
OPTIONS = {"steps": int, "step_sleep_s": float}


@register_backend
class RayContractBackend(Backend):
    name = "ray-contract"
    description = "test backend: a Ray job with its own log names and the first rank's loss"
    stages = ("fit",)
    launcher = "ray"
    order = 90

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        cfg = ctx.config
        options = dict(cfg.backend_config)
        self.raise_if(self.option_problems(ctx, OPTIONS))
        nnodes = cfg.env.NNODES
        driver = (
            ctx.python or sys.executable,
            DRIVER,
            "--nodes",
            str(nnodes),
            "--steps",
            str(options.get("steps", 8)),
            "--step-sleep",
            str(options.get("step_sleep_s", 0.0)),
        )
        launch = Ray(
            python=ctx.python or sys.executable,
            driver=driver,
            nnodes=nnodes,
            node_rank=cfg.env.NODE_RANK,
            head_address=cfg.env.MASTER_ADDR,
            port=cfg.env.MASTER_PORT,
            resources=(("CPU", float(nnodes)),),
            node_resources=(("CPU", 1.0),),
            job_id=cfg.exp_name,
        )
        logs = LogSpec(
            format="verl",
            naming=LogNaming(prefix="raycontract", run_log="ray-node{node_rank}-of-{nnodes}"),
            loss_rank="first",
            throughput=ThroughputSpec("verl"),
            loss_keys=("actor/loss",),
        )
        out = cfg.af_output_dir
        path, text = ctx.exp_config_file(out)
        plan = Plan(
            backend=self.name,
            exp_name=cfg.exp_name,
            model_name=cfg.af_model_name,
            output_dir=out,
            logs=logs,
            policy=ctx.run_policy(),
            files={path: text},
        )
        plan.add(Step(name="train", role=Role.TRAIN, launch=launch, env={"RAY_USAGE_STATS_ENABLED": "0"}))
        plan.add(Step(name="plot", role=Role.PLOT, outputs=[os.path.join(out, "training_loss.png")]))
        return plan
