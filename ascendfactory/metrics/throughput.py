"""Throughput per framework, over a steady-state window of logged steps.

The window skips warm-up: by default the first 10% of logged training steps (at least 1, at most
20; a single logged step is used as is). `skip_first=` overrides the count, `steps=(lo, hi)` on the
table picks an explicit range; every result lists the steps it used and the ones it skipped.

- MindSpeed-LLM / Megatron: tokens/s/p = GBS x seq_length / (devices x elapsed ms) x 1000, GBS from
  the log, seq_length and devices from the caller (legacy `actual seqlen` is used when logged; with
  no seq_length, FSDP2's `consumed tokens` deltas give the real token count).
- MindSpeed-MM: samples/s = GBS / elapsed ms x 1000; tokens/s = samples/s x mean(`tokens per sample`), over
  its scripts' window (iterations 51-150 of a long run).
- LLaMA-Factory: delta total_tokens / delta elapsed_time / devices over a middle window.
- VeRL: mean `perf/throughput` (already tokens/s per device). ROLL: mean `system/tps`.
- MindSpeed-RL: mean `e2e_tps`, `update_tps`, `vllm_tps` (already per device).
Each formula is a `Formula` in an open registry (`register_formula`, `get_formula`): its run-summary figure,
its live tokens/s for the progress line, its step time and where it finds seq_length in a log.
TFLOP/s/device is the logged figure (`throughput per GPU (TFLOP/s/GPU)`, `TFLOPs`) or
tokens/s/p x `flops_per_token`; MFU = TFLOP/s / the device's peak (`hardware.PEAKS`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ascendfactory.metrics.megatron import ELAPSED_MS, GBS, seq_length_from_line
from ascendfactory.metrics.mindspeed_rl import TPS_KEYS
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.table import StepTable
from ascendfactory.registry import Registry

TFLOPS_KEYS = ("throughput per GPU (TFLOP/s/GPU)", "TFLOPs")


@dataclass
class Throughput:
    metric: str
    value: float | None
    unit: str
    formula: str
    steps_used: list[int] = field(default_factory=list)
    steps_skipped: list[int] = field(default_factory=list)
    details: dict[str, float | None] = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        used = self.steps_used
        return {
            "metric": self.metric,
            "value": self.value,
            "unit": self.unit,
            "formula": self.formula,
            "window": [used[0], used[-1]] if used else None,
            "steps_used": len(used),
            "steps_skipped": self.steps_skipped,
            "details": self.details,
            "note": self.note or None,
        }


def default_skip(n: int) -> int:
    return 0 if n <= 1 else min(20, max(1, n // 10))


def _window(table: StepTable, key: str, skip_first: int | None) -> tuple[list[int], list[float], list[int]]:
    steps, values = table.series(key)
    pairs = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
    k = default_skip(len(pairs)) if skip_first is None else max(0, min(skip_first, len(pairs) - 1))
    used = pairs[k:]
    return [s for s, _ in used], [v for _, v in used], [s for s, _ in pairs[:k]]


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


def _at(table: StepTable, key: str, steps: list[int]) -> list[float]:
    wanted = set(steps)
    s, v = table.series(key)
    return [val for st, val in zip(s, v) if st in wanted]


def _flops(
    tp: Throughput,
    table: StepTable,
    tokens_per_device: float | None,
    *,
    flops_per_token: float | None,
    peak_tflops: float | None,
) -> None:
    tflops = None
    for key in TFLOPS_KEYS:
        logged = _mean(_at(table, key, tp.steps_used))
        if logged is not None:
            tflops = logged
            break
    if tflops is None and flops_per_token and tokens_per_device:
        tflops = tokens_per_device * flops_per_token / 1e12
    tp.details["tflops_per_device"] = tflops
    tp.details["mfu"] = tflops / peak_tflops if tflops is not None and peak_tflops else None


def throughput_mindspeed(
    records: Iterable[Record] | StepTable,
    *,
    seq_length: int | None,
    devices: int | None,
    skip_first: int | None = None,
    flops_per_token: float | None = None,
    peak_tflops: float | None = None,
) -> Throughput:
    """MindSpeed-LLM tokens/s/p = GBS x seq_length / (devices x elapsed ms) x 1000."""
    table = StepTable.from_records(records)
    steps, elapsed, skipped = _window(table, ELAPSED_MS, skip_first)
    tp = Throughput(
        "tokens/s/p",
        None,
        "tokens/s/device",
        "GBS x seq_length / (devices x elapsed_ms) x 1000",
        steps,
        skipped,
    )
    if not steps:
        tp.note = f"no '{ELAPSED_MS}' in the log"
        return tp
    gbs = _at(table, GBS, steps)
    seqlen = seq_length or _mean(_at(table, "actual seqlen", steps))
    tp.details.update(
        mean_elapsed_ms=sum(elapsed) / len(elapsed),
        global_batch_size=_mean(gbs),
        seq_length=seqlen,
        devices=devices,
    )
    total_ms = sum(elapsed)
    if seqlen and len(gbs) == len(elapsed):
        tokens = sum(g * seqlen for g in gbs)
    elif table.has("consumed tokens"):
        ct = _at(table, "consumed tokens", steps)
        prev = _at(table, "consumed tokens", [s for s in table.steps if s < steps[0]][-1:]) or [0.0]
        tokens = ct[-1] - prev[-1] if len(ct) == len(steps) else 0.0
        tp.formula = "delta consumed tokens / (devices x sum elapsed_ms) x 1000"
    else:
        tp.note = "seq_length unknown: pass --seq-length (and --devices)"
        tokens = 0.0
    samples = sum(gbs)
    tp.details["samples_per_s"] = samples / total_ms * 1000 if gbs else None
    if not tokens:
        return tp
    per_s = tokens / total_ms * 1000
    tp.details["tokens_per_s"] = per_s
    if not devices:
        tp.note = "device count unknown: pass --devices; value is for the whole job"
        tp.value, tp.unit = per_s, "tokens/s (job)"
        return tp
    tp.value = per_s / devices
    _flops(tp, table, tp.value, flops_per_token=flops_per_token, peak_tflops=peak_tflops)
    return tp


# MindSpeed-MM's example scripts average `grep 'elapsed time per iteration' | head -n 150 | tail -n 100`.
MM_SCRIPT_HEAD, MM_SCRIPT_TAIL = 150, 100


def throughput_mindspeed_mm(
    records: Iterable[Record] | StepTable, *, devices: int | None = None, skip_first: int | None = None
) -> Throughput:
    """MindSpeed-MM samples/s = GBS / elapsed ms x 1000 (and tokens/s = samples/s x mean `tokens per sample`
    when it is logged, `--log-tps`), as its example scripts compute them after a run: over the first 150
    logged iterations, the last 100 of them (lines 51-150 of a long run). Logs of 100 iterations or fewer,
    which that window would average whole, warm-up included, skip the default warm-up instead (noted);
    `skip_first` overrides both."""
    table = StepTable.from_records(records)
    steps, elapsed, skipped = _window(table, ELAPSED_MS, 0 if skip_first is None else skip_first)
    note = ""
    if skip_first is None:
        if len(steps) > MM_SCRIPT_TAIL:
            head = min(len(steps), MM_SCRIPT_HEAD)
            lo = head - MM_SCRIPT_TAIL
            skipped, steps, elapsed = steps[:lo], steps[lo:head], elapsed[lo:head]
        else:
            k = default_skip(len(steps))
            skipped, steps, elapsed = steps[:k], steps[k:], elapsed[k:]
            note = (
                f"{len(steps) + k} iterations logged: MindSpeed-MM's window (iterations 51-150) needs more "
                f"than {MM_SCRIPT_TAIL}; the first {k} skipped as warm-up"
            )
    tp = Throughput("samples/s", None, "samples/s", "GBS / elapsed_ms x 1000", steps, skipped, note=note)
    gbs = _at(table, GBS, steps)
    if not steps or len(gbs) != len(elapsed):
        tp.note = f"needs '{ELAPSED_MS}' and '{GBS}' in the log"
        return tp
    tp.value = sum(gbs) / sum(elapsed) * 1000
    tps = _mean(_at(table, "tokens per sample", steps))
    tp.details.update(
        mean_elapsed_ms=sum(elapsed) / len(elapsed),
        global_batch_size=_mean(gbs),
        tokens_per_sample=tps,
        tokens_per_s=tp.value * tps if tps else None,
        samples_per_s_per_device=tp.value / devices if devices else None,
    )
    return tp


def throughput_llamafactory(
    records: Iterable[Record] | StepTable, *, devices: int | None, skip_first: int | None = None
) -> Throughput:
    """delta total_tokens / delta elapsed_time / devices over the middle of the last segment."""
    table = StepTable.from_records(records)
    tp = Throughput("tokens/s/p", None, "tokens/s/device", "delta total_tokens / delta elapsed_s / devices")
    points = [
        (s, w, t)
        for s, w, t in zip(table.steps, table.wall, table.column("total_tokens"))
        if math.isfinite(t) and math.isfinite(w)
    ]
    points += [
        (r.step, r.wall_time, r.metrics["total_tokens"])
        for r in table.others("progress")
        if "total_tokens" in r.metrics and r.wall_time is not None
    ]
    points.sort()
    starts = [i for i in range(1, len(points)) if points[i][1] < points[i - 1][1]]
    if starts:  # resumed: the elapsed timer restarted; use the last segment only
        points = points[starts[-1] :]
    if not points:
        tp.note = "no total_tokens in trainer_log.jsonl (set include_num_input_tokens_seen: true)"
        return tp
    k = default_skip(len(points)) if skip_first is None else max(0, min(skip_first, len(points) - 1))
    tail = k if len(points) - 2 * k >= 2 else 0
    window = points[k : len(points) - tail] if len(points) > 2 else points
    tp.steps_used, tp.steps_skipped = [p[0] for p in window], [p[0] for p in points if p not in window]
    if len(window) >= 2 and window[-1][1] > window[0][1]:
        d_tok, d_t = window[-1][2] - window[0][2], window[-1][1] - window[0][1]
    elif starts or window[-1][0] <= 1:  # one step since a resume (total_tokens counts from the start)
        tp.note = (
            f"only step {window[-1][0]} logged since the start or resume: too few steps for a throughput"
        )
        return tp
    else:  # one record (the final one) of an unbroken run: the whole run so far
        d_tok, d_t = window[-1][2], window[-1][1]
        tp.formula = "total_tokens / elapsed_s / devices (whole run)"
    if d_t <= 0:
        tp.note = "elapsed_time does not advance"
        return tp
    tp.details.update(
        tokens_per_s=d_tok / d_t,
        devices=devices,
        logged_throughput=_mean(_at(table, "throughput", tp.steps_used)),
    )
    tp.value = d_tok / d_t / devices if devices else d_tok / d_t
    if not devices:
        tp.unit, tp.note = "tokens/s (job)", "device count unknown: pass --devices"
    return tp


def throughput_mean(
    records: Iterable[Record] | StepTable,
    key: str,
    *,
    unit: str = "tokens/s/device",
    skip_first: int | None = None,
) -> Throughput:
    """Mean of a per-step throughput the framework logs itself (VeRL perf/throughput, RL *_tps)."""
    table = StepTable.from_records(records)
    steps, values, skipped = _window(table, key, skip_first)
    tp = Throughput(key, _mean(values), unit, f"mean({key})", steps, skipped)
    if not steps:
        tp.note = f"no '{key}' in the log"
    return tp


def throughput_verl(records: Iterable[Record] | StepTable, *, skip_first: int | None = None) -> Throughput:
    return throughput_mean(records, "perf/throughput", skip_first=skip_first)


def throughput_mindspeed_rl(
    records: Iterable[Record] | StepTable, *, skip_first: int | None = None
) -> list[Throughput]:
    table = StepTable.from_records(records)
    return [throughput_mean(table, k, skip_first=skip_first) for k in TPS_KEYS if table.has(k)]


@dataclass(frozen=True)
class LiveInputs:
    """What the live progress line knows while training runs: the newest value of each metric the loss
    rank logged, the mean step time over the last iterations, and the plan's seq_length and devices."""

    latest: Mapping[str, float]
    mean_step_ms: float | None
    seq_length: int | None
    devices: int | None


def _no_live(_: LiveInputs) -> float | None:
    return None


def _no_step_time(_: Mapping[str, float]) -> float | None:
    return None


@dataclass(frozen=True)
class Formula:
    """A throughput formula, named by a plan's `ThroughputSpec.formula` (`register_formula` adds one).

    `summary(table, seq_length=, devices=)`: the run summary's figure over the whole log. `live(inputs)`:
    tokens/s per device for the progress line (None where the formula needs the whole log).
    `step_ms(metrics)`: one record's step time in ms (the progress line's ETA). `seq_from_line(line)`: the
    sequence length from a log line, when the plan does not know it (Megatron's arguments dump)."""

    name: str
    summary: Callable[..., Throughput]
    live: Callable[[LiveInputs], float | None] = _no_live
    step_ms: Callable[[Mapping[str, float]], float | None] = _no_step_time
    seq_from_line: Callable[[str], int | None] | None = None

    def seq_from_log(self, path: str, *, max_lines: int = 5000) -> int | None:
        """The sequence length from the first `max_lines` lines of a log (None if unknown here)."""
        if self.seq_from_line is None:
            return None
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in itertools.islice(f, max_lines):
                    found = self.seq_from_line(line)
                    if found is not None:
                        return found
        except OSError:
            return None
        return None


FORMULAS: Registry[Formula] = Registry(
    "throughput formula",
    key="logs.throughput.formula",
    how="ascendfactory.metrics.throughput.register_formula(Formula(...))",
)


def register_formula(formula: Formula) -> Formula:
    """Add a throughput formula (a backend's module calls this at import). Its name must be new."""
    return FORMULAS.register(formula.name, formula)


def get_formula(name: str) -> Formula:
    return FORMULAS.get(name)


def throughput_for(
    formula: str, records: Iterable[Record] | StepTable, *, seq_length: int | None, devices: int | None
) -> Throughput:
    """The run summary's throughput by formula name (a plan's `ThroughputSpec.formula`)."""
    return get_formula(formula).summary(
        StepTable.from_records(records), seq_length=seq_length, devices=devices
    )


def _elapsed_ms(metrics: Mapping[str, float]) -> float | None:
    return metrics.get(ELAPSED_MS)


def _megatron_live(i: LiveInputs) -> float | None:
    gbs = i.latest.get(GBS)
    if not (gbs and i.seq_length and i.devices and i.mean_step_ms):
        return None
    return gbs * i.seq_length / (i.devices * i.mean_step_ms) * 1000


def _mindspeed_rl_summary(table: StepTable, **_: object) -> Throughput:
    found = throughput_mindspeed_rl(table)
    return found[0] if found else throughput_mean(table, "e2e_tps")


for _builtin in (
    Formula(
        "megatron",
        lambda table, *, seq_length, devices: throughput_mindspeed(
            table, seq_length=seq_length, devices=devices
        ),
        live=_megatron_live,
        step_ms=_elapsed_ms,
        seq_from_line=seq_length_from_line,
    ),
    Formula(
        "mindspeed_mm",
        lambda table, *, devices, **_: throughput_mindspeed_mm(table, devices=devices),
        step_ms=_elapsed_ms,
    ),
    Formula("llamafactory", lambda table, *, devices, **_: throughput_llamafactory(table, devices=devices)),
    Formula("verl", lambda table, **_: throughput_verl(table)),
    Formula("mindspeed_rl", _mindspeed_rl_summary),
):
    register_formula(_builtin)
