"""Alibaba ROLL: the `stdout` tracker's `metrics_tag: {"step": N, "metrics": {...}}` lines.

The JSON follows ROLL's logger prefix
(`[asctime] [file (line)] [LEVEL] [WORKER RANK / WORLD][PID n] `), which is ignored. Metric names are
kept as logged (`critic/score/mean`, `tokens/response_length/mean`, `actor/pg_loss`,
`system/tps`, `system/samples`, `time/rollout`, `memory/...`, `val/score/mean`); non-numeric values
are skipped. json.dumps writes NaN as `NaN`, which is read back as float nan.
"""

from __future__ import annotations

from ascendfactory.metrics.record import Record, json_step_metrics

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
        found = json_step_metrics(line[i + len(TAG) :], "metrics")
        if found is None:
            return _NONE
        step, values = found
        kind = "eval" if values and all(k.startswith("val/") for k in values) else "train"
        return (Record(step=step, metrics=values, kind=kind),)

    def flush(self) -> tuple[Record, ...]:
        return _NONE
