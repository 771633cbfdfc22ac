"""The pre-launch memory check: estimate the plan's job against the device, refuse what will not fit.

`on_exceed` (the experiment's `memory_check.on_exceed`): `error` stops a real run before anything starts
(a `ConfigError`, exit 2) naming the stage, its largest component and what to change, as the experiment's
keys: the single changes that make it fit, cheapest in throughput first, each with its estimate; when no
single change fits, the fastest layout that fits on the same devices (`fixes.suggest_layouts`); when none
does, more devices or a smaller model. `warn` prints the same as a warning; `off` skips the check (the
estimate is still shown by `--dry-run` and `estimate`). A dry run never refuses: it shows the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.memory.devices import DeviceMemory, resolve_device_memory
from ascendfactory.memory.report import MemoryEstimate, gib
from ascendfactory.memory.runtime import estimate_on
from ascendfactory.memory.target import MemoryTarget


@dataclass(frozen=True)
class MemoryPolicy:
    on_exceed: str = "error"  # error | warn | off
    device_memory_gb: float | None = None
    device: str | None = None
    probe: bool = True
    environ: Mapping[str, str] = field(default_factory=dict)  # the train step's (workspace variables)


def estimate_target(
    target: MemoryTarget, device: DeviceMemory, environ: Mapping[str, str] | None = None
) -> MemoryEstimate:
    est = estimate_on(target.job, device, environ)
    est.device_memory, est.device, est.device_source, est.reserve, est.device_kind = (
        device.bytes,
        device.name,
        device.source,
        device.reserve,
        device.kind,
    )
    est.assumptions += list(target.notes)
    if device.bytes is not None:
        est.assumptions.append(
            f"reserve {gib(device.reserve)} GiB: 2 GiB runtime context + 5% allocator fragmentation"
        )
    return est


def check_memory(
    target: MemoryTarget, policy: MemoryPolicy, *, dry_run: bool, key: str = "memory_check"
) -> tuple[MemoryEstimate, list[str]]:
    """(the estimate, warnings); raises ConfigError on a real run that will not fit with on_exceed=error."""
    device = resolve_device_memory(
        memory_gb=policy.device_memory_gb, device=policy.device, probe=policy.probe
    )
    est = estimate_target(target, device, policy.environ)
    if est.fits is not False or policy.on_exceed == "off":
        return est, []
    message, fix = refusal(target, est, device, policy.environ)
    if policy.on_exceed == "warn" or dry_run:
        return est, [f"{message}; {fix}"]
    raise ConfigError([Problem(key=key, message=message, fix=fix)])


def refusal(
    target: MemoryTarget, est: MemoryEstimate, device: DeviceMemory, environ: Mapping[str, str]
) -> tuple[str, str]:
    stage = est.peak_stage
    largest = stage.largest()
    message = (
        f"the job needs {gib(est.peak)} GiB per device on stage {stage.stage} (largest: {largest} "
        f"{gib(getattr(stage, largest))} GiB) + {gib(est.reserve)} GiB reserve, more than the "
        f"{gib(est.device_memory or 0)} GiB of {est.device or 'the device'} ({est.device_source})"
    )
    from ascendfactory.memory import fixes as advice  # only for a job that does not fit

    fixes = advice.cheapest_fixes(target, device, est.usable, environ)
    if fixes:
        listed = "; ".join(f"{f.describe()} -> {gib(f.estimate.peak)} GiB" for f in fixes)
        return message, f"any one of these fits, cheapest first: {listed}"
    layouts = advice.suggest_layouts(target, est.usable, device=device, environ=environ, limit=1)
    if layouts:
        best = layouts[0]
        note = f"; {best.note}" if best.note else ""
        return message, (
            f"no single change fits; the fastest layout that fits on these {target.world_size} devices is "
            f"{best.describe()}: {best.describe_settings()} -> {gib(best.estimate.peak)} GiB{note} (more: "
            "ascendfactory-cli estimate <the same arguments> --suggest)"
        )
    return message, (
        f"no layout the estimate searches fits on these {target.world_size} devices: use more devices or a "
        "smaller model (memory_check.on_exceed: warn runs it anyway)"
    )
