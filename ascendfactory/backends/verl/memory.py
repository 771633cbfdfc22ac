"""The memory job of a verl experiment: FSDP actor (and reference, and a critic for PPO) on the same devices
as the vLLM rollout, from verl 0.9.1's keys (`actor_rollout_ref.actor.fsdp_config.param_offload` /
`optimizer_offload`, `rollout.gpu_memory_utilization`, `ppo_micro_batch_size_per_gpu`,
`model.enable_gradient_checkpointing`; prompt + response lengths from `data`)."""

from __future__ import annotations

from typing import Any

from ascendfactory.config.catalog import arch_or_none
from ascendfactory.memory.hf import HFJob
from ascendfactory.memory.rl import RLJob
from ascendfactory.memory.shape import shape_from_arch
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.plan import Plan

A = "backend_config.actor_rollout_ref."
KEYS = {
    "gradient_checkpointing": A + "model.enable_gradient_checkpointing",
    "offload_optimizer": A + "actor.fsdp_config.optimizer_offload",
    "offload_param": A + "actor.fsdp_config.param_offload",
    "mbs": A + "actor.ppo_micro_batch_size_per_gpu",
    "gpu_memory_utilization": A + "rollout.gpu_memory_utilization",
    "offload_train_param": A + "actor.fsdp_config.param_offload",
    "offload_train_grad": A + "actor.fsdp_config.param_offload",
    "offload_train_optimizer": A + "actor.fsdp_config.optimizer_offload",
}


def _get(d: Any, *path: str) -> Any:
    for p in path:
        d = d.get(p) if isinstance(d, dict) else None
    return d


def verl_target(ctx: Any, plan: Plan) -> MemoryTarget | None:
    bc = ctx.config.backend_config or {}
    arr = bc.get("actor_rollout_ref") or {}
    model = _get(arr, "model", "path")
    arch = arch_or_none(ctx.config.af_model_name, model)
    if arch is None:
        return None
    data = bc.get("data") or {}
    seq = int(data.get("max_prompt_length") or 512) + int(data.get("max_response_length") or 512)
    fsdp = _get(arr, "actor", "fsdp_config") or {}
    devices = int(plan.facts.get("world_size") or 1)
    actor = HFJob(
        shape=shape_from_arch(arch),
        devices=devices,
        batch=int(_get(arr, "actor", "ppo_micro_batch_size_per_gpu") or 1),
        seq=seq,
        fsdp=True,
        gradient_checkpointing=bool(_get(arr, "model", "enable_gradient_checkpointing")),
        flash_attention=True,
        offload_param=bool(fsdp.get("param_offload")),
        offload_optimizer=bool(fsdp.get("optimizer_offload")),
    )
    critic = None
    if _get(bc, "algorithm", "adv_estimator") == "gae":
        critic = actor.with_(label="critic")
    job = RLJob(
        actor=actor,
        reference=bool(_get(arr, "actor", "use_kl_loss")) or bool(_get(bc, "algorithm", "use_kl_in_reward")),
        critic=critic,
        gpu_memory_utilization=float(_get(arr, "rollout", "gpu_memory_utilization") or 0.5),
        offload_param=bool(fsdp.get("param_offload")),
        offload_grad=bool(fsdp.get("param_offload")),
        offload_optimizer=bool(fsdp.get("optimizer_offload")),
    )
    return MemoryTarget(job=job, keys=dict(KEYS), world_size=devices)
