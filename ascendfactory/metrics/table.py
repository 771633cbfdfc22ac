"""`StepTable`: the training steps of a run as compact columns, resumed segments already joined.

Records are added in log order. Steps inside one segment rise; when a step does not rise, a resumed
segment has started, and every stored step >= it is dropped first, so the later segment wins
(exactly `record.dedupe` for training steps) without keeping dropped records. Values are stored as
8-byte floats per metric (NaN where a step did not log that metric), so a summary of a multi-GB log
costs memory for the numbers only. Records of other kinds (eval, progress, memory, checkpoint) are
few and kept as records, deduplicated by (kind, step).
"""

from __future__ import annotations

import math
import struct
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ascendfactory.metrics.record import Record, dedupe

_NAN = math.nan
# Padding for steps that did not log a metric: a NaN with its own payload, so a NaN the run really
# logged (a finding) stays distinguishable from "not logged".
_PAD_BYTES = b"\x01\x00\x00\x00\x00\x00\xf8\x7f"
_PAD: float = struct.unpack("<d", _PAD_BYTES)[0]
MISSING = _PAD  # the name `metrics.columns` uses


def _is_pad(v: float) -> bool:
    return v != v and struct.pack("<d", v) == _PAD_BYTES


class StepTable:
    def __init__(self, *, steps: tuple[int | None, int | None] | None = None) -> None:
        self.steps: array[int] = array("q")
        self.wall: array[float] = array("d")
        self.total_steps: int | None = None
        self._cols: dict[str, array[float]] = {}
        self._others: list[Record] = []
        self._range = steps or (None, None)

    @classmethod
    def from_records(
        cls, records: Iterable[Record] | StepTable, *, steps: tuple[int | None, int | None] | None = None
    ) -> StepTable:
        if isinstance(records, StepTable):
            return records if steps is None else records.slice(*steps)
        table = cls(steps=steps)
        for rec in records:
            table.add(rec)
        return table

    def __len__(self) -> int:
        return len(self.steps)

    def _in_range(self, step: int) -> bool:
        lo, hi = self._range
        return (lo is None or step >= lo) and (hi is None or step <= hi)

    def add(self, rec: Record) -> None:
        if rec.kind != "train":
            if self._in_range(rec.step) or rec.kind == "progress":
                self._others.append(rec)
            return
        if rec.total_steps is not None:
            self.total_steps = rec.total_steps
        if not self._in_range(rec.step):
            return
        n = len(self.steps)
        if n and rec.step <= self.steps[-1]:
            n = bisect_left(self.steps, rec.step)
            self._truncate(n)
        for key, value in rec.metrics.items():
            col = self._cols.get(key)
            if col is None:
                col = self._cols[key] = array("d")
            if len(col) < n:
                col.extend([_PAD] * (n - len(col)))
            col.append(value)
        self.steps.append(rec.step)
        self.wall.append(_NAN if rec.wall_time is None else rec.wall_time)

    def add_columns(self, steps: Sequence[int], values: Mapping[str, Sequence[float]]) -> None:
        """Training rows as columns (`metrics.columns.Columns`: MISSING marks a field a row lacks).

        Rows that go on rising past the stored steps are appended column-wise; anything else (a
        resumed segment, a step range) goes row by row through `add`, so the result is the same."""
        steps = steps.tolist() if hasattr(steps, "tolist") else list(steps)  # numpy arrays, C speed
        n = len(self.steps)
        if (
            steps
            and self._range == (None, None)
            and all(a < b for a, b in zip(steps, steps[1:]))
            and (not n or steps[0] > self.steps[-1])
        ):
            for key, col in values.items():
                stored = self._cols.get(key)
                if stored is None:
                    stored = self._cols[key] = array("d")
                if len(stored) < n:
                    stored.extend([_PAD] * (n - len(stored)))
                if hasattr(col, "tobytes"):  # a float64 numpy array: its bytes are the doubles
                    column: Any = col
                    stored.frombytes(column.astype("<f8", copy=False).tobytes())
                else:
                    stored.extend(col)
            self.steps.extend(steps)
            self.wall.extend([_NAN] * len(steps))
            return
        for i, step in enumerate(steps):
            metrics = {k: float(v[i]) for k, v in values.items() if not _is_pad(float(v[i]))}
            self.add(Record(step=step, metrics=metrics))

    def _truncate(self, n: int) -> None:
        del self.steps[n:]
        del self.wall[n:]
        for col in self._cols.values():
            del col[n:]

    def keys(self) -> list[str]:
        return list(self._cols)

    def has(self, key: str) -> bool:
        col = self._cols.get(key)
        return col is not None and any(not _is_pad(v) for v in col)

    def column(self, key: str) -> list[float]:
        """Values of `key` for every stored step (NaN where that step did not log it)."""
        col = self._cols.get(key)
        if col is None:
            return [_NAN] * len(self.steps)
        return list(col) + [_NAN] * (len(self.steps) - len(col))

    def series(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) where `key` was logged (NaN values included: they are findings)."""
        col = self._cols.get(key)
        if col is None:
            return [], []
        pairs = [(s, v) for s, v in zip(self.steps, col) if not _is_pad(v)]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def others(self, kind: str | None = None) -> list[Record]:
        recs = dedupe(self._others)
        return [r for r in recs if kind is None or r.kind == kind]

    def all_others(self, kind: str) -> list[Record]:
        """Every record of `kind` in file order, none merged (several ranks' memory reports share a step)."""
        return [r for r in self._others if r.kind == kind]

    def slice(self, lo: int | None, hi: int | None) -> StepTable:
        out = StepTable(steps=(lo, hi))
        out.total_steps = self.total_steps
        cols = self._cols
        for i, step in enumerate(self.steps):
            wall = self.wall[i]
            metrics = {k: c[i] for k, c in cols.items() if i < len(c) and not _is_pad(c[i])}
            out.add(Record(step=step, metrics=metrics, wall_time=None if math.isnan(wall) else wall))
        for rec in self._others:
            out.add(rec)
        return out
