"""The memory job of a Megatron-style experiment (torch, mindspeed-llm, mindspeed-mm), from its flags.

Read after `plan` has validated them: the layout from the plan's facts (TP, PP, CP, DP as resolved), the
rest from `backend_config.training` with Megatron's defaults (`megatron/training/arguments.py`): bf16/fp16
off (fp32), no recompute, no distributed optimizer, no sequence parallelism, tied embeddings unless
`--untie-embeddings-and-output-weights`, `--make-vocab-size-divisible-by 128`.
"""

from __future__ import annotations

import os
from typing import Any

from ascendfactory.config.catalog import ModelArch, arch_or_none
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.shape import shape_from_arch
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.plan import Plan

T = "backend_config.training."
KEYS = {
    "recompute": T + "recompute-granularity",
    "recompute_method": T + "recompute-method",
    "recompute_num_layers": T + "recompute-num-layers",
    "distributed_optimizer": T + "use-distributed-optimizer",
    "sequence_parallel": T + "sequence-parallel",
    "tp": T + "tensor-model-parallel-size",
    "pp": T + "pipeline-model-parallel-size",
    "vpp": T + "num-layers-per-virtual-pipeline-stage",
    "mbs": T + "micro-batch-size",
    "gbs": T + "global-batch-size",
}


def plan_arch(plan: Plan, model_name: str) -> ModelArch | None:
    """The architecture the plan was made for: its config.json (facts' `arch_source`) or the catalog."""
    source = plan.facts.get("arch_source")
    model_dir = (
        os.path.dirname(source) if isinstance(source, str) and source.endswith("config.json") else None
    )
    return arch_or_none(model_name, model_dir)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def megatron_job(
    training: dict[str, Any], facts: dict[str, Any], arch: ModelArch, *, engine: str = "megatron"
) -> MegatronJob:
    tr = training
    shape = shape_from_arch(arch)
    untie = tr.get("untie-embeddings-and-output-weights")
    if untie is not None and engine == "megatron":  # the embedded trainer builds the HF config's model
        shape = type(shape)(**{**shape.__dict__, "tied": not bool(untie)})
    tp, pp = _int(facts.get("tp"), 1), _int(facts.get("pp"), 1)
    vpp = _int(tr.get("virtual-pipeline-model-parallel-size"), 1)
    per_stage = _int(tr.get("num-layers-per-virtual-pipeline-stage"), 0)
    if per_stage and pp > 1:
        vpp = max(1, arch.layers // (pp * per_stage))
    granularity = tr.get("recompute-granularity")
    if tr.get("recompute-activations"):
        granularity = "selective"
    layer_list = facts.get("num_layer_list")
    lora_targets = tr.get("lora-target-modules") or ()
    return MegatronJob(
        shape=shape,
        tp=tp,
        pp=pp,
        dp=_int(facts.get("dp"), 1),
        cp=_int(facts.get("cp"), 1),
        ep=_int(tr.get("expert-model-parallel-size"), 1),
        vpp=vpp,
        mbs=_int(tr.get("micro-batch-size"), 1),
        gbs=_int(tr.get("global-batch-size"), _int(tr.get("micro-batch-size"), 1) * _int(facts.get("dp"), 1)),
        seq=_int(tr.get("seq-length"), 4096),
        precision="bf16" if tr.get("bf16") else "fp16" if tr.get("fp16") else "fp32",
        distributed_optimizer=bool(tr.get("use-distributed-optimizer")),
        sequence_parallel=bool(tr.get("sequence-parallel")) and tp > 1,
        recompute=granularity if granularity in ("full", "selective") else "none",
        recompute_method=tr.get("recompute-method") or "uniform",
        recompute_num_layers=_int(tr.get("recompute-num-layers"), 1),
        flash_attention=bool(tr.get("use-flash-attn")) if engine == "megatron" else True,
        attention_dropout=float(tr.get("attention-dropout") or 0) > 0,
        lora_rank=_int(tr.get("lora-r"), 0),
        lora_targets=tuple(str(t) for t in lora_targets) if isinstance(lora_targets, (list, tuple)) else (),
        num_layer_list=tuple(layer_list) if isinstance(layer_list, list) and len(layer_list) == pp else None,
        vocab_divisible_by=_int(tr.get("make-vocab-size-divisible-by"), 128 if engine == "megatron" else 1),
        engine=engine,
    )


def megatron_target(ctx: Any, plan: Plan, *, engine: str = "megatron") -> MemoryTarget | None:
    arch = plan_arch(plan, ctx.config.af_model_name)
    training = ctx.config.backend_config.get("training")
    if arch is None or not isinstance(training, dict) or not arch.layers or not arch.hidden:
        return None
    job = megatron_job(training, plan.facts, arch, engine=engine)
    notes: tuple[str, ...] = ()
    if arch.vit_layers:
        config = _hf_config(plan.facts.get("arch_source"))
        job = job.with_(shape=shape_from_arch(arch, config=config))
        notes = (
            f"vision encoder: {arch.vit_layers} blocks on the first stage, {job.shape.vision.patches} "
            "patches per sample (an image of about 900x900 pixels)",
        )
    return MemoryTarget(job=job, keys=dict(KEYS), world_size=job.tp * job.pp * job.dp * job.cp, notes=notes)


def _hf_config(path: Any) -> dict[str, Any]:
    import json

    try:
        with open(str(path), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# -- MindSpeed-RL's experiment (mindspeed-rl, and torch with stage: grpo) ---------------------------------
RL = "backend_config."
RL_KEYS = {
    "recompute": RL + "actor_config.recompute_granularity",
    "recompute_method": RL + "actor_config.recompute_method",
    "recompute_num_layers": RL + "actor_config.recompute_num_layers",
    "distributed_optimizer": RL + "actor_config.use_distributed_optimizer",
    "sequence_parallel": RL + "actor_config.sequence_parallel",
    "tp": RL + "actor_config.tensor_model_parallel_size",
    "pp": RL + "actor_config.pipeline_model_parallel_size",
    "mbs": RL + "actor_config.micro_batch_size",
    "gpu_memory_utilization": RL + "generate_config.gpu_memory_utilization",
    "offload_train_param": RL + "generate_config.offload_train_param",
    "offload_train_grad": RL + "generate_config.offload_train_grad",
    "offload_train_optimizer": RL + "generate_config.offload_train_optimizer",
}


def rl_target(ctx: Any, plan: Plan, *, engine: str) -> MemoryTarget | None:
    """The actor (a Megatron job with MindSpeed-RL's snake_case keys), its reference and the rollout."""
    from ascendfactory.memory.rl import RLJob

    bc = ctx.config.backend_config or {}
    actor = {**(bc.get("megatron_training") or {}), **(bc.get("actor_config") or {})}
    gen = bc.get("generate_config") or {}
    f = plan.facts
    arch = arch_or_none(ctx.config.af_model_name, actor.get("tokenizer_name_or_path"))
    if arch is None:
        return None
    training = {k.replace("_", "-"): v for k, v in actor.items()}
    training["global-batch-size"] = f.get("mini_batch_samples") or training.get("global-batch-size")
    training["seq-length"] = f.get("seq_length") or training.get("seq-length")
    facts = {"tp": f.get("tp"), "pp": f.get("pp"), "cp": f.get("cp"), "dp": f.get("actor_dp")}
    job = megatron_job(training, facts, arch, engine=engine)
    sampling = gen.get("sampling_config") if isinstance(gen.get("sampling_config"), dict) else {}
    rl = RLJob(
        actor=job,
        reference=True,
        rollout="hf" if engine == "embedded" else "vllm",
        gpu_memory_utilization=float(gen.get("gpu_memory_utilization") or 0.5),
        offload_param=bool(gen.get("offload_train_param")),
        offload_grad=bool(gen.get("offload_train_grad")),
        offload_optimizer=bool(gen.get("offload_train_optimizer")),
        rollout_sequences=_int(f.get("mbs"), 1),
        rollout_tokens=_int(f.get("max_model_len"), 0) or job.seq or _int(sampling.get("max_tokens"), 1024),
    )
    notes = ("reference model on the actor's devices (MindSpeed-RL's integrated mode)",)
    return MemoryTarget(job=rl, keys=dict(RL_KEYS), world_size=job.tp * job.pp * job.dp * job.cp, notes=notes)
