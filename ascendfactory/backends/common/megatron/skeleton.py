"""`MegatronBackend`: the step skeleton of the Megatron-style backends, written once.

    preprocess  (PREPROCESS)  raw data -> Megatron indexed datasets         only NODE_RANK 0 on a shared FS
    hf2mg       (CONVERT)     HF weights -> converted_weight_TP{tp}PP{pp}/   only NODE_RANK 0 on a shared FS
    train       (TRAIN)       torchrun on every node, one log per rank, loss on the last rank
    mg2hf       (EXPORT)      saved_checkpoints -> ckpt_converted_mg2hf/ (or hf_save_dir)
    plot        (PLOT)        training_loss.png from the last rank's log, on the last node

A subclass supplies `read` (`read_megatron_run` with its own record, `MegatronRun[F].framework`, and its
own checks), `train_flags` and `train_defaults` (every flag the training program receives, and its parser's
defaults: together `run.launch`, the one reading of the launch) and the programs: `preprocess_step`,
`hf2mg_step`, `train_entry` (what torchrun runs, rendered from `run.launch`) and `mg2hf_step`; optionally
`finish_plan` (checks that need the built steps).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, ClassVar, Generic

from ascendfactory.backends.base import Backend, OwnedKey, PlanContext
from ascendfactory.backends.common.megatron.launch import TrainArgs
from ascendfactory.backends.common.megatron.read import F, MegatronRun
from ascendfactory.backends.report_to import TrackerKeys
from ascendfactory.checkpoints.megatron import SAVED_MARKER
from ascendfactory.config.catalog import ModelArch
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.metrics.aux_loss import AUX_LOSS_KEYS
from ascendfactory.output_tree import OutputTree
from ascendfactory.plan import (
    CheckpointSpec,
    LogNaming,
    LogSpec,
    Plan,
    Process,
    Role,
    Step,
    ThroughputSpec,
    Torchrun,
)

T = "backend_config.training."
P = "backend_config.preprocess_data."
# Old-style flat keys (AscendFactory's ENV-era names and preprocessing flags) -> Megatron keys.
LEGACY_KEYS: dict[str, tuple[str, ...]] = {
    "TP": (T + "tensor-model-parallel-size",),
    "PP": (T + "pipeline-model-parallel-size",),
    "CP": (T + "context-parallel-size",),
    "context_parallel_size": (T + "context-parallel-size",),
    "MBS": (T + "micro-batch-size",),
    "GBS": (T + "global-batch-size",),
    "SEQ_LEN": (T + "seq-length",),
    "MAX_PE": (T + "max-position-embeddings",),
    "LR": (T + "lr",),
    "MIN_LR": (T + "min-lr",),
    "TRAIN_ITERS": (T + "train-iters",),
    "SEED": (T + "seed",),
    "SAVE_INTERVAL": (T + "save-interval",),
    "handler-name": (P + "handler-name",),
    "DATA_TYPE": (P + "handler-name",),
    "json-keys": (P + "json-keys",),
    "append-eod": (P + "append-eod",),
    "map-keys": (P + "map-keys",),
    "prompt-type": (P + "prompt-type", T + "prompt-type"),
}
PROMPT_TYPES = {"qwen25": "qwen", "qwen3": "qwen", "llama2": "llama3", "glm4": "glm4"}
LOSS_ON_LAST_NODE = "the loss is printed by the last rank, which runs on the last node"
MG2HF_DISABLED = "final conversion disabled (convert_ckpt_mg2hf: null or convert_mg2hf_at_last: false)"


# Megatron's tracker flags (training/arguments.py `_add_logging_args`; the writers live on the last rank):
# `--tensorboard-dir`, and W&B with `--wandb-project` + `--wandb-exp-name` (both needed) and
# `--wandb-save-dir`; the W&B mode and the run to continue come from wandb's own variables (the plan's env).
MEGATRON_TRACKERS: dict[str, TrackerKeys] = {
    "tensorboard": TrackerKeys(set={"training.tensorboard-dir": "{location}"}),
    "wandb": TrackerKeys(
        set={
            "training.wandb-project": "{project}",
            "training.wandb-exp-name": "{run_name}",
            "training.wandb-save-dir": "{location}",
        }
    ),
}


def owned_save(
    saved: str, readers: str = "resume, retention and the final conversion read it"
) -> dict[str, OwnedKey]:
    """The training key every Megatron-style backend owns: `save` is {af_output_dir}/saved_checkpoints (a
    user `save` elsewhere is refused by `owned_key_problems`, the same in torch, mindspeed-llm and -mm)."""
    return {
        "save": OwnedKey(os.path.abspath(saved), "af_output_dir", f"training saves into {saved} ({readers})")
    }


class MegatronBackend(Backend, Generic[F]):
    """The skeleton, generic over the backend's own record (`MegatronRun.framework`)."""

    stages: ClassVar[tuple[str, ...]] = ("pt", "sft")
    tracker_keys: ClassVar[Mapping[str, Any]] = MEGATRON_TRACKERS
    launcher = "torchrun"
    legacy_keys = LEGACY_KEYS
    legacy_rest = "backend_config.training"  # any other flat key is a training flag
    run_options: ClassVar[dict[str, Any]] = {
        "stage": "sft",
        "ckpt_load_type": 1,
        "user_converted_ckpt_path": "null",
        "train_auto_resume": "false",
        "save_total_limit": 0,
        "convert_mg2hf_at_last": "true",
        "hf_save_dir": "null",
    }
    run_option_comments: ClassVar[dict[str, str]] = {
        "ckpt_load_type": "0: load no weights (random init). 1: load weights only (--finetune "
        "--no-load-optim --no-load-rng). 2: load weights + optimizer + RNG (true resume from "
        "user_converted_ckpt_path).",
        "user_converted_ckpt_path": "Megatron weights to load: converted HF weights (ckpt_load_type 1) or a "
        "training output directory (ckpt_load_type 2). Given => the hf2mg conversion step is skipped.",
        "train_auto_resume": "Fault recovery: when training fails, and whenever the same command is run "
        "again, resume from the newest complete checkpoint in {af_output_dir}/saved_checkpoints. Highest "
        "load priority: it wins over user_converted_ckpt_path once saved_checkpoints holds a checkpoint.",
        "save_total_limit": "Keep the newest N iter_* checkpoints (0 keeps all). The checkpoint named by "
        "latest_checkpointed_iteration.txt is never deleted.",
    }
    absolute_paths: ClassVar[bool] = False  # plan paths made absolute (programs run in another cwd)
    memory_engine: ClassVar[str] = "megatron"  # whose bytes per parameter the memory estimate uses

    # -- the skeleton ---------------------------------------------------------------------------------
    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        run = self.read(ctx, strict_paths=strict_paths)
        if run.launch is None:
            run.launch = self.launch(ctx, run)
        cfg = ctx.config
        out = os.path.abspath(cfg.af_output_dir) if self.absolute_paths else cfg.af_output_dir
        plan = megatron_plan(ctx, run, output_dir=out, facts=self.facts(run))
        plan.logs = self.log_spec(ctx, run, plan.logs)
        shared = cfg.shared_filesystem and run.nnodes > 1
        plan.add(self.preprocess_step(ctx, run, shared))
        plan.add(self.hf2mg_step(ctx, run, shared))
        plan.add(self.train_step(ctx, run))
        plan.add(self.mg2hf_step(ctx, run, shared))
        plan.add(
            Step(
                name="plot",
                role=Role.PLOT,
                outputs=[OutputTree(out).loss_plot],
                skip_reason=None if run.node_rank == run.nnodes - 1 else LOSS_ON_LAST_NODE,
            )
        )
        self.finish_plan(ctx, run, plan, strict_paths=strict_paths)
        plan.run = run
        return plan

    def read(self, ctx: PlanContext, *, strict_paths: bool) -> MegatronRun[F]:
        """`read_megatron_run` with the backend's own record, and the backend's own checks."""
        raise NotImplementedError

    def launch(self, ctx: PlanContext, run: MegatronRun[F]) -> TrainArgs:
        """The one reading of the training launch: `train_flags` with the program's `train_defaults`."""
        return TrainArgs(self.train_flags(ctx, run), self.train_defaults(run))

    def train_flags(self, ctx: PlanContext, run: MegatronRun[F]) -> dict[str, Any]:
        """Every flag the training program receives, in argv order (what `to_flags` renders)."""
        raise NotImplementedError

    def train_defaults(self, run: MegatronRun[F]) -> Mapping[str, Any]:
        """The training program's argparse defaults (flag -> value), from its own definitions."""
        raise NotImplementedError

    def memory_target(self, run: Any) -> MemoryTarget | None:
        from ascendfactory.backends.common.megatron.memory import megatron_target

        return megatron_target(run, engine=self.memory_engine) if isinstance(run, MegatronRun) else None

    def facts(self, run: MegatronRun[F]) -> dict[str, Any]:
        return run.facts()

    def log_spec(self, ctx: PlanContext, run: MegatronRun[F], logs: LogSpec) -> LogSpec:
        """The training log's spec: Megatron's (`megatron_plan`) unless the framework logs otherwise."""
        return logs

    def finish_plan(self, ctx: PlanContext, run: MegatronRun[F], plan: Plan, *, strict_paths: bool) -> None:
        """Called once the steps are built: checks that need them (raise ConfigError), and what the
        framework adds to the plan besides the Megatron steps (files, step inputs)."""

    def train_step(self, ctx: PlanContext, run: MegatronRun[F]) -> Step:
        entry, env, cwd, inputs = self.train_entry(ctx, run)
        load = run.load
        return Step(
            name="train",
            role=Role.TRAIN,
            launch=torchrun_launch(ctx, run, entry),
            env=env,
            cwd=cwd,
            inputs=inputs,
            outputs=[self.saved_dir(run)],
            notes=[load.reason] if load else [],
            skip_reason=finished_reason(run),
        )

    def saved_dir(self, run: MegatronRun[F]) -> str:
        path = run.layout.saved_checkpoints
        return os.path.abspath(path) if self.absolute_paths else path

    # -- what a subclass supplies ---------------------------------------------------------------------
    def preprocess_step(self, ctx: PlanContext, run: MegatronRun[F], shared: bool) -> Step:
        raise NotImplementedError

    def hf2mg_step(self, ctx: PlanContext, run: MegatronRun[F], shared: bool) -> Step:
        raise NotImplementedError

    def train_entry(
        self, ctx: PlanContext, run: MegatronRun[F]
    ) -> tuple[list[str], dict[str, str], str | None, list[str]]:
        """(what torchrun runs, step env, cwd, inputs)."""
        raise NotImplementedError

    def mg2hf_step(self, ctx: PlanContext, run: MegatronRun[F], shared: bool) -> Step:
        raise NotImplementedError

    def template_values(self, arch: ModelArch, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        return {"prompt_type": PROMPT_TYPES.get(arch.model_type_hf, "empty")}


def finished_reason(run: MegatronRun) -> str | None:
    """Why the train step has nothing to do: the checkpoint auto-resume continues is at `train-iters`
    (None otherwise; starting torchrun would only load it and validate again)."""
    load = run.load
    iters = run.launch.number("train-iters") if run.launch else run.training.get("train-iters")
    at = load.resume_iteration if load else None
    if at is None or isinstance(iters, bool) or not isinstance(iters, int) or at < iters:
        return None
    return (
        f"complete: saved_checkpoints is at iteration {at} of train-iters {iters}; nothing to train (raise "
        "train-iters to train on, or remove saved_checkpoints to start over)"
    )


def process(argv: list[str]) -> Process:
    return Process(tuple(argv))


def skipped(name: str, role: Role, reason: str) -> Step:
    return Step(name=name, role=role, skip_reason=reason)


TIMEOUT_FLAG = "distributed-timeout-minutes"


def timeout_flag(ctx: PlanContext) -> dict[str, int]:
    """Megatron's `--distributed-timeout-minutes` from the experiment's collective timeout
    (`PlanContext.collective_timeout_s`, whole minutes rounded up); empty: Megatron's default. For the
    frameworks that run Megatron (the embedded trainer reads AF_DISTRIBUTED_TIMEOUT_S, to the second)."""
    seconds = ctx.collective_timeout_s()
    return {} if seconds is None else {TIMEOUT_FLAG: max(1, math.ceil(seconds / 60))}


def torchrun_launch(ctx: PlanContext, run: MegatronRun, entry: list[str]) -> Torchrun:
    env = ctx.config.env
    return Torchrun(
        python=ctx.python,
        entry=tuple(entry),
        nnodes=run.nnodes,
        nproc_per_node=run.nproc_per_node,
        node_rank=run.node_rank,
        master_addr=env.MASTER_ADDR,
        master_port=env.MASTER_PORT,
    )


def megatron_plan(ctx: PlanContext, run: MegatronRun, *, output_dir: str, facts: dict[str, Any]) -> Plan:
    """The Plan shell every Megatron-style backend fills: Megatron logs, checkpoints and throughput (its
    sequence length as the training program parses it)."""
    cfg = ctx.config
    seq = run.launch.seq_length if run.launch else None
    # a mixture-of-experts model: the auxiliary losses Megatron logs after the LM loss get a panel each under
    # it in training_loss.png, and the load-balancing loss its line in the run summary
    moe = bool(run.arch.experts)
    logs = LogSpec(
        format="megatron",
        naming=LogNaming(prefix=ctx.log_prefix),
        loss_rank="last",
        throughput=ThroughputSpec("megatron", seq_length=seq, devices=run.world_size),
        plot_metrics=("lm loss", *AUX_LOSS_KEYS) if moe else (),
        summary_metrics=("load_balancing_loss",) if moe else (),
    )
    saved = OutputTree(output_dir).saved_checkpoints
    return ctx.new_plan(
        output_dir,
        logs,
        checkpoints=CheckpointSpec(
            root=saved, scheme="megatron", retain=cfg.save_total_limit, saved_marker=SAVED_MARKER
        ),
        warnings=list(run.warnings),
        facts=facts,
    )
