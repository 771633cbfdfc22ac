"""When a job will not fit: the single changes that make it fit, else the fastest layout that does; and the
layout advisor (`estimate --suggest`).

Both work on any job (`memory.job.Job`): `cheapest_fixes` tries the job's `candidates` (single changes,
cheapest in throughput first) and keeps those that fit; `suggest_layouts` estimates every layout of the job's
`layouts` on the same devices, keeps those that fit and that the backend can write as keys
(`MemoryTarget.settings`), drops a layout that only adds changes buying neither memory nor time to one
already listed, and ranks the rest by the job's estimated step time (`Job.step_time`: a model of the
throughput at `megatron.EFFICIENCY` of the device's peak, not a measurement).

Every fix and suggestion carries its settings: the experiment's keys and values that make it (applied as
they are, they give the figure shown: `tests/unit/memory/test_fixes_apply.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.memory.devices import DeviceMemory
from ascendfactory.memory.job import Job
from ascendfactory.memory.report import MemoryEstimate
from ascendfactory.memory.runtime import estimate_on
from ascendfactory.memory.target import MemoryTarget

UNKNOWN = DeviceMemory(None, None, "unknown")

PEAK_FLOPS = 312e12  # 16-bit dense peak assumed when the device is unknown (A100; 910B: ~313 TFLOPS)


@dataclass(frozen=True)
class Fix:
    settings: dict[str, Any]  # experiment key -> value
    job: Job
    estimate: MemoryEstimate
    note: str = ""

    def describe(self) -> str:
        return describe_settings(self.settings)


@dataclass(frozen=True)
class Suggestion:
    settings: dict[str, Any]  # experiment key -> value; empty: the experiment as written
    job: Job
    estimate: MemoryEstimate
    step_s: float
    note: str = field(default="")

    def describe(self) -> str:
        return str(self.job.describe())

    def describe_settings(self) -> str:
        return describe_settings(self.settings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.describe(),
            "set": dict(self.settings),
            "overrides": overrides(self.settings),
            "per_device_peak_bytes": int(round(self.estimate.peak)),
            "step_s": self.step_s,
            **({"note": self.note} if self.note else {}),
        }


def describe_settings(settings: Mapping[str, Any]) -> str:
    """`key: value, key: value` (YAML's spelling of true, false and null)."""
    return ", ".join(f"{k}: {yaml_value(v)}" for k, v in settings.items()) or "(as written)"


def overrides(settings: Mapping[str, Any]) -> list[str]:
    """The settings as command-line overrides (`--key=value`), for `train` / `estimate` as they are."""
    return [f"--{k}={yaml_value(v)}" for k, v in settings.items()]


def yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(",", ":"))
    return str(value)


def cheapest_fixes(
    target: MemoryTarget,
    device: DeviceMemory,
    usable: int | None,
    environ: Mapping[str, str] | None = None,
) -> list[Fix]:
    """The single changes that make the job fit on `device`, cheapest in throughput first, at most five
    (none when the device memory is unknown: nothing can be said to fit)."""
    if usable is None:
        return []
    fixes: list[Fix] = []
    for change in target.job.candidates(target.world_size):
        if change.job == target.job:
            continue
        settings = target.settings(change.knobs, change.job)
        if not settings:
            continue
        est = estimate_on(change.job, device, environ)
        if est.peak <= usable:
            fixes.append(Fix(settings, change.job, est, change.note))
    return fixes[:5]


def suggest_layouts(
    target: MemoryTarget,
    usable: int | None,
    *,
    device: DeviceMemory = UNKNOWN,
    environ: Mapping[str, str] | None = None,
    peak_flops: float = PEAK_FLOPS,
    limit: int = 10,
) -> list[Suggestion]:
    """The layouts that fit (all the job's layouts when the device memory is unknown), fastest first."""
    found: dict[str, Suggestion] = {}
    for change in target.job.layouts(target.world_size):
        settings = target.settings(change.knobs, change.job) if change.knobs else {}
        if settings is None or (change.knobs and not settings):
            continue
        est = estimate_on(change.job, device, environ)
        if usable is not None and est.peak > usable:
            continue
        s = Suggestion(settings, change.job, est, float(change.job.step_time(peak_flops)), change.note)
        known = found.get(s.describe())
        if known is None or len(s.settings) < len(known.settings):
            found[s.describe()] = s
    ranked = sorted(found.values(), key=lambda s: (s.step_s, s.estimate.peak, len(s.settings)))
    kept: list[Suggestion] = []
    for s in ranked:  # changes that buy neither memory nor time over a layout already listed: left out
        if not any(_adds_nothing(s, k) for k in kept):
            kept.append(s)
    return kept[:limit]


def _adds_nothing(s: Suggestion, kept: Suggestion) -> bool:
    """`s` is `kept` plus changes that lower neither the peak nor the step time."""
    more = all(s.settings.get(k, object()) == v for k, v in kept.settings.items())
    return more and kept.step_s <= s.step_s and kept.estimate.peak <= s.estimate.peak


def human_time(seconds: float) -> str:
    """A step time in the unit that shows its digits (the demo model steps in microseconds)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale or unit == "us":
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds:.2e} s"  # pragma: no cover - the loop always returns
