"""rl-demo's memory job, a kind of its own (the open `ascendfactory.memory.job.Job` protocol): what its
driver holds on one node, the policy's logits and one group of rollouts (an action and a reward per sample,
8-byte Python floats and ints in lists: 8 bytes each plus the list's pointer), and the one change that
lowers it, a smaller group."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ascendfactory.memory.job import Change
from ascendfactory.memory.report import MemoryEstimate, StageMemory

ARMS = 4
PER_SAMPLE = 2 * (8 + 8) + ARMS * (8 + 8)  # action, reward, and the probabilities sent with the group


@dataclass(frozen=True)
class BanditJob:
    group_size: int
    nodes: int

    def estimate(self, device_memory: int | None = None) -> MemoryEstimate:
        stage = StageMemory("rollout", weights=ARMS * 8, buffers=self.group_size * PER_SAMPLE)
        return MemoryEstimate(
            [stage],
            assumptions=["rl-demo's driver: the policy's logits and one group of rollouts"],
            model="rl-demo",
        )

    def candidates(self, world_size: int) -> Iterator[Change]:
        if self.group_size > 1:
            yield Change({"group_size": self.group_size // 2}, replace(self, group_size=self.group_size // 2))

    def layouts(self, world_size: int) -> Iterator[Change]:
        return iter(())

    def step_time(self, peak_flops: float) -> float:
        return self.group_size * self.nodes * 1e-6

    def describe(self) -> str:
        return f"group {self.group_size} x {self.nodes} node(s)"
