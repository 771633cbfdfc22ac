"""What the user sees while `train` runs: a rich live panel on a terminal, plain lines otherwise (CI).

The panel shows every step with its state and wall time, and for the train step the iteration, loss,
tokens/s per device and ETA parsed from the loss rank's lines (MindSpeed-LLM prints them on the last rank)
with `ascendfactory.metrics`' Megatron parser. Plain mode prints the runner's events and echoes the step's
output (for training: the loss rank and the launcher), so a CI log reads like the run.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.metrics.formats import make_parser
from ascendfactory.pipeline.plan import Step

SEQ_ARG = re.compile(r"^\s*seq_length\s*\.{2,}\s*(\d+)\s*$")  # Megatron's arguments dump
ELAPSED = "elapsed time per iteration (ms)"


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

    def tokens_per_s_per_device(self) -> float | None:
        """MindSpeed-LLM's formula, GBS x seq_length / (devices x ms) x 1000, over the last iterations."""
        if not (self.elapsed_ms and self.gbs and self.seq_length and self.devices):
            return None
        ms = sum(self.elapsed_ms) / len(self.elapsed_ms)
        return self.gbs * self.seq_length / (self.devices * ms) * 1000 if ms > 0 else None

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

    def __init__(self, console: Any, *, live: bool | None = None, seq_length: int | None = None,
                 devices: int | None = None) -> None:
        self.console = console
        self.live_mode = console.is_terminal if live is None else live
        self.steps: dict[str, tuple[str, str]] = {}  # name -> (state, detail)
        self.current: Step | None = None
        self.loss_rank: int | None = None
        self.stats = TrainStats(seq_length=seq_length, devices=devices)
        self.recent: deque[str] = deque(maxlen=6)
        self._lock = threading.Lock()
        self._parser = make_parser("megatron")
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
            self._parser = make_parser("megatron")
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
        is_train = self.current is not None and self.current.kind == "train"
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
        m = SEQ_ARG.match(text)
        if m and s.seq_length is None:
            s.seq_length = int(m.group(1))
        for rec in self._parser.feed(text):
            if rec.kind != "train":
                continue
            s.iteration, s.total = rec.step, rec.total_steps or s.total
            s.loss = rec.metrics.get("lm loss", rec.metrics.get("loss", s.loss))
            if ELAPSED in rec.metrics:
                s.elapsed_ms.append(rec.metrics[ELAPSED])
            s.gbs = rec.metrics.get("global batch size", s.gbs)

    # -- rendering ------------------------------------------------------------------------------------
    def panel(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column("step", style="bold")
        table.add_column("state")
        table.add_column("detail", overflow="fold")
        colours = {"running": "cyan", "done": "green", "skipped": "yellow", "failed": "red",
                   "interrupted": "red", "pending": "dim"}
        with self._lock:
            for name, (state, detail) in self.steps.items():
                table.add_row(name, Text(state, style=colours.get(state, "")), detail)
            if self.current is not None:
                elapsed = _clock(time.monotonic() - self._t0)
                info = self.stats.line() if self.current.kind == "train" else "running"
                table.add_row("", "", Text(f"{elapsed}  {info}", style="cyan"))
                for line in self.recent:
                    table.add_row("", "", Text(line[-200:], style="dim"))
        return table
