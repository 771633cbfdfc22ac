"""`compare`: two runs' metric aligned by step, with the error figures TrainingLogParser reports.

For every step both runs logged: a, b, diff = a - b, relative = (a - b) / |a| (run A is the
baseline). Reported: mean and max absolute error, mean and max relative error, mean squared error,
and the share of steps within +-`tolerance` (default 2%) relative error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ascendfactory.metrics.convergence import loss_keys, pick_metric
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.table import StepTable


@dataclass
class Comparison:
    metric: str
    steps: list[int] = field(default_factory=list)
    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    tolerance: float = 0.02
    only_in_a: int = 0
    only_in_b: int = 0

    @property
    def diff(self) -> list[float]:
        return [x - y for x, y in zip(self.a, self.b)]

    @property
    def relative(self) -> list[float]:
        return [(x - y) / abs(x) if x else (0.0 if x == y else math.inf) for x, y in zip(self.a, self.b)]

    def stats(self) -> dict[str, float | int | None]:
        pairs = [(d, r) for d, r in zip(self.diff, self.relative) if math.isfinite(d)]
        if not pairs:
            return {"aligned_steps": 0, "only_in_a": self.only_in_a, "only_in_b": self.only_in_b}
        absd = [abs(d) for d, _ in pairs]
        absr = [abs(r) for _, r in pairs]
        return {
            "aligned_steps": len(self.steps),
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "mean_abs_error": sum(absd) / len(absd),
            "max_abs_error": max(absd),
            "mean_squared_error": sum(d * d for d in absd) / len(absd),
            "mean_rel_error": sum(absr) / len(absr),
            "max_rel_error": max(absr),
            "max_rel_error_step": self.steps[max(range(len(absr)), key=absr.__getitem__)],
            "within_tolerance": sum(1 for r in absr if r <= self.tolerance) / len(absr),
            "tolerance": self.tolerance,
        }

    def to_dict(self, *, rows: bool = False) -> dict[str, object]:
        out: dict[str, object] = {"metric": self.metric, **self.stats()}
        if rows:
            out["rows"] = [
                {"step": s, "a": x, "b": y, "diff": d, "relative": r}
                for s, x, y, d, r in zip(self.steps, self.a, self.b, self.diff, self.relative)
            ]
        return out


def compare(
    a: Iterable[Record] | StepTable,
    b: Iterable[Record] | StepTable,
    *,
    metric: str | None = None,
    tolerance: float = 0.02,
) -> Comparison:
    ta, tb = StepTable.from_records(a), StepTable.from_records(b)
    key_a = key_b = metric or pick_metric([k for k in ta.keys() if k in set(tb.keys())]) or ""
    if not key_a:  # two formats that name the loss differently (Megatron's `lm loss`, HF's `loss`)
        own_a, own_b = _own_loss(ta), _own_loss(tb)
        key_a, key_b = (own_a, own_b) if own_a and own_b else ("", "")
    sa, va = ta.series(key_a)
    sb, vb = tb.series(key_b)
    right = dict(zip(sb, vb))
    cmp = Comparison(key_a if key_a == key_b else f"{key_a} (A) / {key_b} (B)", tolerance=tolerance)
    for step, x in zip(sa, va):
        if step in right:
            cmp.steps.append(step)
            cmp.a.append(x)
            cmp.b.append(right[step])
    common = len(cmp.steps)
    cmp.only_in_a, cmp.only_in_b = len(sa) - common, len(sb) - common
    return cmp


def _own_loss(table: StepTable) -> str | None:
    """The training loss under the name this log's format gives it."""
    return next((k for k in loss_keys() if table.has(k)), None)
