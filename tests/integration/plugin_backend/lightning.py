"""What a NeMo-like framework writes that the house does not know, registered from outside the package.

    log format   `lightning-demo`: Lightning progress lines,
                 `Epoch 0: 37%| 3/8 [reduced_train_loss=1.234, train_step_timing in s=0.012, global_step=3]`
    formula      `lightning-demo`: tokens/s/device = tokens per device per step / train_step_timing
    scheme       `lightning-steps`: `step=N-consumed_samples=M/` directories, complete when `state.pt` is
                 there, plus a `...-last` copy of the newest; no tracker file

Registered by importing this module (the backend module does); nothing in `ascendfactory/` names them.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Mapping

from ascendfactory.checkpoints import register_scheme
from ascendfactory.metrics.formats import LogFormat, register_format
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.table import StepTable
from ascendfactory.metrics.throughput import Formula, LiveInputs, Throughput, register_formula

NAME = "lightning-demo"
SCHEME_NAME = "lightning-steps"
STEP_TIME = "train_step_timing in s"
LOSS = "reduced_train_loss"
COMPLETE = "state.pt"
_LINE = re.compile(r"\[(?P<values>[^\]]*global_step=\d+[^\]]*)\]")
_STEP_DIR = re.compile(r"^step=(\d+)-consumed_samples=(\d+)$")


def sniff(line: str) -> bool:
    return "global_step=" in line and "reduced_train_loss=" in line


class LightningParser:
    name = NAME

    def feed(self, line: str) -> tuple[Record, ...]:
        m = _LINE.search(line)
        if m is None:
            return ()
        values = dict(part.strip().split("=", 1) for part in m.group("values").split(",") if "=" in part)
        step = int(values.pop("global_step"))
        metrics = {}
        for key, text in values.items():
            try:
                metrics[key.strip()] = float(text)
            except ValueError:
                continue
        return (Record(step=step, metrics=metrics),)

    def flush(self) -> tuple[Record, ...]:
        return ()


def summary(table: StepTable, *, seq_length: int | None, **_: object) -> Throughput:
    steps, times = table.series(STEP_TIME)
    pairs = [(s, t) for s, t in zip(steps, times) if math.isfinite(t) and t > 0]
    used, skipped = pairs[1:], pairs[:1]  # the first step warms up
    value = seq_length * len(used) / sum(t for _, t in used) if used and seq_length else None
    tp = Throughput(
        "tokens/s/device", value, "tokens/s/device", NAME, [s for s, _ in used], [s for s, _ in skipped]
    )
    if value is None:
        tp.note = f"no '{STEP_TIME}' in the log" if not used else "the plan gives no tokens per step"
    return tp


def live(inputs: LiveInputs) -> float | None:
    if not (inputs.seq_length and inputs.mean_step_ms):
        return None
    return inputs.seq_length / inputs.mean_step_ms * 1000


def step_ms(metrics: Mapping[str, float]) -> float | None:
    value = metrics.get(STEP_TIME)
    return value * 1000 if value is not None else None


def step_dirs(root: str) -> list[tuple[int, str]]:
    """(step, path) of every complete `step=N-consumed_samples=M` directory, oldest first (`-last` copies and
    directories without `state.pt` are not checkpoints to resume or retain)."""
    found = []
    for name in os.listdir(root) if os.path.isdir(root) else []:
        m = _STEP_DIR.match(name)
        path = os.path.join(root, name)
        if m and os.path.isfile(os.path.join(path, COMPLETE)):
            found.append((int(m.group(1)), path))
    return sorted(found)


class StepDirScheme:
    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        done = step_dirs(root)
        return (os.path.basename(done[-1][1]) if done else None), None  # no tracker to repair

    def apply_retention(self, root: str, keep: int) -> list[str]:
        done = step_dirs(root)
        removed = [path for _, path in done[: max(0, len(done) - keep)]] if keep > 0 else []
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        return removed


register_format(
    LogFormat(NAME, "Lightning progress lines (demo)", sniff, LightningParser, priority=45, loss_keys=(LOSS,))
)
register_formula(Formula(NAME, summary, live=live, step_ms=step_ms))
register_scheme(SCHEME_NAME, StepDirScheme())
