"""One vocabulary for the metrics every backend logs under its own name, so that runs of different backends
compare in one table and one plot (`logs compare --align step|tokens`).

    common_records(records, seq_length=None) -> list[Record]   the records with the common names added
    align(a, b, metric, by="step"|"tokens", tolerance) -> Comparison

The common names, and where each comes from (the first name a record has wins):

- loss: `lm loss` (Megatron, MindSpeed, torch), `loss` (LLaMA-Factory);
- learning_rate: `learning rate` (Megatron), `lr` / `learning_rate` (LLaMA-Factory), `actor/lr` (verl,
  MindSpeed-RL);
- grad_norm: `grad norm` (Megatron), `grad_norm` (LLaMA-Factory, MindSpeed-RL), `actor/grad_norm` (verl);
- tokens_per_s: global batch size x seq_length / iteration time (Megatron), `throughput` (LLaMA-Factory),
  `perf/throughput` (verl), `e2e_tps` (MindSpeed-RL);
- reward: `critic/score/mean` (verl), `grpo/score/mean` (MindSpeed-RL);
- tokens_seen: consumed samples x seq_length (Megatron), `total_tokens` (LLaMA-Factory), the running sum of
  `perf/total_num_tokens` (verl).

A record keeps its own names too (`lm loss` still compares two Megatron runs). Tokens seen are the
framework's own count: Megatron's are padded samples (x seq_length), LLaMA-Factory's the input tokens
seen, so two runs on the same data align by tokens to within the padding.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from typing import Literal

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.metrics.compare import Comparison, compare
from ascendfactory.metrics.record import Record

ALIASES: dict[str, tuple[str, ...]] = {
    "loss": ("lm loss", "loss"),
    "learning_rate": ("learning rate", "lr", "learning_rate", "actor/lr", "learning-rate"),
    "grad_norm": ("grad norm", "grad_norm", "actor/grad_norm", "grad-norm"),
    "tokens_per_s": ("perf/throughput", "e2e_tps", "throughput", "system/tps"),
    "reward": ("critic/score/mean", "grpo/score/mean", "critic/rewards/mean", "reward"),
}
COMMON = (*ALIASES, "tokens_seen")
_ITER_MS = "elapsed time per iteration (ms)"


def _first(metrics: dict[str, float], names: Sequence[str]) -> float | None:
    return next((metrics[n] for n in names if n in metrics), None)


def _megatron_tokens(m: dict[str, float], seq_length: int | None) -> tuple[float | None, float | None]:
    """(tokens/s, tokens seen) of a Megatron line, when its batch size, time and sequence length are known."""
    if not seq_length:
        return None, None
    gbs, ms = m.get("global batch size"), m.get(_ITER_MS)
    rate = gbs * seq_length / (ms / 1000.0) if gbs and ms else None
    consumed = m.get("consumed samples")
    return rate, (consumed * seq_length if consumed is not None else None)


def common_records(records: Iterable[Record], *, seq_length: int | None = None) -> list[Record]:
    """Training records with the common names added (table in the module docstring); others as they are."""
    out, verl_tokens = [], 0.0
    for rec in records:
        if rec.kind != "train":
            out.append(rec)
            continue
        m = dict(rec.metrics)
        added = {name: v for name, names in ALIASES.items() if (v := _first(m, names)) is not None}
        rate, seen = _megatron_tokens(m, seq_length)
        if rate is not None and "perf/throughput" not in m:
            added["tokens_per_s"] = rate
        if "perf/total_num_tokens" in m:
            verl_tokens += m["perf/total_num_tokens"]
            seen = verl_tokens
        seen = _first(m, ("total_tokens", "num_input_tokens_seen")) if seen is None else seen
        if seen is not None:
            added["tokens_seen"] = seen
        out.append(dataclasses.replace(rec, metrics={**m, **added}))
    return out


def _series(records: Sequence[Record], metric: str) -> list[tuple[float, float]]:
    """(tokens seen, value) in token order, finite values only."""
    pts = [
        (r.metrics["tokens_seen"], r.metrics[metric])
        for r in records
        if r.kind == "train" and "tokens_seen" in r.metrics and metric in r.metrics
    ]
    return sorted((t, v) for t, v in pts if math.isfinite(v))


def _interpolate(points: list[tuple[float, float]], x: float) -> float | None:
    """Linear interpolation of `points` (sorted by x) at `x`; None outside their range."""
    if not points or x < points[0][0] or x > points[-1][0]:
        return None
    lo = max(i for i, (px, _) in enumerate(points) if px <= x)
    if points[lo][0] == x or lo == len(points) - 1:
        return points[lo][1]
    (x0, y0), (x1, y1) = points[lo], points[lo + 1]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def align(
    a: Sequence[Record],
    b: Sequence[Record],
    *,
    metric: str | None,
    by: Literal["step", "tokens"] = "step",
    tolerance: float = 0.02,
) -> Comparison:
    """Run B against run A (common records): by step (the steps both logged), or by tokens seen (B's value
    interpolated at each of A's token counts within B's range; `Comparison.steps` then holds token counts)."""
    if by == "step":
        return compare(a, b, metric=metric, tolerance=tolerance)
    metric = metric or "loss"
    sa, sb = _series(a, metric), _series(b, metric)
    if not sa or not sb:
        missing = "A" if not sa else "B"
        raise ConfigError(
            Problem(
                key="--align",
                message=f"run {missing} has no tokens seen with {metric!r} "
                "(a Megatron log needs its sequence length)",
                fix="pass --seq-length for a Megatron log without its arguments dump, or --align step",
            )
        )
    cmp = Comparison(metric, tolerance=tolerance)
    for x, y in sa:
        other = _interpolate(sb, x)
        if other is not None:
            cmp.steps.append(int(x))
            cmp.a.append(y)
            cmp.b.append(other)
    cmp.only_in_a = len(sa) - len(cmp.steps)
    cmp.only_in_b = sum(1 for x, _ in sb if x < sa[0][0] or x > sa[-1][0])
    return cmp
