"""Export parsed records as CSV, JSONL or TensorBoard event files.

- csv: one row per record (`step, kind, wall_time, <metric>...`); the header is every metric seen,
  so a file input is read twice (two streaming passes) rather than held in memory.
- jsonl: `Record.to_dict()` per line.
- tensorboard: scalars written with tensorboard's own `EventFileWriter`; tag = metric name
  (eval records as logged: `eval_loss`, `val-core/...`). Where the log says how many samples were
  consumed (`consumed samples`, `system/samples`), each scalar also gets a `<tag>-vs-samples` twin
  whose x axis is the sample count, as MindFormers' TensorBoard monitor does.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.metrics.record import Record

TARGETS = ("csv", "jsonl", "tensorboard")
SAMPLE_KEYS = ("consumed samples", "system/samples")
_SKIP_KINDS = ("checkpoint_start", "checkpoint")


def _csv(records: Iterable[Record], keys: list[str], dest: Path) -> int:
    n = 0
    with open(dest, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "kind", "wall_time", *keys])
        for rec in records:
            writer.writerow(
                [
                    rec.step,
                    rec.kind,
                    "" if rec.wall_time is None else rec.wall_time,
                    *("" if k not in rec.metrics else rec.metrics[k] for k in keys),
                ]
            )
            n += 1
    return n


def _jsonl(records: Iterable[Record], dest: Path) -> int:
    n = 0
    with open(dest, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec.to_dict(), default=str) + "\n")
            n += 1
    return n


def _tensorboard(records: Iterable[Record], dest: Path) -> int:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    dest.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(dest))
    n = 0
    try:
        for rec in records:
            if rec.kind in _SKIP_KINDS:
                continue
            wall = rec.wall_time if rec.wall_time and rec.wall_time > 1e9 else time.time()
            values = [(k, v) for k, v in rec.metrics.items() if math.isfinite(v)]
            writer.add_event(
                Event(
                    wall_time=wall,
                    step=rec.step,
                    summary=Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in values]),
                )
            )
            samples = next((rec.metrics[k] for k in SAMPLE_KEYS if k in rec.metrics), None)
            if samples is not None and math.isfinite(samples):
                writer.add_event(
                    Event(
                        wall_time=wall,
                        step=int(samples),
                        summary=Summary(
                            value=[
                                Summary.Value(tag=f"{k}-vs-samples", simple_value=v)
                                for k, v in values
                                if k not in SAMPLE_KEYS
                            ]
                        ),
                    )
                )
            n += 1
    finally:
        writer.close()
    return n


def export_records(records: Callable[[], Iterator[Record]], to: str, dest: str | Path) -> int:
    """Write records to `dest` (a file for csv/jsonl, a directory for tensorboard); returns the count.

    `records` is a zero-argument callable returning a fresh iterator, so csv can take two passes.
    """
    if to not in TARGETS:
        raise ConfigError(
            Problem(
                key="--to",
                message=f"unknown export target {to!r}",
                fix="use one of: " + ", ".join(TARGETS) + " (or a tracker: `logs export --to` lists them)",
            )
        )
    dest = Path(dest)
    if to == "tensorboard":
        return _tensorboard(records(), dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if to == "jsonl":
        return _jsonl(records(), dest)
    keys: dict[str, None] = {}
    for rec in records():
        keys.update(dict.fromkeys(rec.metrics))
    return _csv(records(), list(keys), dest)
