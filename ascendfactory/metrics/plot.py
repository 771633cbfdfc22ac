"""Loss / reward curves as PNG (matplotlib's Agg canvas; no global backend is switched).

`plot_loss(runs, out_png)` is what `train` calls to write `training_loss.png`:

- `runs`: a log path, a list of paths, one iterable of `Record`s, or a list of such iterables;
- each run is folded into a `StepTable` (resumed segments join into one curve, later step wins);
- each chart shows the raw values (thin, translucent) and a TensorBoard-style debiased EMA
  (`smoothing` in [0, 1); 0 draws the raw curve only);
- `metric=None` picks the loss, and a panel under it for each mixture-of-experts auxiliary loss the run
  logs (Megatron's `load_balancing_loss`, `z_loss`, ...); for RL runs (a score/reward is logged) it draws two
  panels, the score and `response_length/mean`, like the VeRL `training_loss.png`;
- a run's validation records (kind ``eval``) of a panel's metric are drawn on that panel beside it, as
  markers joined by a dashed line: Megatron's `lm loss value` for `lm loss`, LLaMA-Factory's
  `eval_loss` for `loss` (`validation_key`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union, cast

from ascendfactory.errors import MissingDependencyError
from ascendfactory.metrics.convergence import AUX_LOSS_KEYS, LOSS_KEYS, SCORE_KEYS, loss_keys, pick_metric
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.table import StepTable

RunLike = Union[str, Path, Iterable[Record], StepTable]
LENGTH_KEYS = ("response_length/mean", "tokens/response_length/mean")


def ema(values: Sequence[float], smoothing: float) -> list[float]:
    """TensorBoard's debiased exponential moving average; non-finite values keep the last value."""
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    out: list[float] = []
    last, n = 0.0, 0
    for v in values:
        if not math.isfinite(v):
            out.append(out[-1] if out else v)
            continue
        last = last * smoothing + (1 - smoothing) * v
        n += 1
        out.append(last / (1 - smoothing**n) if smoothing else last)
    return out


SMOOTHING_SPAN = 20  # the EMA's time constant stays under 1/20 of the points: no lag on short runs


def smoothing_for(points: int, smoothing: float) -> float:
    """`smoothing` scaled to the number of points: the EMA's time constant 1 / (1 - s) is kept below
    points / SMOOTHING_SPAN, so 15 points are not smoothed at all and 200 get the full `smoothing`."""
    if points <= SMOOTHING_SPAN:
        return 0.0
    return min(smoothing, 1 - SMOOTHING_SPAN / points)


def is_schedule(metric: str) -> bool:
    """A schedule the trainer sets (the learning rate), never smoothed."""
    name = metric.lower().replace("_", " ").replace("-", " ")
    return "learning rate" in name or name in ("lr", "actor/lr", "critic/lr") or name.endswith("/lr")


VALIDATION_KEYS = ("{} value", "eval_{}", "val/{}", "val-{}")  # Megatron, HF Trainer, VeRL styles


def validation_key(metric: str, keys: Iterable[str]) -> str | None:
    """The name a validation record gives `metric` (`lm loss` -> `lm loss value`), if any of `keys`."""
    present = set(keys)
    return next((k.format(metric) for k in VALIDATION_KEYS if k.format(metric) in present), None)


def validation_series(table: StepTable, metric: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `metric` in the table's validation records (the later of a repeated step wins)."""
    records = table.others("eval")
    key = validation_key(metric, (k for r in records for k in r.metrics))
    if key is None:
        return [], []
    pairs = [(r.step, r.metrics[key]) for r in records if key in r.metrics]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def table_for_plot(
    path: str | Path, format: str | None = None, metrics: Sequence[str] | None = None
) -> StepTable:
    """The run's steps for a plot. A Megatron log is read column-wise (`metrics.columns`: only the
    plotted fields, default the loss; numpy, two processes past 64 MB); other formats, or no numpy,
    through their parser."""
    from ascendfactory.metrics.formats import DETECT_BUFFER, detect_format, get_format, parse_file

    path = Path(path)
    fmt = (
        get_format(format).name
        if format
        else detect_format(path, max_lines=DETECT_BUFFER * 32)
        if path.is_file()
        else None
    )
    try:
        from ascendfactory.metrics.columns import iter_columns  # needs numpy
    except ImportError:
        fmt = None
    if fmt != "megatron":
        return StepTable.from_records(parse_file(path, format))
    table = StepTable()
    for piece in iter_columns(path, metrics or (*LOSS_KEYS[:2], *AUX_LOSS_KEYS)):
        # numpy columns: what add_columns reads of a sequence (len, items, tobytes) they have
        table.add_columns(cast(Sequence[int], piece.steps), cast(Mapping[str, Sequence[float]], piece.values))
        for rec in piece.others:
            table.add(rec)
    return table


PLOT_REQUIREMENT = "matplotlib>=3.7"


def _matplotlib() -> tuple[Any, Any]:
    """(Figure, FigureCanvasAgg); a missing matplotlib is a MissingDependencyError saying what to install."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise MissingDependencyError(
            f"drawing a PNG needs matplotlib, which this Python lacks ({e}): "
            f"pip install '{PLOT_REQUIREMENT}' (a core dependency of ascendfactory-cli)"
        ) from None
    return Figure, FigureCanvasAgg


def _runs(runs: RunLike | Sequence[RunLike]) -> list[tuple[str, StepTable]]:

    if isinstance(runs, (str, Path, StepTable)):
        items: list[RunLike] = [runs]
    elif isinstance(runs, (list, tuple)) and runs and not isinstance(runs[0], Record):
        items = list(runs)
    else:
        items = [cast(Iterable[Record], runs)]  # one iterable of records
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (str, Path)):
            out.append((Path(item).name, table_for_plot(item)))
        else:
            out.append((f"run {i + 1}", StepTable.from_records(item)))
    return out


def default_metrics(tables: Iterable[StepTable]) -> list[str]:
    keys: set[str] = set()
    for t in tables:
        keys.update(k for k in t.keys() if t.has(k))
    score = next((k for k in SCORE_KEYS if k in keys), None) or next(
        (k for k in sorted(keys) if k.endswith("_rewards/mean")), None
    )
    if score:
        length = next((k for k in LENGTH_KEYS if k in keys), None)
        return [score, length] if length else [score]
    loss = next((k for k in loss_keys() if k in keys), None) or pick_metric(keys)
    return [loss, *(k for k in AUX_LOSS_KEYS if k in keys)] if loss else []


NAN_COUNT_KEY = "number of nan iterations"


def nan_points(table: StepTable, metric: str) -> tuple[list[int], int]:
    """(logged steps with a NaN / inf `metric` or a non-zero Megatron nan count, iterations counted)."""
    steps, values = table.series(metric)
    marked = {s for s, v in zip(steps, values) if not math.isfinite(v)}
    counts = dict(zip(*table.series(NAN_COUNT_KEY)))
    marked |= {s for s, n in counts.items() if math.isfinite(n) and n > 0}
    counted = int(sum(n for n in counts.values() if math.isfinite(n))) if counts else len(marked)
    return sorted(marked), counted


def mark_nan(ax, table: StepTable, metric: str) -> None:
    """Red crosses along the bottom of the panel at the steps whose interval had NaN iterations (a NaN
    has no height on the curve, which would otherwise bridge the gap and look healthy)."""
    marked, counted = nan_points(table, metric)
    if not marked:
        return
    ax.scatter(marked, [0.03] * len(marked), transform=ax.get_xaxis_transform(), marker="x", color="red",
               s=30, zorder=5, label=f"NaN {metric} ({counted} iterations)")  # fmt: skip
    ax.update_datalim([(x, 0.0) for x in marked], updatey=False)  # a NaN-only first step is on the axis


def plot_loss(
    runs: RunLike | Sequence[RunLike],
    out_png: str | Path,
    *,
    metric: str | Sequence[str] | None = None,
    smoothing: float = 0.6,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = 100,
    resumed_at: Sequence[int] = (),
) -> Path:
    """Write a PNG with one panel per metric, every run on each panel; returns the path. Each run is drawn
    raw and, past a few dozen points, smoothed (`smoothing_for`; a schedule such as the learning rate never);
    `resumed_at`: the first steps of resumed segments, marked with a dotted line."""
    Figure, FigureCanvasAgg = _matplotlib()  # noqa: N806 - the classes, named as matplotlib names them
    from matplotlib.ticker import MaxNLocator

    tables = _runs(runs)
    names = list(labels) if labels else [n for n, _ in tables]
    metrics = [metric] if isinstance(metric, str) else list(metric or default_metrics(t for _, t in tables))
    if not metrics:
        raise ValueError("no loss or reward metric found to plot; pass metric=")
    fig = Figure(figsize=(8, 3.6 * len(metrics)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    colours = [f"C{i}" for i in range(10)]
    for ax, name in zip(axes, metrics):
        drawn = False
        for i, (label, table) in enumerate(tables):
            steps, values = table.series(name)
            if not steps:
                continue
            colour = colours[i % len(colours)]
            run = names[i] if i < len(names) else label
            factor = 0.0 if is_schedule(name) else smoothing_for(len(steps), smoothing)
            if not any(math.isfinite(v) for v in values):
                pass  # nothing to draw but the NaN marks (a line of NaN would only add a legend entry)
            elif factor > 0:
                ax.plot(steps, values, color=colour, alpha=0.3, linewidth=1, label=f"{run} (raw)")
                ax.plot(steps, ema(values, factor), color=colour, linewidth=1.8,
                        label=f"{run} (smoothed, EMA {factor:.2f})")  # fmt: skip
            else:  # a single point gets a marker: a line of one point is invisible
                ax.plot(steps, values, color=colour, linewidth=1.5, label=run,
                        marker="o" if len(steps) == 1 else None)  # fmt: skip
            drawn = drawn or any(math.isfinite(v) for v in values)
            mark_nan(ax, table, name)
            vsteps, vvalues = validation_series(table, name)
            if any(math.isfinite(v) for v in vvalues):
                ax.plot(vsteps, vvalues, color=colour, linestyle="--", marker="o", markersize=4,
                        linewidth=1.2, label=f"{run} (validation)")  # fmt: skip
        for k, step in enumerate(resumed_at):
            ax.axvline(step, color="grey", linestyle=":", linewidth=1.2, label="resumed" if k == 0 else None)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # iterations are whole numbers
        ax.set_xlabel("step")
        ax.set_ylabel(name)
        ax.set_title(name if not title else f"{title}: {name}", loc="left")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize="small")
        if not drawn:
            logged = any(t.series(name)[0] for _, t in tables)
            what = f"no finite '{name}': every logged value is NaN / inf" if logged else f"no '{name}' logged"
            ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center")
            ax.set_yticks([])  # no value has a height: an axis around 0 would suggest one
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    return out


def plot_comparison(
    steps: Sequence[int],
    a: Sequence[float],
    b: Sequence[float],
    out_png: str | Path,
    *,
    metric: str,
    labels: tuple[str, str] = ("A", "B"),
    tolerance: float = 0.02,
    x_label: str = "step",
) -> Path:
    """Two curves on top, their relative difference below with the +-tolerance band. The runs are named in
    the legend as A and B (a file name can be long: an axis label holding it would run off the figure);
    few points get markers (one point draws no line)."""
    Figure, FigureCanvasAgg = _matplotlib()  # noqa: N806 - the classes, named as matplotlib names them

    fig = Figure(figsize=(8, 6), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    marker = "o" if len(steps) <= 40 else None
    top.plot(steps, a, label=f"A: {labels[0]}", linewidth=1.4, marker=marker, markersize=4)
    top.plot(steps, b, label=f"B: {labels[1]}", linewidth=1.4, marker=marker, markersize=4)
    top.set_ylabel(metric)
    top.legend(loc="best", fontsize="small")
    top.grid(True, alpha=0.3)
    rel = [(x - y) / abs(x) * 100 if x else 0.0 for x, y in zip(a, b)]
    bottom.plot(steps, rel, color="C3", linewidth=1.2, marker=marker, markersize=4)
    for y in (tolerance * 100, -tolerance * 100):
        bottom.axhline(y, color="grey", linestyle="--", linewidth=1)
    from matplotlib.ticker import MaxNLocator

    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_ylabel("(A - B) / A (%)")
    bottom.set_xlabel(x_label)
    bottom.grid(True, alpha=0.3)
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out
