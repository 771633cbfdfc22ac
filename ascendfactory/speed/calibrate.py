"""Fit a device's calibrated constants on its recorded runs, and state the error they reach.

`recorded/<device>.yaml` lists measured runs (each: the `Workload`, the measured step time, the date and
commit it was measured at, and for the CPU the matmul rate and copy bandwidth measured right before it).
The step time is piecewise linear in 1 / efficiency, the overheads, the launch cost and 1 / intra-node
bandwidth (`model.linear_terms`; a max() where launches and work race on a GPU), so the fit is least
squares on the relative error, in closed form on the current pieces, repeated until the constants settle;
the constants a device has no information on (no communication in its runs), and a launch cost measured
rather than fitted (`DeviceSpeed.launch_flops`), keep their stated values.
`calibration_error` is the largest |predicted / measured - 1| over the runs with the fitted constants; with
`leave_one_out=True` each run is predicted by constants fitted on the others (an honest error when there
are more runs than constants).

    python -m ascendfactory.speed.calibrate [cpu|h200]     # prints the constants and every run's error

Runs listed under `validate:` are measured too but held out of the fit: their errors validate the constants.
Runs under `loaded:` were measured while other jobs shared the machine: printed, neither fitted nor held out.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascendfactory.speed.devices import DeviceSpeed, device_speed
from ascendfactory.speed.model import CALIBRATED, Workload, linear_terms, predict, unknown, with_unknown

RECORDED = Path(__file__).resolve().parent / "recorded"


@dataclass(frozen=True)
class RecordedRun:
    label: str
    workload: Workload
    measured_step_s: float
    matmul_flops: float | None = None  # measured right before the run (CPU), else the device's
    memory_bandwidth: float | None = None


@dataclass(frozen=True)
class Recorded:
    device: str
    machine: str
    date: str
    commit: str
    source: str
    runs: tuple[RecordedRun, ...]
    free: tuple[str, ...] = CALIBRATED  # the constants these runs determine (`fit:` in the file)
    validate: tuple[RecordedRun, ...] = ()  # measured runs held out of the fit (`validate:` in the file)
    # measured while other jobs shared the machine (`loaded:` in the file): neither fitted nor held to the
    # goal; what the figure is off by on a busy machine (docs/time-to-train.md)
    loaded: tuple[RecordedRun, ...] = ()


def load(device: str) -> Recorded:
    import yaml

    data: dict[str, Any] = yaml.safe_load((RECORDED / f"{device}.yaml").read_text(encoding="utf-8"))
    free = tuple(data.get("fit") or CALIBRATED)
    return Recorded(
        data["device"],
        data["machine"],
        str(data["date"]),
        str(data["commit"]),
        data["source"],
        _runs(data["runs"]),
        free,
        _runs(data.get("validate") or []),
        _runs(data.get("loaded") or []),
    )


def _runs(rows: list[dict[str, Any]]) -> tuple[RecordedRun, ...]:
    return tuple(
        RecordedRun(
            label=r["label"],
            workload=Workload.from_dict(r["workload"]),
            measured_step_s=float(r["measured_step_s"]),
            matmul_flops=r.get("matmul_flops"),
            memory_bandwidth=r.get("memory_bandwidth"),
        )
        for r in rows
    )


def device_for(run: RecordedRun, base: DeviceSpeed) -> DeviceSpeed:
    """`base` with the matmul rate and bandwidth measured beside `run` (CPU rows), at every precision."""
    dev = base
    if run.matmul_flops:
        dev = dev.with_(matmul_flops={k: float(run.matmul_flops) for k in base.matmul_flops})
        if base.launch_flops:  # the same load slows the launches (and DTensor's dispatch) as the matmul
            slower = base.launch_flops / float(run.matmul_flops)
            dev = dev.with_(
                launch_s=base.launch_s * slower,
                tp_dispatch_step_s=base.tp_dispatch_step_s * slower,
                tp_dispatch_layer_s=base.tp_dispatch_layer_s * slower,
                dp_step_s=base.dp_step_s * slower,
            )
    if run.memory_bandwidth:
        dev = dev.with_(memory_bandwidth=float(run.memory_bandwidth))
    return dev


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a small square system)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if abs(m[c][c]) < 1e-300:
            raise ValueError("the recorded runs do not determine the constants (singular system)")
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(
    runs: tuple[RecordedRun, ...] | list[RecordedRun], base: DeviceSpeed, free: tuple[str, ...] = CALIBRATED
) -> DeviceSpeed:
    """The constants named in `free` minimising the summed squared relative error over `runs` (the others
    kept as `base` has them). The step is piecewise linear in them (`model.linear_terms`): solved at the
    current constants' pieces, again until the constants settle."""
    dev = base
    for _ in range(20):
        new = _fit_once(runs, dev, free)
        if all(
            abs(unknown(new, c) - unknown(dev, c)) <= 1e-9 * max(abs(unknown(dev, c)), 1e-12) for c in free
        ):
            return new
        dev = new
    return dev


def _fit_once(
    runs: tuple[RecordedRun, ...] | list[RecordedRun], base: DeviceSpeed, free: tuple[str, ...]
) -> DeviceSpeed:
    rows = []
    for run in runs:
        dev = device_for(run, base)
        columns, rest = linear_terms(run.workload, dev)
        fixed = sum(columns[c] * unknown(dev, c) for c in CALIBRATED if c not in free)
        rows.append(([columns[c] for c in free], run.measured_step_s - rest - fixed, run.measured_step_s))
    use = [i for i, _ in enumerate(free) if any(r[0][i] > 0 for r in rows)]
    a = [[sum(r[0][i] * r[0][j] / r[2] ** 2 for r in rows) for j in use] for i in use]
    b = [sum(r[0][i] * r[1] / r[2] ** 2 for r in rows) for i in use]
    sol = {free[i]: v for i, v in zip(use, _solve(a, b))}
    dev = base
    for name, u in sol.items():
        if name in ("efficiency", "intra_bandwidth") and u <= 0:
            continue  # no positive rate fits: keep the stated one
        if name == "launch_s" and base.launch_flops:
            continue  # measured, not fitted (a launch cost is only fitted where none was measured)
        dev = with_unknown(dev, name, max(0.0, u))
    return dev


def errors(runs: tuple[RecordedRun, ...] | list[RecordedRun], dev: DeviceSpeed) -> list[float]:
    return [predict(r.workload, device_for(r, dev)).step_s / r.measured_step_s - 1 for r in runs]


def leave_one_out(
    runs: tuple[RecordedRun, ...], base: DeviceSpeed, free: tuple[str, ...] = CALIBRATED
) -> list[float]:
    out = []
    for i, run in enumerate(runs):
        others = [r for j, r in enumerate(runs) if j != i]
        out.append(errors([run], fit(others, base, free))[0])
    return out


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or ["cpu", "h200"]
    for name in names:
        rec = load(name)
        base = device_speed(name)
        assert base is not None, name
        dev = fit(rec.runs, base, rec.free)
        errs = errors(rec.runs, dev)
        print(f"{name}: {len(rec.runs)} runs ({rec.machine}; {rec.date}, commit {rec.commit})")
        print(
            f"  fitted {', '.join(rec.free)}: efficiency={dev.efficiency:.4f} "
            f"step_overhead_s={dev.step_overhead_s:.6g} launch_s={dev.launch_s:.6g} "
            f"intra_bandwidth={dev.intra_bandwidth:.4g} "
            f"calibration_error={max(abs(e) for e in errs):.4f}"
        )
        loo = leave_one_out(rec.runs, base, rec.free) if len(rec.runs) > len(rec.free) + 1 else []
        for i, (run, e) in enumerate(zip(rec.runs, errs)):
            extra = f"  leave-one-out {loo[i]:+.1%}" if loo else ""
            print(f"  {run.label:44s} measured {run.measured_step_s:.4g}s  error {e:+.1%}{extra}")
        for run, e in zip(rec.validate, errors(rec.validate, dev)):
            print(f"  held out: {run.label} measured {run.measured_step_s:.4g}s  error {e:+.1%}")
        if rec.loaded:
            loaded = errors(rec.loaded, dev)
            print(
                f"  under load ({len(loaded)} runs, not fitted): errors {min(loaded):+.1%} to "
                f"{max(loaded):+.1%}, median {sorted(loaded)[len(loaded) // 2]:+.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
