"""What the user sees while `train` runs: a rich live panel on a terminal, plain lines otherwise (CI).

The panel shows every step with its state and wall time, and for the train step the iteration, loss,
tokens/s per device and ETA parsed from the loss rank's lines with the parser the plan names
(`LogSpec.format`), its loss keys and its throughput formula. Plain mode prints the runner's events and
echoes the step's output (for training: the loss rank and the launcher), so a CI log reads like the run.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.metrics.formats import make_parser
from ascendfactory.metrics.megatron import ELAPSED_MS, GBS, seq_length_from_line
from ascendfactory.metrics.throughput import live_tokens_per_s
from ascendfactory.plan import LogSpec, Role, Step


@dataclass
class TrainStats:
    """The latest training progress, as parsed from the loss rank's log lines."""

    iteration: int | None = None
    total: int | None = None
    loss: float | None = None
    elapsed_ms: deque[float] = field(default_factory=lambda: deque(maxlen=10))
    gbs: float | None = None
    seq_length: int | None = None
    devices: int | None = None
    formula: str = "megatron"

    def tokens_per_s_per_device(self) -> float | None:
        """The plan's throughput formula over the last iterations (None where it needs the whole log)."""
        ms = sum(self.elapsed_ms) / len(self.elapsed_ms) if self.elapsed_ms else None
        return live_tokens_per_s(
            self.formula,
            gbs=self.gbs,
            seq_length=self.seq_length,
            devices=self.devices,
            mean_elapsed_ms=ms if ms and ms > 0 else None,
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


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """Thread-safe: `feed` is called by the tee thread, everything else by the runner."""

    def __init__(self, console: Any, logs: LogSpec, *, live: bool | None = None) -> None:
        self.console = console
        self.live_mode = console.is_terminal if live is None else live
        self.steps: dict[str, tuple[str, str]] = {}  # name -> (state, detail)
        self.current: Step | None = None
        self.loss_rank: int | None = None
        self.logs = logs
        tp = logs.throughput
        self.stats = TrainStats(seq_length=tp.seq_length, devices=tp.devices, formula=tp.formula)
        self.recent: deque[str] = deque(maxlen=6)
        self._lock = threading.Lock()
        self._parser = make_parser(logs.console_format or logs.format)
        self._live: Any = None
        self._t0 = time.monotonic()

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
            self.recent.clear()
            self._t0 = time.monotonic()
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
        with self._lock:
            if is_train and rank is not None:
                self._parse(text)
            self.recent.append(text)
        if not self.live_mode:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _parse(self, text: str) -> None:
        s = self.stats
        if s.seq_length is None:
            s.seq_length = seq_length_from_line(text)
        for rec in self._parser.feed(text):
            if rec.kind != "train":
                continue
            s.iteration, s.total = rec.step, rec.total_steps or s.total
            s.loss = next((rec.metrics[k] for k in self.logs.loss_keys if k in rec.metrics), s.loss)
            if ELAPSED_MS in rec.metrics:
                s.elapsed_ms.append(rec.metrics[ELAPSED_MS])
            s.gbs = rec.metrics.get(GBS, s.gbs)

    # -- rendering ------------------------------------------------------------------------------------
    def panel(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column("step", style="bold")
        table.add_column("state")
        table.add_column("detail", overflow="fold")
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
                info = self.stats.line() if self.current.role is Role.TRAIN else "running"
                table.add_row("", "", Text(f"{elapsed}  {info}", style="cyan"))
                for line in self.recent:
                    table.add_row("", "", Text(line[-200:], style="dim"))
        return table
