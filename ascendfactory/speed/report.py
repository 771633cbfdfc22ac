"""The time estimate as text (`estimate`, `train --dry-run`, the run summary's predicted against measured)."""

from __future__ import annotations

from typing import Any


def render_lines(timing: dict[str, Any]) -> list[str]:
    """The time estimate as text lines (estimate, train --dry-run); none for a model shape the device's
    calibration does not cover (`unsupported`: why, in words)."""
    if "step_s" not in timing:
        return [f"time: {timing.get('note', 'no estimate')}"]
    why = unsupported(timing)
    if why:
        return [f"time: no estimate: {why}"]
    parts = ", ".join(f"{k} {v:.3g}s" for k, v in timing["parts"].items() if v > 0)
    err = timing.get("calibration_error")
    calibrated = f"calibration error {err:.0%}" if err is not None else "not calibrated on this device"
    lines = [
        f"step time {human_seconds(timing['step_s'])} ({parts})",
        f"{timing['tokens_per_s_per_device']:,.0f} tokens/s per device, "
        f"{timing['tflops_per_device']:.3g} TFLOP/s per device (Megatron's formula) on {timing['device']}; "
        f"{calibrated}",
    ]
    if timing.get("run_s") is not None:
        iters = timing["workload"].get("train_iters")
        lines.append(f"whole run: {human_seconds(timing['run_s'])} for {iters} iterations (training only)")
    return lines


def human_seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.2f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def versus_measured(timing: dict[str, Any], measured_step_s: float | None) -> str | None:
    """`step time: predicted 1.2 s, measured 1.3 s (-8%) on cpu` (None without both figures); for a model
    shape the calibration does not cover, the measured figure and why there is no prediction."""
    if measured_step_s is None or not timing.get("step_s"):
        return None
    why = unsupported(timing)
    if why:
        measured = human_seconds(measured_step_s)
        return f"step time: measured {measured} on {timing.get('device')} (no prediction: {why})"
    error = timing["step_s"] / measured_step_s - 1
    return (
        f"step time: predicted {human_seconds(timing['step_s'])}, measured {human_seconds(measured_step_s)} "
        f"({error:+.0%}) on {timing.get('device')}"
    )


def unsupported(timing: dict[str, Any]) -> str | None:
    """Why the time model gives no figure for this job (None when it does): a model far from the shapes the
    device was calibrated on (`StepPrediction.in_range`), whose per-layer and per-step costs differ from
    theirs by more than the model can tell."""
    if timing.get("in_range") is not False:
        return None
    hidden = (timing.get("workload") or {}).get("hidden")
    known = timing.get("calibrated_hidden")
    shapes = (
        f"hidden size {known[0]}"
        if known and known[0] == known[1]
        else (f"hidden sizes {known[0]} to {known[1]}" if known else "other shapes")
    )
    return (
        f"the {timing.get('device')} time model was measured on models of {shapes}; this model's, {hidden}, "
        "is so much smaller that its step is mostly fixed per-layer and per-step costs the measured models "
        "do not tell, so no figure within 25% can be given"
    )
