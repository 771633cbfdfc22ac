"""The memory job of a verl experiment: the FSDP actor (with its reference, and a critic for GAE) on the same
devices as the vLLM rollout, read from verl's composed config (the plan's overrides composed with verl's own
`ppo_trainer.yaml` defaults: `composer.compose`), never from the experiment as written.

Keys (verl 0.9.1): `actor_rollout_ref.actor.fsdp_config.param_offload` (the actor's parameters and gradients
leave the device between phases) and `optimizer_offload`, `actor.ppo_micro_batch_size_per_gpu`,
`model.enable_gradient_checkpointing`, `rollout.gpu_memory_utilization`, the sequence as
`data.max_prompt_length + data.max_response_length`, the reference when `actor.use_kl_loss` or
`algorithm.use_kl_in_reward`, a critic when `algorithm.adv_estimator` is gae.

`VerlJob` is this backend's own job (`memory.job.Job`): verl's one `param_offload` switch moves the actor's
parameters and gradients together, so its fixes and layouts turn the two at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ascendfactory.config.catalog import arch_or_none
from ascendfactory.memory.hf import HFJob
from ascendfactory.memory.job import Change
from ascendfactory.memory.rl import RLJob
from ascendfactory.memory.shape import shape_from_arch
from ascendfactory.memory.target import MemoryTarget, spelled_by

A = "backend_config.actor_rollout_ref."
KEYS = {
    "gradient_checkpointing": A + "model.enable_gradient_checkpointing",
    "offload_optimizer": A + "actor.fsdp_config.optimizer_offload",
    "offload_param": A + "actor.fsdp_config.param_offload",
    "mbs": A + "actor.ppo_micro_batch_size_per_gpu",
    "gpu_memory_utilization": A + "rollout.gpu_memory_utilization",
}
SHARES = (0.3, 0.4, 0.5, 0.6, 0.7)  # rollout shares the advisor tries (verl's perf_tuning.rst: 0.5-0.7)


@dataclass(frozen=True)
class VerlLaunch:
    """What verl's main_ppo will run: its composed config, on `world` devices."""

    config: dict[str, Any]
    world: int
    model_name: str


def get(config: Any, dotted: str, default: Any = None) -> Any:
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return default if config is None else config


@dataclass(frozen=True)
class VerlJob(RLJob):
    """verl's RL job: `offload_param` is the actor's FSDP `param_offload` (parameters and gradients)."""

    def set_offload(self, knob: str, on: bool) -> VerlJob:
        actor: Any = self.actor
        if knob == "offload_param":
            job = self.with_(actor=actor.with_(offload_param=on), offload_param=on, offload_grad=on)
        else:
            job = self.with_(actor=actor.with_(offload_optimizer=on), offload_optimizer=on)
        assert isinstance(job, VerlJob)
        return job

    def candidates(self, world_size: int) -> Iterator[Change]:
        """The optimizer offloaded, then the parameters, then a smaller rollout share, then the actor's own
        (gradient checkpointing, a smaller micro-batch)."""
        for knob in ("offload_optimizer", "offload_param"):
            if not getattr(self, knob):
                yield Change({knob: True}, self.set_offload(knob, True))
        if self.gpu_memory_utilization > 0.3:
            lower = round(self.gpu_memory_utilization - 0.1, 2)
            yield Change({"gpu_memory_utilization": lower}, self.with_(gpu_memory_utilization=lower))
        actor: Any = self.actor
        for change in actor.candidates(world_size):
            if set(change.knobs) <= {"gradient_checkpointing", "mbs", "grad_accum"}:
                knobs = {k: v for k, v in change.knobs.items() if k != "grad_accum"}
                yield Change(knobs, self.with_(actor=change.job), change.note)

    def layouts(self, world_size: int) -> Iterator[Change]:
        """Parameter and optimizer offload x gradient checkpointing x micro-batch 1, 2, 4 x rollout share."""
        actor: Any = self.actor
        for param in (False, True):
            for optim in (False, True):
                offloaded = self.set_offload("offload_param", param).set_offload("offload_optimizer", optim)
                for gc in (False, True):
                    for mbs in sorted({1, 2, 4, actor.batch}):
                        for share in sorted({*SHARES, self.gpu_memory_utilization}):
                            base: Any = offloaded.actor
                            job = offloaded.with_(
                                actor=base.with_(gradient_checkpointing=gc, batch=mbs),
                                gpu_memory_utilization=share,
                            )
                            knobs = {
                                k: v
                                for k, v, old in (
                                    ("offload_param", param, self.offload_param),
                                    ("offload_optimizer", optim, self.offload_optimizer),
                                    ("gradient_checkpointing", gc, actor.gradient_checkpointing),
                                    ("mbs", mbs, actor.batch),
                                    ("gpu_memory_utilization", share, self.gpu_memory_utilization),
                                )
                                if v != old
                            }
                            yield Change(knobs, job)

    def step_time(self, peak_flops: float) -> float:
        """The actor's update and its offload traffic; a smaller rollout share slows generation (fewer
        sequences fit the KV cache): the rollout time is taken as the update's x 0.5 / share."""
        update = super().step_time(peak_flops)
        return update * (1 + 0.5 / max(self.gpu_memory_utilization, 0.05))


def verl_job(launch: VerlLaunch) -> VerlJob | None:
    config = launch.config
    arch = arch_or_none(launch.model_name, get(config, "actor_rollout_ref.model.path"))
    if arch is None:
        return None
    seq = int(get(config, "data.max_prompt_length", 0)) + int(get(config, "data.max_response_length", 0))
    param_offload = bool(get(config, "actor_rollout_ref.actor.fsdp_config.param_offload", False))
    optimizer_offload = bool(get(config, "actor_rollout_ref.actor.fsdp_config.optimizer_offload", False))
    actor = HFJob(
        shape=shape_from_arch(arch),
        devices=launch.world,
        batch=int(get(config, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", 1) or 1),
        seq=seq or 1,
        fsdp=True,
        gradient_checkpointing=bool(
            get(config, "actor_rollout_ref.model.enable_gradient_checkpointing", False)
        ),
        flash_attention=True,
        offload_param=param_offload,
        offload_optimizer=optimizer_offload,
    )
    critic = actor.with_(label="critic") if get(config, "algorithm.adv_estimator") == "gae" else None
    return VerlJob(
        actor=actor,
        reference=bool(get(config, "actor_rollout_ref.actor.use_kl_loss"))
        or bool(get(config, "algorithm.use_kl_in_reward")),
        reference_share=0.5,  # the reference's bf16 weights beside the actor's fp32 master shard
        critic=critic,
        gpu_memory_utilization=float(get(config, "actor_rollout_ref.rollout.gpu_memory_utilization", 0.0)),
        offload_param=param_offload,
        offload_grad=param_offload,
        offload_optimizer=optimizer_offload,
    )


def verl_target(run: Any) -> MemoryTarget | None:
    if not isinstance(run, VerlLaunch):
        return None
    job = verl_job(run)
    if job is None:
        return None
    return MemoryTarget(job=job, spell=spelled_by(KEYS), world_size=run.world)
