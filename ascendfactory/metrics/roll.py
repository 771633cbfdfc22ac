"""Alibaba ROLL: the `stdout` tracker's `metrics_tag: {"step": N, "metrics": {...}}` lines.

The JSON follows ROLL's logger prefix
(`[asctime] [file (line)] [LEVEL] [WORKER RANK / WORLD][PID n] `), which is ignored. Metric names are
kept as logged (`critic/score/mean`, `tokens/response_length/mean`, `actor/pg_loss`,
`system/tps`, `system/samples`, `time/rollout`, `memory/...`, `val/score/mean`); non-numeric values
are skipped. json.dumps writes NaN as `NaN`, which is read back as float nan.
"""

from __future__ import annotations

import json

from ascendfactory.metrics.record import Record, numeric_items, to_float

NAME = "roll"
TAG = "metrics_tag:"
_NONE: tuple[Record, ...] = ()


def sniff(line: str) -> bool:
    return TAG in line


class RollParser:
    name = NAME

    def feed(self, line: str) -> tuple[Record, ...]:
        i = line.find(TAG)
        if i < 0:
            return _NONE
        try:
            obj = json.loads(line[i + len(TAG) :])
        except ValueError:
            return _NONE
        if not isinstance(obj, dict):
            return _NONE
        step = to_float(obj.get("step"))
        metrics = obj.get("metrics")
        if step is None or not isinstance(metrics, dict):
            return _NONE
        values = numeric_items(metrics)
        kind = "eval" if values and all(k.startswith("val/") for k in values) else "train"
        return (Record(step=int(step), metrics=values, kind=kind),)

    def flush(self) -> tuple[Record, ...]:
        return _NONE
