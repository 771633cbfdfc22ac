"""What a run leaves behind besides checkpoints: the plan's files, `training_loss.png`, the summary.

- `write_file`: a file the plan asks for (the resolved `exp-config.yaml`, a framework's generated config),
  written atomically and never over the experiment file being run.
- `loss_logs`: the loss rank's run logs of this run, preceded by the earlier runs it resumed from, so
  resumed segments join into one curve (later step wins, `ascendfactory.metrics.StepTable`); or the
  framework's own metrics file when the plan names one.
- `plot`: `training_loss.png`, one panel per `LogSpec.plot_metrics` the log has (else the loss);
- `summarize` / `render_summary`: loss at start and end, the plan's `summary_metrics` (first, last, mean,
  min, max), throughput by the plan's formula over a steady-state window that skips the first
  iterations, wall time per step, and where everything was written; also saved as
  `{af_output_dir}/.af/summary.json`.
"""

from __future__ import annotations

import glob
import itertools
import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ascendfactory.metrics import Record, StepTable, parse_file, plot_loss
from ascendfactory.metrics.plot import nan_points
from ascendfactory.metrics.throughput import get_formula
from ascendfactory.pipeline import procgroup
from ascendfactory.pipeline.launch import LogNames
from ascendfactory.plan import LogSpec
from ascendfactory.secrets import mask_text
from ascendfactory.speed.report import versus_measured


def write_file(path: str, text: str, *, source: str | None = None) -> str | None:
    """Write `text` to `path` atomically (mode 0600 when it holds a secret value); never overwrite the
    experiment file being run (None then). A file that already holds `text` is left as it is: its time
    stays, so the manifest of a step that reads it (a LoRA merge's yaml) still matches on a re-run."""
    if source and os.path.exists(source) and os.path.exists(path) and os.path.samefile(source, path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return path
    except (OSError, UnicodeDecodeError):
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    private = mask_text(text)[1]  # a framework config holding a credential: readable by its owner only
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def _train_records(path: str, fmt: str, kinds: tuple[str, ...] = ("train",)) -> list[Record]:
    try:
        return [r for r in parse_file(path, fmt) if r.kind in kinds]
    except OSError:
        return []


def has_training_steps(path: str, logs: LogSpec) -> bool:
    """Whether the log at `path` exists and holds a training step."""
    return os.path.exists(path) and next(iter(_train_records(path, logs.format)), None) is not None


def loss_logs(names: LogNames, logs: LogSpec, *, rank: int, nnodes: int, world_size: int) -> list[str]:
    """The loss rank's log of this run, preceded by the earlier runs' logs it continues.

    Walking back from this run, an earlier log is included while it starts before the part already
    included (it is a segment this run resumed from); a log starting at or after it ends the walk. A
    run that logged no loss (it resumed a finished run, or was interrupted before training) starts the
    walk from the newest earlier run that did: a re-run completes the plot and summary.
    With `logs.metrics_file` (a file the framework appends across resumes) that file alone.
    """
    if logs.metrics_file:
        return [logs.metrics_file] if os.path.exists(logs.metrics_file) else []
    current = names.run_log(nnodes, rank, world_size=world_size)
    pattern = names.run_log_pattern(nnodes, rank, world_size=world_size)
    earlier = sorted(p for p in glob.glob(pattern) if os.path.basename(p) < os.path.basename(current))
    chain = [current] if os.path.exists(current) else []
    first = min((r.step for r in _train_records(current, logs.format)), default=None) if chain else None
    walk = reversed(earlier)
    if first is None:  # this run logged no loss (it resumed a finished run): the newest run that did
        for path in walk:
            steps = [r.step for r in _train_records(path, logs.format)]
            if steps:
                chain, first = [path], min(steps)
                break
    for path in walk:
        steps = [r.step for r in _train_records(path, logs.format)]
        if first is None or not steps or min(steps) >= first:
            break
        chain.insert(0, path)
        first = min(steps)
    return chain


def chained_records(paths: Iterable[str], fmt: str, kinds: tuple[str, ...] = ("train",)) -> list[Record]:
    return list(itertools.chain.from_iterable(_train_records(p, fmt, kinds) for p in paths))


PLOT_MODULES = ("matplotlib.backends.backend_agg", "matplotlib.figure")


def prewarm_plot(modules: tuple[str, ...] = PLOT_MODULES) -> None:
    """Import the plotting modules in a background thread (about 0.4 s that would follow training); call
    it once the train step has started, since a step started meanwhile waits for the import to finish."""
    procgroup.import_in_background(modules, name="af-prewarm-plot")


def plot(paths: list[str], out_png: str, logs: LogSpec, *, label: str | None = None) -> str | None:
    """`training_loss.png` from the joined segments: the plan's `plot_metrics` the log has, else its loss,
    with the validation loss beside it where the run logged one; None when it logged neither. `label`:
    the legend's name of the run (the experiment); a resumed segment's first step is marked."""
    segments = [_train_records(p, logs.format, ("train", "eval")) for p in paths]
    records = list(itertools.chain.from_iterable(segments))
    starts = [
        min(r.step for r in seg if r.kind == "train")
        for seg in segments
        if any(r.kind == "train" for r in seg)
    ]
    logged = {k for r in records if r.kind == "train" for k in r.metrics}
    panels = [k for k in logs.plot_metrics if k in logged]
    if not panels:
        panels = [k for k in logs.loss_keys if k in logged][:1]
    if not panels:
        return None
    return str(
        plot_loss(records, out_png, metric=panels, labels=[label] if label else None, resumed_at=starts[1:])
    )


@dataclass
class StepResult:
    name: str
    state: str  # done | skipped | failed | interrupted | waited
    wall_s: float = 0.0
    detail: str = ""
    logs: list[str] = field(default_factory=list)


@dataclass
class RunSummary:
    output_dir: str
    steps: list[StepResult]
    wall_s: float
    loss_start: float | None = None
    loss_end: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    throughput: dict[str, Any] | None = None
    # iterations with a NaN / inf loss: Megatron's `number of nan iterations` summed (else the NaN points),
    # and the logged steps that show one
    nan_iterations: int = 0
    nan_steps: list[int] = field(default_factory=list)
    peak_memory_mb: float | None = None  # the largest `max allocated` in the log (Megatron's memory line)
    # `LogSpec.summary_metrics` the log has: first/last value and step, mean, min, max, count
    metrics: dict[str, dict[str, float | int]] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)
    # Megatron's memory report of each rank on this node: {rank: {"step", "max_allocated_mb", ...}}
    memory: dict[int, dict[str, float]] = field(default_factory=dict)
    # the plan's time estimate (`Plan.timing`: predicted step time by part, tokens/s, the workload), kept so
    # that `performance` sets it against what the run measured
    predicted: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(summary: RunSummary, paths: list[str], logs: LogSpec) -> RunSummary:
    """Fill in loss and throughput from the loss rank's logs (joined segments); progress records too, as
    `logs summary` reads them (LLaMA-Factory's final record carries the last total_tokens)."""
    table = StepTable.from_records(chained_records(paths, logs.format, ("train", "progress")))
    key = next((k for k in logs.loss_keys if table.has(k)), None)
    if key:
        steps, values = table.series(key)
        if steps:
            summary.first_step, summary.last_step = steps[0], steps[-1]
            summary.loss_start, summary.loss_end = values[0], values[-1]
        summary.nan_steps, summary.nan_iterations = nan_points(table, key)
    peaks = [
        v
        for r in chained_records(paths, logs.format, ("memory",))
        if (v := r.metrics.get("memory/max_allocated_mb")) is not None
    ]
    summary.peak_memory_mb = max(peaks) if peaks else None
    for name in logs.summary_metrics:
        steps, values = table.series(name)
        finite = [v for v in values if math.isfinite(v)]
        if steps and finite:
            summary.metrics[name] = {
                "first_step": steps[0],
                "first": values[0],
                "last_step": steps[-1],
                "last": values[-1],
                "mean": sum(finite) / len(finite),
                "min": min(finite),
                "max": max(finite),
                "count": len(values),
            }
    spec = logs.throughput
    formula = get_formula(spec.formula)
    seq = spec.seq_length
    if seq is None:
        seq = next((s for p in paths if (s := formula.seq_from_log(p))), None)
    if table.steps:
        summary.throughput = formula.summary(table, seq_length=seq, devices=spec.devices).to_dict()
    return summary


# A train step in which more than this share of the iterations had a NaN / inf loss failed, whatever the
# framework's NaN checks were set to (docs/running.md, "Running a job"): it updated (almost) nothing.
NAN_SHARE_LIMIT = 0.5


def untrained(paths: list[str], logs: LogSpec) -> str | None:
    """Why the training in these logs (the loss rank's, joined segments) trained nothing (None: it trained):
    no logged loss is finite, or more than `NAN_SHARE_LIMIT` of the iterations up to the last logged step
    had a NaN / inf loss (Megatron's `number of nan iterations` summed, else the logged NaN steps)."""
    table = StepTable.from_records(chained_records(paths, logs.format))
    key = next((k for k in logs.loss_keys if table.has(k)), None)
    if key is None:
        return None
    steps, values = table.series(key)
    if not steps:
        return None
    nan_steps, nan_count = nan_points(table, key)
    total = max(steps[-1], nan_count, 1)
    finite = sum(1 for v in values if math.isfinite(v))
    if finite and nan_count <= NAN_SHARE_LIMIT * total:
        return None
    first = f", the first logged at step {nan_steps[0]}" if nan_steps else ""
    what = (
        f"no logged {key} is finite"
        if not finite
        else f"more than {NAN_SHARE_LIMIT:.0%} of the iterations had a NaN / inf {key}"
    )
    return (
        f"{what}: {nan_count} of {total} iteration(s) NaN{first}; they updated nothing, so the weights "
        "are (nearly) the ones it started from"
    )


def memory_by_rank(paths: list[str], logs: LogSpec) -> dict[int, dict[str, float]]:
    """The memory reports (`[Rank R] (after N iterations) memory (MB) | ...`) in these logs, by rank."""
    from ascendfactory.metrics.summary import memory_by_rank as by_rank

    return by_rank(chained_records(paths, logs.format, ("memory",)))


def save_summary(summary: RunSummary, path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary.to_dict(), f, indent=2, default=str)
    return path


def render_summary(summary: RunSummary, out: Any) -> None:
    """Print the summary through the CLI's output object (`out.table`, `out.text`)."""
    rows = [
        {"step": s.name, "state": s.state, "wall time (s)": f"{s.wall_s:.1f}", "detail": s.detail}
        for s in summary.steps
    ]
    out.table(rows, title=f"run summary ({summary.wall_s:.1f}s)")
    if summary.loss_start is not None:
        out.text(
            f"loss: {summary.loss_start:.4f} at step {summary.first_step} -> {summary.loss_end:.4f} "
            f"at step {summary.last_step}"
        )
    if summary.nan_iterations:
        first = f", first logged at step {summary.nan_steps[0]}" if summary.nan_steps else ""
        out.text(
            f"WARNING: NaN loss in {summary.nan_iterations} iteration(s){first}: they updated nothing "
            "(marked in training_loss.png)"
        )
    for name, m in summary.metrics.items():
        out.text(
            f"{name}: {m['first']:.4g} at step {m['first_step']} -> {m['last']:.4g} at step "
            f"{m['last_step']} (mean {m['mean']:.4g}, min {m['min']:.4g}, max {m['max']:.4g})"
        )
    tp = summary.throughput
    if tp and tp.get("value") is not None:
        window = tp.get("window") or ["?", "?"]
        out.text(
            f"throughput: {tp['value']:,.1f} {tp['unit']} (steps {window[0]}-{window[1]}, first "
            f"{len(tp.get('steps_skipped') or [])} skipped; {tp['formula']})"
        )
    elif tp and "seq_length" in (tp.get("note") or ""):
        out.text("throughput: seq_length unknown (not in the plan's facts nor in the log's arguments)")
    elif tp and tp.get("note"):
        out.text(f"throughput: {tp['note']}")
    if summary.memory:
        out.text(
            "peak memory (MB, max allocated | max reserved): "
            + "; ".join(
                f"rank {rank}: {m['max_allocated_mb']:.1f} | {m['max_reserved_mb']:.1f}"
                for rank, m in summary.memory.items()
                if "max_allocated_mb" in m and "max_reserved_mb" in m
            )
        )
    if summary.predicted and tp:
        ms = (tp.get("details") or {}).get("mean_elapsed_ms")
        line = versus_measured(summary.predicted, ms / 1000 if ms else None)
        if line:
            out.text(line)
    for what, where in summary.written.items():
        out.text(f"{what}: {where}")
