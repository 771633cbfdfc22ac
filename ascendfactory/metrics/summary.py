"""`summarize`: per-metric count/min/max/mean over a step range, throughput, convergence verdict.

    from ascendfactory.metrics import parse_file, summarize
    s = summarize(parse_file("run_log.txt"), seq_length=4096, devices=8)
    s.stats["lm loss"].mean, s.throughput[0].value, s.convergence.verdict

Records are folded into a `StepTable` as they stream in (resumed segments joined, later wins), so
the input may be a generator over a multi-GB log.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from ascendfactory.metrics import throughput as tp
from ascendfactory.metrics.convergence import Convergence, check_convergence
from ascendfactory.metrics.megatron import ELAPSED_MS
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.table import StepTable


@dataclass
class MetricStats:
    name: str
    count: int
    min: float | None
    max: float | None
    mean: float | None
    first: float | None
    last: float | None
    non_finite: int = 0

    @classmethod
    def of(cls, name: str, values: list[float]) -> MetricStats:
        vals = [v for v in values if math.isfinite(v)]
        if not vals:
            return cls(name, 0, None, None, None, None, None, len(values))
        return cls(
            name,
            len(vals),
            min(vals),
            max(vals),
            sum(vals) / len(vals),
            vals[0],
            vals[-1],
            len(values) - len(vals),
        )


@dataclass
class Summary:
    format: str | None
    steps: list[int]  # [first, last] logged training step in range
    num_steps: int
    total_steps: int | None
    stats: dict[str, MetricStats]
    eval_stats: dict[str, MetricStats]
    throughput: list[tp.Throughput]
    convergence: Convergence
    checkpoints: list[int] = field(default_factory=list)
    memory: dict[str, float] = field(default_factory=dict)  # the last memory report's fields
    # Megatron's memory reports by rank (`memory_by_rank`): {rank: {"step", "allocated_mb", ...}}
    memory_by_rank: dict[int, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "format": self.format,
            "steps": self.steps,
            "num_steps": self.num_steps,
            "total_steps": self.total_steps,
            "metrics": {k: asdict(v) for k, v in self.stats.items()},
            "eval_metrics": {k: asdict(v) for k, v in self.eval_stats.items()},
            "throughput": [t.to_dict() for t in self.throughput],
            "convergence": self.convergence.to_dict(),
            "checkpoints": self.checkpoints,
            "memory": self.memory,
            "memory_by_rank": {str(k): v for k, v in self.memory_by_rank.items()},
        }


def memory_by_rank(records: Iterable[Record]) -> dict[int, dict[str, float]]:
    """Each rank's memory report (`[Rank R] (after N iterations) memory (MB) | ...`), by rank: the step it
    was printed at and its MB fields (`allocated_mb`, `max_allocated_mb`, `reserved_mb`, `max_reserved_mb`);
    a later report of the same rank (a resumed run) keeps the larger peaks."""
    out: dict[int, dict[str, float]] = {}
    for rec in records:
        if rec.kind != "memory" or "memory/rank" not in rec.metrics:
            continue
        rank = int(rec.metrics["memory/rank"])
        fields = {k.removeprefix("memory/"): v for k, v in rec.metrics.items() if k != "memory/rank"}
        fields["step"] = float(rec.step)
        old = out.get(rank)
        if old is not None:
            for k in ("max_allocated_mb", "max_reserved_mb"):
                if k in old and k in fields:
                    fields[k] = max(old[k], fields[k])
        out[rank] = fields
    return dict(sorted(out.items()))


def auto_throughput(
    table: StepTable,
    *,
    seq_length: int | None = None,
    devices: int | None = None,
    skip_first: int | None = None,
    flops_per_token: float | None = None,
    peak_tflops: float | None = None,
) -> list[tp.Throughput]:
    """The throughput figures that fit what the log contains."""
    keys = set(table.keys())
    if "perf/throughput" in keys:
        return [tp.throughput_verl(table, skip_first=skip_first)]
    if keys & {"e2e_tps", "update_tps", "vllm_tps"}:
        return tp.throughput_mindspeed_rl(table, skip_first=skip_first)
    if "system/tps" in keys:
        return [tp.throughput_mean(table, "system/tps", skip_first=skip_first)]
    if ELAPSED_MS in keys:
        is_mm = "lm loss" not in keys and ("loss" in keys or "tokens per sample" in keys)
        if is_mm and not seq_length:
            return [tp.throughput_mindspeed_mm(table, devices=devices, skip_first=skip_first)]
        return [
            tp.throughput_mindspeed(
                table,
                seq_length=seq_length,
                devices=devices,
                skip_first=skip_first,
                flops_per_token=flops_per_token,
                peak_tflops=peak_tflops,
            )
        ]
    if "total_tokens" in keys or any("total_tokens" in r.metrics for r in table.others("progress")):
        return [tp.throughput_llamafactory(table, devices=devices, skip_first=skip_first)]
    return []


def summarize(
    records: Iterable[Record] | StepTable,
    *,
    format: str | None = None,
    steps: tuple[int | None, int | None] | None = None,
    seq_length: int | None = None,
    devices: int | None = None,
    skip_first: int | None = None,
    metric: str | None = None,
    flops_per_token: float | None = None,
    peak_tflops: float | None = None,
) -> Summary:
    table = StepTable.from_records(records, steps=steps)
    stats = {k: MetricStats.of(k, table.series(k)[1]) for k in table.keys()}
    evals: dict[str, list[float]] = {}
    for rec in table.others("eval"):
        for k, v in rec.metrics.items():
            evals.setdefault(k, []).append(v)
    memory = table.others("memory")
    return Summary(
        format=format,
        steps=[table.steps[0], table.steps[-1]] if len(table) else [],
        num_steps=len(table),
        total_steps=table.total_steps,
        stats=stats,
        eval_stats={k: MetricStats.of(k, v) for k, v in evals.items()},
        throughput=auto_throughput(
            table,
            seq_length=seq_length,
            devices=devices,
            skip_first=skip_first,
            flops_per_token=flops_per_token,
            peak_tflops=peak_tflops,
        ),
        convergence=check_convergence(table, metric=metric),
        checkpoints=[r.step for r in table.others("checkpoint")],
        memory=dict(memory[-1].metrics) if memory else {},
        memory_by_rank=memory_by_rank(table.all_others("memory")),
    )


def parse_steps(text: str | None) -> tuple[int | None, int | None] | None:
    """`A:B`, `A:`, `:B` or `N` -> (lo, hi) inclusive; None for no range. Raises ValueError."""
    if not text:
        return None
    lo, sep, hi = text.partition(":")
    if not sep:
        return int(lo), int(lo)
    return (int(lo) if lo.strip() else None, int(hi) if hi.strip() else None)
