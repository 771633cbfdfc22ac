"""The steps of a MindSpeed-RL plan: preprocess (cli/preprocess_data.py), hf2mg (MindSpeed-LLM's converter),
train (the Ray launch of cli/train_grpo.py), mg2hf; and what the backend found for them (`Found`). The load
decision they follow is `mindspeed_rl_experiment.load.Load`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.megatron.read import to_flags
from ascendfactory.backends.common.mindspeed_rl_experiment.load import Load
from ascendfactory.backends.common.mindspeed_rl_experiment.numbers import cpus_of
from ascendfactory.backends.common.mindspeed_rl_experiment.read import MindSpeedRLConfig, absolute
from ascendfactory.backends.common.mindspeed_rl_experiment.tree import DATA_CONFIG, TRAIN_CONFIG, RLOutputTree
from ascendfactory.backends.mindspeed_llm.converters import (
    SCRIPTS,
    hf2mg_options,
    mg2hf_command,
    mg2hf_options,
)
from ascendfactory.backends.mindspeed_rl.programs import PROGRAMS_DIR
from ascendfactory.config.catalog import ModelArch
from ascendfactory.errors import Problem
from ascendfactory.plan import (
    Plan,
    Process,
    Ray,
    Role,
    Step,
    safe_name,
)

BC = "backend_config."
MG2HF_DISABLED = "final conversion disabled (convert_ckpt_mg2hf: null or convert_mg2hf_at_last: false)"
METRIC_LINE = r"iteration:\s*\d+\s*/\s*\d+"
METRIC_PROGRAM = os.path.join(PROGRAMS_DIR, "metric_lines.py")
# examples/grpo/grpo_trainer_qwen25_7b.sh exports these before `ray start` (its jemalloc LD_PRELOAD is added
# when the library is found; its `pkill -9 python` and `ray stop --force` are never copied).
TRAIN_ENV = {
    "RAY_DEDUP_LOGS": "0",
    "HYDRA_FULL_ERROR": "1",
    "TASK_QUEUE_ENABLE": "2",
    "HCCL_IF_BASE_PORT": "24703",
    "MALLOC_MMAP_THRESHOLD_": "512768",
    "LCAL_COMM_ID": "127.0.0.1:27001",
}
JEMALLOC = (
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/local/lib/libjemalloc.so.2",
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
)
CONVERT_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # MindSpeed-LLM's conversion scripts export it


@dataclass
class Found:
    """The machine's side: the two checkouts, what a real run lacks (problems), what a dry run lacks."""

    rl_dir: str
    rl_source: str
    llm_dir: str
    llm_source: str
    rl_found: bool
    llm_found: bool
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def preprocess_step(
    ctx: PlanContext,
    rl: MindSpeedRLConfig,
    layout: RLOutputTree,
    found: Found,
    data_path: str | None,
    plan: Plan,
    shared: bool,
) -> Step:
    """`data_path`: where preprocessing writes; None when the experiment names preprocessed data."""
    pre = rl.preprocess
    if not pre or not pre.get("input") or data_path is None:
        given = rl.actor.get("data_path")
        return Step(name="preprocess", role=Role.PREPROCESS, skip_reason=f"preprocessed data given: {given}")
    values = dict(pre)
    values["input"] = absolute(str(pre["input"]))
    values["tokenizer_name_or_path"] = absolute(
        pre.get("tokenizer_name_or_path") or rl.actor.get("tokenizer_name_or_path")
    )
    values["output_prefix"] = data_path
    for key in ("cache_dir", "script_data_dir", "vocab_file", "merge_file"):
        if isinstance(values.get(key), str):
            values[key] = absolute(values[key])
    from ascendfactory.config.yamlio import dumps

    plan.files[layout.data_yaml] = (
        "# The dataset yaml of MindSpeed-RL's cli/preprocess_data.py (DataHandlerConfig keys), "
        "written by ascendfactory-cli\n" + dumps(values)
    )
    return Step(
        name="preprocess",
        role=Role.PREPROCESS,
        launch=Process(
            (
                ctx.python,
                "cli/preprocess_data.py",
                DATA_CONFIG,
                "--config-path",
                layout.root,
                f"hydra.run.dir={layout.hydra_dir('preprocess')}",
            )
        ),
        env={"PYTHONPATH": found.rl_dir},  # examples/data/preprocess_data.sh puts the repo root on it
        cwd=found.rl_dir,
        inputs=[values["input"], str(values["tokenizer_name_or_path"]), layout.data_yaml],
        outputs=[layout.preprocessed],
        mkdirs=[layout.preprocessed],  # validate_data_handler_config refuses a missing output folder
        only_node0=shared,
    )


def hf2mg_step(
    ctx: PlanContext,
    rl: MindSpeedRLConfig,
    layout: RLOutputTree,
    found: Found,
    load: Load,
    arch: ModelArch | None,
    shared: bool,
) -> Step:
    cfg = ctx.config
    reason = None
    if cfg.ckpt_load_type == 0:
        reason = "ckpt_load_type 0: training starts from random weights"
    elif not load.convert:
        reason = (
            f"user_converted_ckpt_path given: {cfg.user_converted_ckpt_path}"
            if cfg.user_converted_ckpt_path
            else f"actor_config.load given: {load.path}"
        )
    if reason or arch is None:
        return Step(name="hf2mg", role=Role.CONVERT, skip_reason=reason or "no model family known")
    d = rl.derived
    model_dir = str(absolute(rl.actor.get("tokenizer_name_or_path") or ""))
    options = hf2mg_options(
        rl.converter,
        arch=arch,
        model_dir=model_dir,
        save_dir=layout.converted(d.tp, d.pp),
        tp=d.tp,
        pp=d.pp,
        num_layer_list=_layer_list(rl.actor.get("num_layer_list")),
        training={"bf16": True},  # MindSpeed-RL trains in bf16 only (rule R2)
    )
    if rl.actor.get("num_experts") and rl.actor.get("moe_tp_extend_ep") is not False:
        options["moe-tp-extend-ep"] = True  # docs/zh/algorithms/grpo.md: MoE needs it, else garbage rollouts
    options.update(rl.hf2mg)
    return Step(
        name="hf2mg",
        role=Role.CONVERT,
        launch=Process((ctx.python, SCRIPTS[rl.converter], *to_flags(options))),
        env=dict(CONVERT_ENV),
        cwd=found.llm_dir,
        inputs=[model_dir],
        outputs=[layout.converted(d.tp, d.pp)],
        only_node0=shared,
        notes=[f"MindSpeed-LLM converter {rl.converter} ({SCRIPTS[rl.converter]}) in {found.llm_dir}"],
    )


def train_step(
    ctx: PlanContext, rl: MindSpeedRLConfig, layout: RLOutputTree, found: Found, load: Load
) -> Step:
    cfg, d = ctx.config, rl.derived
    driver = (
        ctx.python,
        METRIC_PROGRAM,
        "--match",
        METRIC_LINE,
        "--to",
        layout.metrics_log,
        "--",
        ctx.python,
        "cli/train_grpo.py",
        "--config-path",
        layout.root,
        "--config-name",
        TRAIN_CONFIG,
        f"hydra.run.dir={layout.hydra_dir('train')}",
    )
    npus = d.actor_npus + (d.ref_npus or 0) + (d.reward_npus or 0)
    cpus = cpus_of(rl.rl.get("num_cpus_for_placement_group")) * npus + 1.0  # + the `train` task
    if rl.rl.get("rule_reward"):
        cpus += cpus_of(rl.rl.get("num_cpus_for_local_task")) * d.nnodes
    env = dict(TRAIN_ENV)
    jemalloc = next((p for p in JEMALLOC if os.path.isfile(p)), None)
    if jemalloc:
        env["LD_PRELOAD"] = jemalloc
    inputs = [layout.train_yaml]
    if load.path and load.path != layout.saved_checkpoints:
        inputs.append(load.path)
    notes = [load.reason, f"MindSpeed-RL {rl.keys.version}: {rl.version_reason}"]
    if not jemalloc:
        notes.append(
            "libjemalloc.so.2 not found: MindSpeed-RL's docs preload it against host OOM on long runs"
        )
    return Step(
        name="train",
        role=Role.TRAIN,
        launch=Ray(
            python=ctx.python,
            driver=driver,
            nnodes=d.nnodes,
            node_rank=cfg.env.NODE_RANK,
            head_address=cfg.env.MASTER_ADDR,
            port=cfg.env.MASTER_PORT,
            resources=(("CPU", cpus), ("NPU", float(npus))),
            node_resources=(("NPU", float(d.npus_per_node)),),
            job_id=safe_name(f"{cfg.af_model_name}-{cfg.exp_name}"),
        ),
        env=env,
        cwd=found.rl_dir,  # MindSpeed-RL's docs: Ray is started from its directory on every node
        inputs=inputs,
        outputs=[layout.saved_checkpoints],
        notes=notes,
    )


def mg2hf_step(
    ctx: PlanContext,
    rl: MindSpeedRLConfig,
    layout: RLOutputTree,
    found: Found,
    arch: ModelArch | None,
    disabled: bool,
    shared: bool,
) -> Step:
    if disabled or rl.mg2hf is None:
        return Step(name="mg2hf", role=Role.EXPORT, skip_reason=MG2HF_DISABLED)
    if ctx.config.env.NODE_RANK != 0 and not shared:
        return Step(name="mg2hf", role=Role.EXPORT, skip_reason="NODE_RANK 0 converts the trained weights")
    if arch is None:
        return Step(name="mg2hf", role=Role.EXPORT, skip_reason="no model family known")
    model_dir = str(absolute(rl.actor.get("tokenizer_name_or_path") or ""))
    out = str(absolute(ctx.config.hf_save_dir) or layout.mg2hf)
    options = mg2hf_options(
        rl.converter,
        arch=arch,
        load_dir=layout.saved_checkpoints,
        save_dir=out,
        model_dir=model_dir,
        lora=None,
    )
    options.update(rl.mg2hf)
    command, notes = mg2hf_command(
        rl.converter,
        python=ctx.python,
        converter=[ctx.python, SCRIPTS[rl.converter], *to_flags(options)],
        hf_dir=model_dir,
        out_dir=out,
    )
    return Step(
        name="mg2hf",
        role=Role.EXPORT,
        launch=Process(tuple(command)),
        env=dict(CONVERT_ENV),
        cwd=found.llm_dir,
        inputs=[layout.saved_checkpoints],
        outputs=[out],
        only_node0=shared,
        notes=notes,
    )


def _layer_list(value: Any) -> list[int] | None:
    if isinstance(value, str):
        return [int(x) for x in value.split(",") if x.strip()]
    if isinstance(value, list):
        return [int(x) for x in value]
    return None
