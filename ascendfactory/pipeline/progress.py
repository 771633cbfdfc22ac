"""What the user sees while `train` runs: what a person reads, never raw log fragments.

- On a terminal, a live panel: every step with its state and wall time; for the running step a progress
  bar (training: iteration / train-iters with loss, tokens/s per device and ETA, parsed from the loss
  rank's lines with the plan's parser, loss keys and throughput formula; conversion and preprocessing: the
  `i/n` their programs print, else the elapsed time).
- Otherwise (CI, a file), the runner's events and a training progress line at most every 10% of the run
  or 30 s.
- `verbose` (`train --verbose`): every output line of the steps as well (the loss rank's for training),
  as the log files have them. Without it, raw lines stay in the logs only.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.metrics.formats import make_parser
from ascendfactory.metrics.throughput import Formula, LiveInputs, get_formula
from ascendfactory.plan import LogSpec, Role, Step


@dataclass
class TrainStats:
    """The latest training progress, as parsed from the loss rank's log lines."""

    iteration: int | None = None
    total: int | None = None
    loss: float | None = None
    elapsed_ms: deque[float] = field(default_factory=lambda: deque(maxlen=10))
    latest: dict[str, float] = field(default_factory=dict)  # the newest value of each logged metric
    seq_length: int | None = None
    devices: int | None = None
    formula: Formula | None = None  # the plan's throughput formula (live tokens/s, step time, seq_length)

    def tokens_per_s_per_device(self) -> float | None:
        """The plan's throughput formula over the last iterations (None where it needs the whole log)."""
        if self.formula is None:
            return None
        ms = sum(self.elapsed_ms) / len(self.elapsed_ms) if self.elapsed_ms else None
        return self.formula.live(
            LiveInputs(
                latest=self.latest,
                mean_step_ms=ms if ms and ms > 0 else None,
                seq_length=self.seq_length,
                devices=self.devices,
            )
        )

    def eta_s(self) -> float | None:
        if self.iteration is None or not self.total or not self.elapsed_ms:
            return None
        return max(self.total - self.iteration, 0) * (sum(self.elapsed_ms) / len(self.elapsed_ms)) / 1000

    def line(self) -> str:
        if self.iteration is None:
            return "waiting for the first iteration"
        parts = [f"iteration {self.iteration}/{self.total or '?'}"]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        tps = self.tokens_per_s_per_device()
        if tps is not None:
            parts.append(f"{tps:,.0f} tokens/s/p")
        eta = self.eta_s()
        if eta is not None:
            parts.append(f"ETA {_clock(eta)}")
        return " | ".join(parts)


# A check's or preprocessing's own warning line (`WARNING: ...`, `[lf-check] WARNING: ...`): shown on the
# console too (the data-fit counts), not only in the step's log.
WARNING = re.compile(r"^\s*(\[[\w-]+\] )?WARNING: ")
SHOWN_WARNINGS = (Role.CHECK, Role.PREPROCESS)

# How a step's programs say how far they are: our converter's `stage 2/4`, tqdm's `45%|` and `12/100 [`.
FRACTIONS = (
    re.compile(r"\bstage (\d+)/(\d+)\b"),
    re.compile(r"(\d+)/(\d+) \["),
    re.compile(r"\b(\d{1,3})%\|"),
)
PLAIN_EVERY_S = 30.0  # plain mode: a training line at each new tenth of the run, or after this long


def fraction(text: str) -> float | None:
    """How far a step is, from one of its output lines (None when the line does not say)."""
    for pattern in FRACTIONS:
        m = pattern.search(text)
        if m:
            done, total = (int(m.group(1)), 100) if m.lastindex == 1 else (int(m.group(1)), int(m.group(2)))
            return min(done / total, 1.0) if total else None
    return None


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """Thread-safe: `feed` is called by the tee thread, everything else by the runner."""

    def __init__(
        self, console: Any, logs: LogSpec, *, live: bool | None = None, verbose: bool = False
    ) -> None:
        self.console = console
        self.live_mode = console.is_terminal if live is None else live
        self.verbose = verbose
        self.steps: dict[str, tuple[str, str]] = {}  # name -> (state, detail)
        self.current: Step | None = None
        self.loss_rank: int | None = None
        self.logs = logs
        tp = logs.throughput
        self.stats = TrainStats(seq_length=tp.seq_length, devices=tp.devices, formula=get_formula(tp.formula))
        self.done_fraction: float | None = None  # a non-training step's progress, when it prints one
        self._lock = threading.Lock()
        self._parser = make_parser(logs.console_format or logs.format)
        self._live: Any = None
        self._t0 = time.monotonic()
        self._printed_at = (0.0, -1)  # plain mode: (time, tenth of the run) of the last progress line

    # -- runner events --------------------------------------------------------------------------------
    def start(self, steps: list[Step]) -> None:
        for s in steps:
            self.steps[s.name] = ("pending", "")
        if self.live_mode:
            from rich.live import Live

            self._live = Live(self.panel(), console=self.console, refresh_per_second=4, transient=False)
            self._live.start()

    def step_started(self, step: Step, *, loss_rank: int | None = None, detail: str = "") -> None:
        with self._lock:
            self.current, self.loss_rank = step, loss_rank
            self._parser = make_parser(self.logs.console_format or self.logs.format)
            self.done_fraction = None
            self._t0 = time.monotonic()
            self._printed_at = (time.monotonic(), -1)
            self.steps[step.name] = ("running", detail)
        self.refresh()

    def step_done(self, step: Step, state: str, detail: str = "") -> None:
        with self._lock:
            self.steps[step.name] = (state, detail)
            if self.current is step:
                self.current = None
        self.refresh()

    def event(self, text: str) -> None:
        """A runner message: printed above the live panel, or as a plain line."""
        self.console.print(f"[ascendfactory] {text}", markup=False, highlight=False)
        self.refresh()

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self.panel())

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self.panel())
            self._live.stop()
            self._live = None

    # -- output lines (tee thread) --------------------------------------------------------------------
    def feed(self, rank: int | None, text: str) -> None:
        is_train = self.current is not None and self.current.role is Role.TRAIN
        if is_train and rank is not None and rank != self.loss_rank:
            return
        line = None
        with self._lock:
            if is_train and rank is not None:
                if self._parse(text) and not self.live_mode and not self.verbose:
                    line = self._plain_progress()
            elif not is_train:
                self.done_fraction = fraction(text) or self.done_fraction
                if self.current is not None and self.current.role in SHOWN_WARNINGS and WARNING.match(text):
                    line = f"[ascendfactory] {self.current.name}: {text.strip()}"
        if self.verbose:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)
        elif line:
            self.console.print(line, markup=False, highlight=False)

    def _parse(self, text: str) -> bool:
        """Update the stats from a loss-rank line; True when it was a training iteration."""
        s, formula = self.stats, self.stats.formula
        if s.seq_length is None and formula is not None and formula.seq_from_line is not None:
            s.seq_length = formula.seq_from_line(text)
        found = False
        for rec in self._parser.feed(text):
            if rec.kind != "train":
                continue
            found = True
            s.iteration, s.total = rec.step, rec.total_steps or s.total
            # this line's loss, or none: an older loss is never shown as the current one
            s.loss = next((rec.metrics[k] for k in self.logs.loss_keys if k in rec.metrics), None)
            step_ms = formula.step_ms(rec.metrics) if formula is not None else None
            if step_ms is not None:
                s.elapsed_ms.append(step_ms)
            s.latest.update(rec.metrics)
        return found

    def _plain_progress(self) -> str | None:
        """A training line for plain output, at each new tenth of the run or after `PLAIN_EVERY_S`."""
        s = self.stats
        tenth = int(10 * s.iteration / s.total) if s.iteration is not None and s.total else -1
        now = time.monotonic()
        last_time, last_tenth = self._printed_at
        if tenth <= last_tenth and now - last_time < PLAIN_EVERY_S:
            return None
        self._printed_at = (now, max(tenth, last_tenth))
        name = self.current.name if self.current is not None else "train"
        return f"[ascendfactory] {name}: {s.line()}"

    # -- rendering ------------------------------------------------------------------------------------
    def panel(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column("step", style="bold")
        table.add_column("state")
        table.add_column("detail", overflow="ellipsis", no_wrap=True)
        colours = {
            "running": "cyan",
            "done": "green",
            "skipped": "yellow",
            "failed": "red",
            "interrupted": "red",
            "pending": "dim",
        }
        with self._lock:
            for name, (state, detail) in self.steps.items():
                table.add_row(name, Text(state, style=colours.get(state, "")), detail)
            if self.current is not None:
                elapsed = _clock(time.monotonic() - self._t0)
                if self.current.role is Role.TRAIN:
                    s = self.stats
                    done = s.iteration / s.total if s.iteration is not None and s.total else None
                    info = s.line()
                else:
                    done, info = self.done_fraction, "running"
                bar = ProgressBar(total=1.0, completed=done or 0.0, width=30, pulse=done is None)
                table.add_row("", bar, Text(f"{elapsed}  {info}", style="cyan"))
        return table
