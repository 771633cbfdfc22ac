"""The memory job of a LLaMA-Factory experiment, from the train keys the plan writes into
`llamafactory_train.yaml` (`TrainConfig.lf`) with LLaMA-Factory's own defaults for every key it leaves out
(`args.train_defaults`, generated from the dataclasses of its parser: `per_device_train_batch_size` 8,
`finetuning_type` lora, `lora_rank` 8, `cutoff_len` 2048, gradient checkpointing on unless
`disable_gradient_checkpointing`, ...), on the processes the plan launches (`TrainConfig.world`).

DeepSpeed: `deepspeed` names a json (or holds the config inline, as transformers' `TrainingArguments`
accepts); its `zero_optimization.stage` and `offload_optimizer` / `offload_param` devices are read. The
fixes and the advisor write a DeepSpeed config inline: the stage and offloads, every batch and precision
setting `"auto"` (transformers fills them from the TrainingArguments: its DeepSpeed integration,
`integrations/deepspeed.py` `HfTrainerDeepSpeedConfig.trainer_config_process`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.llamafactory.environment import VERSION
from ascendfactory.backends.llamafactory.keys import train_defaults
from ascendfactory.config.catalog import arch_or_none
from ascendfactory.memory.hf import HFJob
from ascendfactory.memory.job import Job
from ascendfactory.memory.shape import shape_from_arch
from ascendfactory.memory.target import MemoryTarget

T = "backend_config.training."
KEYS = {
    "mbs": T + "per_device_train_batch_size",
    "grad_accum": T + "gradient_accumulation_steps",
    "finetuning": T + "finetuning_type",
    "lora_rank": T + "lora_rank",
}


@dataclass(frozen=True)
class LFLaunch:
    """What `llamafactory-cli train` will parse: the yaml's keys, over LLaMA-Factory's defaults."""

    keys: dict[str, Any]  # the train keys as written into llamafactory_train.yaml
    world: int  # the processes it runs on
    model_name: str  # af_model_name (the catalog's fallback when config.json is not here)
    deepspeed: bool | None = None  # DeepSpeed in the LLaMA-Factory environment (None: no environment here)

    def value(self, key: str) -> Any:
        if key in self.keys and self.keys[key] is not None:
            return self.keys[key]
        return train_defaults(VERSION).get(key)

    @property
    def sequence(self) -> int:
        """The tokens per sequence: `cutoff_len`, one less with packing (`neat_packing` packs too), as
        LLaMA-Factory's DataArguments.__post_init__ sets it (0.9.5 hparams/data_args.py)."""
        packing = bool(self.value("packing")) or bool(self.value("neat_packing"))
        return int(self.value("cutoff_len") or 1) - (1 if packing else 0)


def deepspeed_stage(config: Any) -> tuple[int | None, bool, bool, str | None]:
    """(ZeRO stage, optimizer offloaded, parameters offloaded, a note) of a DeepSpeed json or mapping."""
    if isinstance(config, dict):
        zero = config.get("zero_optimization") or {}
    elif isinstance(config, str) and config:
        try:
            with open(os.path.expanduser(config), encoding="utf-8") as fh:
                zero = (json.load(fh).get("zero_optimization") or {}) if config.endswith(".json") else {}
        except (OSError, ValueError, AttributeError):
            name = os.path.basename(config)
            stage = next((int(c) for c in name if c.isdigit()), None) if "z" in name else None
            note = f"DeepSpeed config {config} not readable here: stage from its name"
            return stage, "offload" in name, False, note
    else:
        return None, False, False, None

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


def deepspeed_config(stage: int, *, offload_optimizer: bool, offload_param: bool) -> dict[str, Any]:
    """A DeepSpeed config for a stage and its offloads; batch sizes and precision left to transformers."""
    zero: dict[str, Any] = {"stage": stage}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu"}
    if offload_param:
        zero["offload_param"] = {"device": "cpu"}
    return {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_optimization": zero,
    }


def spelling(deepspeed: bool | None) -> Any:
    """Knobs as LLaMA-Factory train keys: gradient checkpointing as `disable_gradient_checkpointing`, a ZeRO
    stage and its offloads as one inline `deepspeed` config (null: no DeepSpeed); no ZeRO stage where the
    environment is known to lack DeepSpeed (LLaMA-Factory refuses `deepspeed` then)."""

    def spell(knobs: Mapping[str, Any], job: Job) -> dict[str, Any] | None:
        hf: Any = job
        if (
            deepspeed is False
            and hf.zero is not None
            and {"zero", "offload_optimizer", "offload_param"} & set(knobs)
        ):
            return None
        return _spell(knobs, hf)

    return spell


def _spell(knobs: Mapping[str, Any], hf: Any) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    sharding = {k: knobs[k] for k in ("zero", "offload_optimizer", "offload_param") if k in knobs}
    if sharding:
        if hf.zero is None:
            out[T + "deepspeed"] = None
        else:
            out[T + "deepspeed"] = deepspeed_config(
                hf.zero, offload_optimizer=hf.offload_optimizer, offload_param=hf.offload_param
            )
    for knob, value in knobs.items():
        if knob in sharding:
            continue
        if knob == "gradient_checkpointing":
            out[T + "disable_gradient_checkpointing"] = not value
        elif knob in KEYS:
            out[KEYS[knob]] = value
        else:
            return None
    return out


def lf_job(launch: LFLaunch) -> tuple[HFJob, str | None] | None:
    model = launch.value("model_name_or_path")
    arch = arch_or_none(launch.model_name, model if isinstance(model, str) else None)
    if arch is None:
        return None
    stage, off_opt, off_param, note = deepspeed_stage(launch.value("deepspeed"))
    quant = launch.value("quantization_bit")
    pure_bf16 = bool(launch.value("pure_bf16"))
    job = HFJob(
        shape=shape_from_arch(arch),
        devices=launch.world,
        batch=int(launch.value("per_device_train_batch_size") or 1),
        grad_accum=int(launch.value("gradient_accumulation_steps") or 1),
        seq=launch.sequence,
        finetuning=str(launch.value("finetuning_type")),
        zero=stage,
        offload_optimizer=off_opt,
        offload_param=off_param,
        quantization_bit=quant if quant in (2, 4, 8) else None,
        lora_rank=int(launch.value("lora_rank") or 0),
        freeze_trainable_layers=int(launch.value("freeze_trainable_layers") or 0),
        pure_bf16=pure_bf16,
        precision="bf16" if launch.value("bf16") or pure_bf16 else "fp16" if launch.value("fp16") else "fp32",
        gradient_checkpointing=not launch.value("disable_gradient_checkpointing"),
        flash_attention=launch.value("flash_attn") != "disabled",
    )
    return job, note


def lf_target(run: Any) -> MemoryTarget | None:
    if not isinstance(run, LFLaunch):
        return None
    found = lf_job(run)
    if found is None:
        return None
    job, note = found
    notes = ["sequences at cutoff_len (an upper bound: a shorter batch is padded to its longest sample)"]
    if note:
        notes.append(note)
    if run.deepspeed is False:
        notes.append("no DeepSpeed in the LLaMA-Factory environment: ZeRO stages are not offered as fixes")
    return MemoryTarget(job=job, spell=spelling(run.deepspeed), world_size=job.devices, notes=tuple(notes))
