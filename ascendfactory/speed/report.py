"""The time estimate as text (`estimate`, `train --dry-run`, the run summary's predicted against measured)."""

from __future__ import annotations

from typing import Any


def render_lines(timing: dict[str, Any]) -> list[str]:
    """The time estimate as text lines (estimate, train --dry-run)."""
    if "step_s" not in timing:
        return [f"time: {timing.get('note', 'no estimate')}"]
    parts = ", ".join(f"{k} {v:.3g}s" for k, v in timing["parts"].items() if v > 0)
    err = timing.get("calibration_error")
    calibrated = f"calibration error {err:.0%}" if err is not None else "not calibrated on this device"
    if timing.get("in_range") is False:
        calibrated += "; OUTSIDE the calibrated model shapes: not reliable"
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
    """`predicted 1.2 s per step, measured 1.3 s (-8%)` (None without both figures)."""
    if measured_step_s is None or not timing.get("step_s"):
        return None
    error = timing["step_s"] / measured_step_s - 1
    outside = " (outside the calibrated model shapes)" if timing.get("in_range") is False else ""
    return (
        f"step time: predicted {human_seconds(timing['step_s'])}, measured {human_seconds(measured_step_s)} "
        f"({error:+.0%}) on {timing.get('device')}{outside}"
    )
