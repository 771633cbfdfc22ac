"""A torchrun backend defined outside `ascendfactory/backends/`, with a log format, a throughput formula and a
checkpoint scheme of its own (`lightning.py`): the "new backend with a new log format" exercise
(docs/architecture.md).

It trains `driver.py` (a data-parallel least-squares fit, gloo) on every device of the node, resumes from
its newest complete step directory, and lets the runner keep `save_total_limit` of them.
"""

from __future__ import annotations

import os
import sys

from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.registry import register_backend
from ascendfactory.plan import CheckpointSpec, LogNaming, LogSpec, Plan, Role, Step, ThroughputSpec, Torchrun

from . import lightning

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.py")
OPTIONS = {
    "steps": int,
    "save_every": int,
    "save_total_limit": int,
    "tokens_per_step": int,
    "fail_at": int,
    "step_sleep": float,  # seconds each step lasts at least (a job long enough to cancel)
    "loggers": list,  # the framework's own logger integrations (csvlog: the csvlog tracker's client)
}


@register_backend
class LightningDemoBackend(Backend):
    name = "lightning-demo"
    description = "test backend: torchrun, a Lightning-style log, step=N checkpoints"
    stages = ("pt",)
    launcher = "torchrun"
    order = 91

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        cfg = ctx.config
        options = dict(cfg.backend_config)
        self.raise_if(self.option_problems(ctx, OPTIONS))
        out = cfg.af_output_dir
        root = os.path.join(out, "checkpoints")
        done = lightning.step_dirs(root) if cfg.train_auto_resume else []
        tokens = int(options.get("tokens_per_step", 256))
        argv = ["--steps", options.get("steps", 8), "--save-every", options.get("save_every", 2)]
        argv += ["--save-dir", root, "--fail-at", options.get("fail_at", 0)]
        argv += ["--marker", os.path.join(out, "failed-once"), "--step-sleep", options.get("step_sleep", 0)]
        for logger in options.get("loggers") or ():
            argv += ["--logger", logger]
        if done:
            argv += ["--resume", done[-1][1]]
        launch = Torchrun(
            python=ctx.python or sys.executable,
            entry=(DRIVER, *map(str, argv)),
            nnodes=cfg.env.NNODES,
            nproc_per_node=ctx.devices.count,
            node_rank=cfg.env.NODE_RANK,
            master_addr=cfg.env.MASTER_ADDR,
            master_port=cfg.env.MASTER_PORT,
        )
        logs = LogSpec(
            format=lightning.NAME,
            naming=LogNaming(prefix="lightning"),
            loss_rank="first",
            throughput=ThroughputSpec(lightning.NAME, seq_length=tokens, devices=ctx.world_size),
            loss_keys=(lightning.LOSS,),
        )
        keep = int(options.get("save_total_limit", 0))
        plan = ctx.new_plan(
            out, logs, checkpoints=CheckpointSpec(root=root, scheme=lightning.SCHEME_NAME, retain=keep)
        )
        note = [f"resumes from {os.path.basename(done[-1][1])}"] if done else []
        plan.add(Step(name="train", role=Role.TRAIN, launch=launch, outputs=[root], notes=note))
        plan.add(Step(name="plot", role=Role.PLOT, outputs=[plan.tree.loss_plot]))
        return plan

    def checks(self, environ):
        """`doctor --backend lightning-demo`: its driver and torch's distributed package."""
        from ascendfactory.backends.environment import Check, module_check

        found = os.path.isfile(DRIVER)
        return [
            Check("lightning-demo driver", "ok" if found else "missing", DRIVER),
            module_check("torch"),
        ]

    def install_steps(self, environ):
        """`install.sh lightning-demo`: nothing to install beyond torch; the plan checks it imports."""
        from ascendfactory.backends.environment import InstallStep

        return [InstallStep("check torch.distributed", (sys.executable, "-c", "import torch.distributed"))]
