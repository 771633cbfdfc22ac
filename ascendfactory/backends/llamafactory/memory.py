"""The memory job of a LLaMA-Factory experiment, from `backend_config.training` (LLaMA-Factory 0.9.5's
keys and defaults: `finetuning_type` lora, gradient checkpointing on unless
`disable_gradient_checkpointing`, `freeze_trainable_layers` 2, no DeepSpeed unless `deepspeed` names a
config, whose `zero_optimization.stage` and `offload_optimizer` / `offload_param` devices are read)."""

from __future__ import annotations

import json
import os
from typing import Any

from ascendfactory.config.catalog import arch_or_none
from ascendfactory.memory.hf import HFJob
from ascendfactory.memory.shape import shape_from_arch
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.plan import Plan

T = "backend_config.training."
KEYS = {
    "gradient_checkpointing": T + "disable_gradient_checkpointing (false)",
    "zero": T + "deepspeed",
    "offload_optimizer": T + "deepspeed",
    "mbs": T + "per_device_train_batch_size",
}


def deepspeed_stage(path: Any) -> tuple[int | None, bool, bool, str | None]:
    """(ZeRO stage, optimizer offloaded, parameters offloaded, a note) of a DeepSpeed json."""
    if not isinstance(path, str) or not path:
        return None, False, False, None
    try:
        with open(path, encoding="utf-8") as fh:
            zero = (json.load(fh).get("zero_optimization") or {}) if path.endswith(".json") else {}
    except (OSError, ValueError, AttributeError):
        name = os.path.basename(path)
        stage = next((int(c) for c in name if c.isdigit()), None) if "z" in name else None
        return (
            stage,
            "offload" in name,
            False,
            f"DeepSpeed config {path} not readable here: stage from its name",
        )

    def offloaded(key: str) -> bool:
        section = zero.get(key)
        return isinstance(section, dict) and section.get("device") not in (None, "none")

    stage = zero.get("stage")
    return (
        (stage if isinstance(stage, int) else 0),
        offloaded("offload_optimizer"),
        offloaded("offload_param"),
        None,
    )


def lf_target(ctx: Any, plan: Plan) -> MemoryTarget | None:
    tr = (ctx.config.backend_config or {}).get("training") or {}
    model = tr.get("model_name_or_path") or ctx.config.model_name_or_path
    arch = arch_or_none(ctx.config.af_model_name, model)
    if arch is None:
        return None
    stage, off_opt, off_param, note = deepspeed_stage(tr.get("deepspeed"))
    quant = tr.get("quantization_bit")
    job = HFJob(
        shape=shape_from_arch(arch),
        devices=int(plan.facts.get("world_size") or 1),
        batch=int(tr.get("per_device_train_batch_size") or 1),
        seq=int(tr.get("cutoff_len") or 2048),
        finetuning=str(tr.get("finetuning_type") or "lora"),
        zero=stage,
        offload_optimizer=off_opt,
        offload_param=off_param,
        quantization_bit=quant if quant in (2, 4, 8) else None,
        lora_rank=int(tr.get("lora_rank") or 8),
        freeze_trainable_layers=int(tr.get("freeze_trainable_layers") or 2),
        pure_bf16=bool(tr.get("pure_bf16")),
        precision="bf16" if tr.get("bf16") or tr.get("pure_bf16") else "fp16" if tr.get("fp16") else "fp32",
        gradient_checkpointing=not tr.get("disable_gradient_checkpointing"),
        flash_attention=tr.get("flash_attn", "auto") != "disabled",
    )
    notes = (
        "sequences at cutoff_len (an upper bound: shorter samples are padded only to the batch's longest)",
    )
    return MemoryTarget(
        job=job, keys=dict(KEYS), world_size=job.devices, notes=notes + ((note,) if note else ())
    )
