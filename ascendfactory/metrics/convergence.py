"""Convergence verdict: is the loss falling (or the RL score rising) over the last window?

The metric is chosen from what the log has (`lm loss`, `loss`, then RL scores such as
`critic/score/mean`, `grpo/score/mean`, `*_rewards/mean`); scores and rewards should rise, losses
fall. Over the last `window` share of the logged steps (default: the second half, at least 5
points) a least-squares line is fitted: a change beyond two standard errors in the expected
direction is ``converging``, within them ``flat`` (a plateau is fine after the initial fall), the
other way ``diverging``. Also flagged: NaN/inf values, Megatron's `number of nan iterations` and
`number of skipped iterations` counters, and spikes (a loss above `spike_ratio` x the median of the
previous `spike_lookback` values, which also exceeds that median by 5 MADs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from ascendfactory.metrics.aux_loss import AUX_LOSS_KEYS as AUX_LOSS_KEYS
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.table import StepTable

LOSS_KEYS = ("lm loss", "loss", "train_loss", "actor/total_loss")
SCORE_KEYS = ("critic/score/mean", "grpo/score/mean", "critic/rewards/mean", "grpo/rewards/mean")
MIN_POINTS = 5


@dataclass
class Convergence:
    metric: str | None
    direction: str  # "down" or "up"
    verdict: str  # converging | flat | diverging | insufficient data | no metric
    ok: bool
    window: list[int] = field(default_factory=list)  # [first step, last step]
    points: int = 0
    slope_per_step: float | None = None
    relative_change: float | None = None
    nan_steps: list[int] = field(default_factory=list)
    nan_iterations: int = 0
    skipped_iterations: int = 0
    spikes: list[dict[str, float]] = field(default_factory=list)
    message: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def loss_keys() -> tuple[str, ...]:
    """The loss metric names, in preference order: the common ones, then those registered log formats
    declare (`LogFormat.loss_keys`)."""
    from ascendfactory.metrics.formats import registered_formats

    declared = [k for f in registered_formats() for k in f.loss_keys if k not in LOSS_KEYS]
    return (*LOSS_KEYS, *dict.fromkeys(declared))


def pick_metric(keys: Iterable[str]) -> str | None:
    """The metric to judge convergence by: a loss, else an RL score/reward (RL runs have both)."""
    keys = list(keys)
    for k in SCORE_KEYS:
        if k in keys:
            return k
    rewards = sorted(k for k in keys if k.endswith("_rewards/mean"))
    if rewards:
        return rewards[0]
    for k in loss_keys():
        if k in keys:
            return k
    return None


def direction_of(metric: str) -> str:
    m = metric.lower()
    return "up" if any(w in m for w in ("score", "reward", "acc")) else "down"


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = a + b x; returns (b, standard error of b, intercept)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, math.inf, my
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    resid = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    se = math.sqrt(resid / (n - 2) / sxx) if n > 2 else math.inf
    return b, se, a


def find_spikes(
    steps: list[int], values: list[float], *, ratio: float = 1.5, lookback: int = 10
) -> list[dict[str, float]]:
    spikes = []
    for i in range(3, len(values)):
        prev = [v for v in values[max(0, i - lookback) : i] if math.isfinite(v)]
        if len(prev) < 3 or not math.isfinite(values[i]):
            continue
        med = statistics.median(prev)
        mad = statistics.median(abs(v - med) for v in prev)
        if values[i] > med * ratio and values[i] > med + 5 * mad and med > 0:
            spikes.append({"step": steps[i], "value": values[i], "baseline": med})
    return spikes


def check_convergence(
    records: Iterable[Record] | StepTable,
    *,
    metric: str | None = None,
    window: float = 0.5,
    spike_ratio: float = 1.5,
    spike_lookback: int = 10,
) -> Convergence:
    table = StepTable.from_records(records)
    metric = metric or pick_metric(table.keys())
    if metric is None:
        return Convergence(None, "down", "no metric", False, message="no loss or score metric in the log")
    direction = direction_of(metric)
    steps, values = table.series(metric)
    report = Convergence(metric, direction, "insufficient data", True)
    report.nan_steps = [s for s, v in zip(steps, values) if not math.isfinite(v)]
    for key, attr in (
        ("number of nan iterations", "nan_iterations"),
        ("number of skipped iterations", "skipped_iterations"),
    ):
        counts = [v for v in table.series(key)[1] if math.isfinite(v)]
        setattr(report, attr, int(sum(counts)))  # Megatron counts per log interval
    pts = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
    if direction == "down":
        report.spikes = find_spikes(
            [p[0] for p in pts], [p[1] for p in pts], ratio=spike_ratio, lookback=spike_lookback
        )
    n = max(MIN_POINTS, int(math.ceil(len(pts) * window)))
    win = pts[-n:]
    report.points = len(win)
    if win:
        report.window = [win[0][0], win[-1][0]]
    if len(win) < MIN_POINTS:
        report.message = f"{len(win)} finite '{metric}' values; at least {MIN_POINTS} are needed"
        report.ok = not report.nan_steps
        return _finish(report)
    xs, ys = [float(p[0]) for p in win], [p[1] for p in win]
    slope, se, _ = _fit(xs, ys)
    span = xs[-1] - xs[0]
    scale = abs(sum(ys) / len(ys)) or 1.0
    report.slope_per_step = slope
    report.relative_change = slope * span / scale
    expected = -1 if direction == "down" else 1
    if abs(slope) <= 2 * se or abs(report.relative_change) < 0.005:
        report.verdict = "flat"
    elif slope * expected > 0:
        report.verdict = "converging"
    else:
        report.verdict = "diverging"
    report.ok = report.verdict != "diverging" and not report.nan_steps
    return _finish(report)


def _finish(report: Convergence) -> Convergence:
    parts = [f"{report.metric} {report.verdict}" if report.metric else report.verdict]
    if report.relative_change is not None:
        parts.append(f"{report.relative_change:+.1%} over steps {report.window[0]}-{report.window[1]}")
    if report.nan_steps:
        parts.append(f"NaN/inf at {len(report.nan_steps)} step(s), first {report.nan_steps[0]}")
    if report.nan_iterations:
        parts.append(f"{report.nan_iterations} nan iteration(s)")
    if report.skipped_iterations:
        parts.append(f"{report.skipped_iterations} skipped iteration(s)")
    if report.spikes:
        parts.append(f"{len(report.spikes)} spike(s), first at step {int(report.spikes[0]['step'])}")
    detail = "; ".join(parts)
    report.message = f"{detail}. {report.message}".strip() if report.message else detail
    return report
