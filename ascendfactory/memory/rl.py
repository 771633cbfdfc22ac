"""RL jobs whose actor, reference, critic and rollout engine share the devices (MindSpeed-RL, the embedded
GRPO trainer, verl).

The peak is the larger of two phases on one device:

- **update**: the actor's training peak (its own model, `memory.megatron` or `memory.hf`), plus the states
  the other roles keep resident (the reference's 16-bit weights, the critic's model states) unless offloaded;
- **rollout**: the states still resident while generating (the actor's weights, and its gradients and
  optimizer unless `offload_train_grad` / `offload_train_optimizer` or verl's FSDP offload move them), the
  reference, plus the rollout engine: vLLM takes `gpu_memory_utilization` of the device's *total* memory
  (verl `docs/perf/perf_tuning.rst`: "the vLLM instance will only use gpu_memory_utilization of the total
  memory"; MindSpeed-RL `generate_config.gpu_memory_utilization`), the embedded trainer's HF `generate`
  its KV cache and one step's logits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ascendfactory.memory.hf import HFJob, estimate_hf
from ascendfactory.memory.megatron import MegatronJob, estimate_megatron
from ascendfactory.memory.report import MemoryEstimate, StageMemory


@dataclass(frozen=True)
class RLJob:
    actor: MegatronJob | HFJob
    reference: bool = True  # a KL reference model on the same devices
    critic: HFJob | None = None
    rollout: str = "vllm"  # vllm | hf (the embedded trainer's generate)
    gpu_memory_utilization: float = 0.5
    offload_param: bool = False
    offload_grad: bool = False
    offload_optimizer: bool = False
    rollout_sequences: int = 1  # sequences generated at once on one device (hf rollout)
    rollout_tokens: int = 1024  # prompt + response length
    label: str = ""

    def with_(self, **changes: object) -> RLJob:
        return replace(self, **changes)  # type: ignore[arg-type]


def _actor(job: RLJob) -> MemoryEstimate:
    return estimate_megatron(job.actor) if isinstance(job.actor, MegatronJob) else estimate_hf(job.actor)


def estimate_rl(job: RLJob, device_memory: int | None) -> MemoryEstimate:
    actor = _actor(job)
    notes = [f"actor: {a}" for a in actor.assumptions]
    stages: list[StageMemory] = []
    critic = estimate_hf(job.critic).stages[0] if job.critic else None
    for s in actor.stages:
        ref = (
            (s.weights / 2 if isinstance(job.actor, HFJob) and job.actor.fsdp else s.weights)
            if job.reference
            else 0.0
        )
        ref_w = 0.0 if job.offload_param else ref
        critic_states = (critic.weights + critic.gradients + critic.optimizer) if critic else 0.0
        update = StageMemory(
            stage=f"update {s.stage}",
            weights=s.weights + ref_w + (critic.weights if critic else 0.0),
            gradients=s.gradients + (critic.gradients if critic else 0.0),
            optimizer=s.optimizer + (critic.optimizer if critic else 0.0),
            activations=s.activations,
            logits=s.logits,
            buffers=s.buffers,
        )
        resident_w = 0.0 if job.offload_param else s.weights
        rollout = StageMemory(
            stage=f"rollout {s.stage}",
            weights=resident_w + ref_w + (0.0 if job.offload_param else critic_states),
            gradients=0.0 if job.offload_grad else s.gradients,
            optimizer=0.0 if job.offload_optimizer else s.optimizer,
            buffers=_engine(job, device_memory),
        )
        stages += [update, rollout]
    if job.rollout == "vllm":
        notes.append(
            f"rollout engine: gpu_memory_utilization {job.gpu_memory_utilization} of the device's memory"
            + ("" if device_memory else " (device memory unknown: not counted)")
        )
    else:
        notes.append(
            f"rollout: HF generate, KV cache of {job.rollout_sequences} x {job.rollout_tokens} tokens"
        )
    if job.reference:
        notes.append("reference model: the actor's weights again (no gradients or optimizer)")
    offloaded = [
        n
        for n, on in (
            ("param", job.offload_param),
            ("grad", job.offload_grad),
            ("optimizer", job.offload_optimizer),
        )
        if on
    ]
    if offloaded:
        notes.append("offloaded to the host during rollout: " + ", ".join(offloaded))
    return MemoryEstimate(stages=stages, assumptions=notes, model="rl")


def _engine(job: RLJob, device_memory: int | None) -> float:
    if job.rollout == "vllm":
        return job.gpu_memory_utilization * device_memory if device_memory else 0.0
    shape = job.actor.shape
    tp = job.actor.tp if isinstance(job.actor, MegatronJob) else 1
    kv = 2 * 2 * shape.layers * shape.kv_size / tp * job.rollout_tokens * job.rollout_sequences
    logits = 4 * job.rollout_sequences * shape.vocab
    return kv + logits
