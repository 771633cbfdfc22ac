"""The memory job of the FSDP2 trainer: `memory.hf.HFJob` with FSDP full shard, read from the YAML the trainer
parses (`FSDP2Run.config` with the dataclass defaults).

MindSpeed-LLM 26.1.0 loads the model in fp32 (mindspeed_llm/fsdp2/models/model_loader.py `torch_dtype=
torch.float32`) and shards it over every process (`fsdp_size` = the world), computing in
`parallel.param_dtype` (bf16 by default): fp32 master 4 + gradients 4 + AdamW 8 bytes per parameter /
processes, the HF job's FSDP terms. Activations: `per_device_train_batch_size` sequences of
`data.cutoff_len` tokens, recomputed per layer with `parallel.recompute`; context parallelism divides the
sequence. The trainer has no offload keys, so the fixes offered are recompute and a smaller micro-batch (the
accumulation doubled)."""

from __future__ import annotations

from typing import Any

from ascendfactory.backends.mindspeed_llm.fsdp2.run import SECTION_KEY, FSDP2Run
from ascendfactory.memory.hf import HFJob
from ascendfactory.memory.shape import shape_from_arch
from ascendfactory.memory.target import MemoryTarget, spelled_by

KEYS = {
    "gradient_checkpointing": SECTION_KEY + ".parallel.recompute",
    "mbs": SECTION_KEY + ".training.per_device_train_batch_size",
    "grad_accum": SECTION_KEY + ".training.gradient_accumulation_steps",
}
PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


def fsdp2_job(run: FSDP2Run) -> HFJob | None:
    if run.arch is None:
        return None
    cp = max(int(run.value("parallel.cp_size")), 1)
    return HFJob(
        shape=shape_from_arch(run.arch),
        devices=run.world,
        batch=max(int(run.value("training.per_device_train_batch_size")), 1),
        grad_accum=max(int(run.value("training.gradient_accumulation_steps")), 1),
        seq=max(int(run.value("data.cutoff_len")) // cp, 1),
        finetuning="full",
        precision=PRECISION.get(str(run.value("parallel.param_dtype")), "bf16"),
        gradient_checkpointing=bool(run.value("parallel.recompute")),
        flash_attention=bool(run.value("optimization.use_flash_attn")),
        fsdp=True,
        label="MindSpeed-LLM FSDP2",
    )


def fsdp2_target(run: Any) -> MemoryTarget | None:
    if not isinstance(run, FSDP2Run):
        return None
    job = fsdp2_job(run)
    if job is None:
        return None
    notes = (
        f"sequences at data.cutoff_len {run.value('data.cutoff_len')} (an upper bound with padding to the "
        "batch's longest)",
    )
    return MemoryTarget(job=job, spell=spelled_by(KEYS), world_size=run.world, notes=notes)
