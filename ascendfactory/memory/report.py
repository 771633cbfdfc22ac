"""What an estimate says: per-device peak bytes by pipeline stage and component, and the verdict.

The JSON shape (`MemoryEstimate.to_dict`, the `memory` section of `train --dry-run --format json` and
`estimate --json`), all figures in bytes:

    {"device_memory_bytes": int | null,     what one device offers (probe, key, or device table)
     "device": str | null, "device_source": str, "device_kind": "cuda" | "npu" | null,
     "reserve_bytes": int,                  runtime context + allocator fragmentation, kept free
     "per_device_peak_bytes": int,          the largest stage total
     "fits": bool | null,                   peak + reserve <= device memory (null: device unknown)
     "stages": [{"stage": str, "weights": int, "gradients": int, "optimizer": int,
                 "activations": int, "logits": int, "buffers": int, "runtime": int, "total": int}, ...],
     "assumptions": [str, ...]}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GiB = 1024**3
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "buffers", "runtime")


@dataclass
class StageMemory:
    """Peak bytes on one device of one pipeline stage (or of one role that shares devices)."""

    stage: str
    weights: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    logits: float = 0.0
    buffers: float = 0.0
    runtime: float = 0.0  # the device runtime's own fixed allocations (`memory.runtime`)

    @property
    def total(self) -> float:
        return sum(getattr(self, c) for c in COMPONENTS)

    def largest(self) -> str:
        return max(COMPONENTS, key=lambda c: getattr(self, c))

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            **{c: int(round(getattr(self, c))) for c in COMPONENTS},
            "total": int(round(self.total)),
        }


@dataclass
class MemoryEstimate:
    stages: list[StageMemory]
    assumptions: list[str] = field(default_factory=list)
    device_memory: int | None = None
    device: str | None = None
    device_source: str = "unknown"
    reserve: int = 0
    model: str = ""  # which memory model produced it (megatron, zero, fsdp, rl, ...)
    device_kind: str | None = None  # cuda | npu | None

    @property
    def peak(self) -> float:
        return max((s.total for s in self.stages), default=0.0)

    @property
    def peak_stage(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.total)

    @property
    def usable(self) -> int | None:
        return None if self.device_memory is None else self.device_memory - self.reserve

    @property
    def fits(self) -> bool | None:
        usable = self.usable
        return None if usable is None else self.peak <= usable

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device_memory_bytes": self.device_memory,
            "device": self.device,
            "device_source": self.device_source,
            "device_kind": self.device_kind,
            "reserve_bytes": self.reserve,
            "per_device_peak_bytes": int(round(self.peak)),
            "fits": self.fits,
            "stages": [s.to_dict() for s in self.stages],
            "assumptions": list(self.assumptions),
        }

    def lines(self) -> list[str]:
        return render_lines(self.to_dict())


def render_lines(d: dict[str, Any]) -> list[str]:
    """The text form of `MemoryEstimate.to_dict()`: one line per stage, then the verdict."""
    out = []
    for s in d["stages"]:
        parts = ", ".join(f"{c} {human(s[c])}" for c in COMPONENTS if s[c] > 0)
        out.append(f"{s['stage']}: {human(s['total'])} ({parts})")
    stages = d["stages"]
    peak_stage = max(stages, key=lambda s: s["total"])["stage"] if stages else "-"
    peak = f"per-device peak {human(d['per_device_peak_bytes'])} ({peak_stage})"
    if d["device_memory_bytes"] is None:
        out.append(f"{peak}; device memory unknown ({d['device_source']})")
    else:
        verdict = "fits" if d["fits"] else "DOES NOT FIT"
        out.append(
            f"{peak} + reserve {human(d['reserve_bytes'])} vs {human(d['device_memory_bytes'])} "
            f"({d['device'] or 'device'}, {d['device_source']}): {verdict}"
        )
    return out


def gib(n: float) -> str:
    return f"{n / GiB:.2f}"


def human(n: float) -> str:
    """Bytes as GiB, or MiB under one GiB (the tiny models of tests and demos)."""
    return f"{n / GiB:.2f} GiB" if abs(n) >= GiB else f"{n / 2**20:.1f} MiB"
