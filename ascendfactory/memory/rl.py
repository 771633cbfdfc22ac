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

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ascendfactory.memory.job import Change, Job
from ascendfactory.memory.report import MemoryEstimate, StageMemory


@dataclass(frozen=True)
class RLJob:
    actor: Job  # the actor's training job (`memory.megatron.MegatronJob`, `memory.hf.HFJob`, ...)
    reference: bool = True  # a KL reference model on the same devices
    reference_share: float = 1.0  # the reference's weight bytes per byte of the actor's weights
    critic: Job | None = None  # a critic's training job
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

    # -- the Job protocol (memory.job) ---------------------------------------------------------------------
    def estimate(self, device_memory: int | None = None) -> MemoryEstimate:
        return estimate_rl(self, device_memory)

    def candidates(self, world_size: int) -> Iterator[Change]:
        """Offloading the training states during the rollout, a smaller rollout share, then the actor's own
        fixes."""
        for knob in ("offload_optimizer", "offload_grad", "offload_param"):
            if not getattr(self, knob):
                yield Change({f"offload_train_{knob.split('_')[1]}": True}, self.with_(**{knob: True}))
        if self.rollout == "vllm" and self.gpu_memory_utilization > 0.3:
            lower = round(self.gpu_memory_utilization - 0.1, 2)
            yield Change({"gpu_memory_utilization": lower}, self.with_(gpu_memory_utilization=lower))
        for change in self.actor.candidates(world_size):
            yield Change(change.knobs, self.with_(actor=change.job), change.note)

    def layouts(self, world_size: int) -> Iterator[Change]:
        """The actor's layouts; with each, the rollout offloads off and on."""
        offloads = {"offload_optimizer": self.offload_optimizer, "offload_grad": self.offload_grad}
        for change in self.actor.layouts(world_size):
            for on in sorted({False, True, all(offloads.values())}):
                job = self.with_(actor=change.job, offload_optimizer=on, offload_grad=on)
                knobs = dict(change.knobs)
                if on != all(offloads.values()) or any(v != on for v in offloads.values()):
                    knobs.update(offload_train_optimizer=on, offload_train_grad=on)
                yield Change(knobs, job, change.note)

    def step_time(self, peak_flops: float) -> float:
        """The actor's update; offloaded states cross the host link twice per iteration."""
        moved = sum(
            s.gradients * self.offload_grad + s.optimizer * self.offload_optimizer
            for s in self.actor.estimate().stages[:1]
        )
        return float(self.actor.step_time(peak_flops)) + 2 * moved / HOST_BANDWIDTH

    def groups(self) -> int:
        """The actor's communication domains (the rollout engine's are its own, counted in its share)."""
        actor: Any = self.actor
        return int(actor.groups()) if hasattr(actor, "groups") else 1

    def describe(self) -> str:
        offloaded = [n for n in ("param", "grad", "optimizer") if getattr(self, f"offload_{n}")]
        return str(self.actor.describe()) + (f"; rollout offloads {'+'.join(offloaded)}" if offloaded else "")


HOST_BANDWIDTH = 25e9  # bytes/s between a device and its host (PCIe 4 x16, effective)


def estimate_rl(job: RLJob, device_memory: int | None) -> MemoryEstimate:
    actor = job.actor.estimate(device_memory)
    notes = [f"actor: {a}" for a in actor.assumptions]
    stages: list[StageMemory] = []
    critic = job.critic.estimate(device_memory).stages[0] if job.critic else None
    for s in actor.stages:
        ref = s.weights * job.reference_share if job.reference else 0.0
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
    actor: Any = job.actor  # every actor job so far has a shape (and Megatron's a TP)
    shape, tp = actor.shape, getattr(actor, "tp", 1)
    kv = 2 * 2 * shape.layers * shape.kv_size / tp * job.rollout_tokens * job.rollout_sequences
    logits = 4 * job.rollout_sequences * shape.vocab
    return kv + logits
