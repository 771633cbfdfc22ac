"""What a backend hands the memory check: the job to estimate, and the keys a user edits to change it.

A backend builds a `MemoryTarget` from the experiment it has read (`Plan.memory_target`); the planner
estimates it against the device (`ascendfactory.memory.check`), refuses a real run that will not fit, and
`estimate --suggest` searches layouts around it. `keys` maps each knob the fixes may turn to the key the user
writes in the experiment file (each backend spells them its own way):

    recompute, recompute_method, recompute_num_layers, distributed_optimizer, tp, pp, vpp, mbs, gbs,
    sequence_parallel, zero, offload_optimizer, offload_param, gradient_checkpointing,
    gpu_memory_utilization, offload_train_param, offload_train_grad, offload_train_optimizer
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ascendfactory.memory.megatron import MegatronJob, estimate_megatron
from ascendfactory.memory.report import MemoryEstimate

if TYPE_CHECKING:  # a job of these kinds was built by its own module, which the estimate imports then
    from ascendfactory.memory.hf import HFJob
    from ascendfactory.memory.rl import RLJob

    Job = MegatronJob | HFJob | RLJob


@dataclass(frozen=True)
class MemoryTarget:
    job: Job
    keys: dict[str, str] = field(default_factory=dict)
    world_size: int = 1
    notes: tuple[str, ...] = ()  # what the backend could not model (shown as assumptions)


def estimate_job(job: Job, device_memory: int | None = None) -> MemoryEstimate:
    if isinstance(job, MegatronJob):
        return estimate_megatron(job)
    from ascendfactory.memory.hf import HFJob, estimate_hf
    from ascendfactory.memory.rl import estimate_rl

    if isinstance(job, HFJob):
        return estimate_hf(job)
    return estimate_rl(job, device_memory)
