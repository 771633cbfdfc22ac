"""The open memory job: what every memory model implements, so that a new backend's job is one class in its
own package (no list of job kinds to extend here).

    estimate(device_memory)      per-device peak by stage; `device_memory` (bytes, or None when unknown) is
                                 read only by jobs whose engine takes a share of the device (vLLM's
                                 `gpu_memory_utilization`)
    candidates(world_size)       single changes that lower the peak, cheapest in throughput first (the fixes a
                                 refusal offers)
    layouts(world_size)          the layouts the advisor (`estimate --suggest`) searches on the same devices
    step_time(peak_flops)        an estimated step time, seconds, to rank layouts by (a model of the
                                 throughput, not a measurement; the advisor says so)
    describe()                   the layout in a few words (`TP2 PP1 DP4 MBS 1 recompute full dist-opt`)

A change is a `Change`: the knobs it turns, in the job's own words (`{"tp": 2}`, `{"zero": 3}`), and the job
it gives. The backend spells knobs as the experiment's keys (`target.MemoryTarget.spell`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ascendfactory.memory.report import MemoryEstimate


@runtime_checkable
class Job(Protocol):
    def estimate(self, device_memory: int | None = None) -> MemoryEstimate: ...

    def candidates(self, world_size: int) -> Iterator[Change]: ...

    def layouts(self, world_size: int) -> Iterator[Change]: ...

    def step_time(self, peak_flops: float) -> float: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Change:
    """One change of a job: `knobs` (knob -> new value, in the job's words) and the job it makes."""

    knobs: Mapping[str, Any]
    job: Job
    note: str = field(default="", compare=False)  # what the change costs besides memory (shown)
