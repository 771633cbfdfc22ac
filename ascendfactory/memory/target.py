"""What a backend hands the memory check: the job to estimate, and how its knobs are spelled as experiment
keys.

A backend builds a `MemoryTarget` from its typed run (`Backend.memory_target(run)`: the values the framework
will parse, never `plan.facts`); the planner estimates it against the device (`ascendfactory.memory.check`),
refuses a real run that will not fit, and `estimate --suggest` searches layouts around it. `spell` turns a
change's knobs (`memory.job.Change.knobs`: `tp`, `recompute`, `zero`, ...) into the keys the user writes, each
with its value (`{"backend_config.training.tensor-model-parallel-size": 2}`), or None when a knob has no key
in this backend (such a change is not offered: the user could not make it); `spelled_by(table)` builds the
common one-key-per-knob spelling from a knob -> key table. Knobs the fixes and the advisor may turn:

    recompute, recompute_method, recompute_num_layers, distributed_optimizer, tp, pp, vpp, mbs, grad_accum,
    sequence_parallel, zero, offload_optimizer, offload_param, gradient_checkpointing, finetuning,
    lora_rank, gpu_memory_utilization, offload_train_param, offload_train_grad, offload_train_optimizer
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.memory.job import Job
from ascendfactory.memory.report import MemoryEstimate

Spelling = Callable[[Mapping[str, Any], Job], "dict[str, Any] | None"]


def spelled_by(table: Mapping[str, str]) -> Spelling:
    """A spelling that writes each knob as the key `table` names (None when `table` lacks one)."""

    def spell(knobs: Mapping[str, Any], job: Job) -> dict[str, Any] | None:
        if any(k not in table for k in knobs):
            return None
        return {table[k]: v for k, v in knobs.items()}

    return spell


@dataclass(frozen=True)
class MemoryTarget:
    job: Job
    spell: Spelling = field(default=lambda knobs, job: dict(knobs))
    world_size: int = 1
    notes: tuple[str, ...] = ()  # what the backend could not model (shown as assumptions)

    def settings(self, knobs: Mapping[str, Any], job: Job) -> dict[str, Any] | None:
        """A change as the experiment's keys and values (None: not writable in this backend)."""
        return self.spell(knobs, job)


def estimate_job(job: Job, device_memory: int | None = None) -> MemoryEstimate:
    return job.estimate(device_memory)
