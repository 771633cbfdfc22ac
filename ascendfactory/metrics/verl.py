"""VeRL: console-logger lines and the file logger's JSONL.

Console: `step:N - key:value - key:value ...`, found anywhere in the line (Ray adds
`(TaskRunner pid=N) `). Split on ` - `, then on the first `:`. Values in the wild: full-precision
Python numbers (`actor/lr:1e-06`), old `%.3f` (`global_seqlen/min:538646.000`), and with numpy >= 2
`np.float64(0.0070)` / `np.float64(nan)`. Step 0 is the validation run before training: a line whose
keys are all `val-*` gets kind ``eval``. The multi-line `Initial validation metrics` pprint and the
tqdm bar are ignored.

File logger (`trainer.logger=['console','file']`): JSONL records `{"step": N, "data": {...}}`.
"""

from __future__ import annotations

import re

from ascendfactory.metrics.record import Record, json_step_metrics, labelled_values

NAME = "verl"
JSONL_NAME = "verl_jsonl"

_HEAD = re.compile(r"step:(\d+)(?: - |\s*$)")
_NONE: tuple[Record, ...] = ()


def sniff(line: str) -> bool:
    i = line.find("step:")
    return i >= 0 and _HEAD.match(line, i) is not None and " - " in line


def sniff_jsonl(line: str) -> bool:
    s = line.lstrip()
    return s.startswith('{"step"') and '"data"' in s


def _kind(metrics: dict[str, float]) -> str:
    return "eval" if metrics and all(k.startswith(("val-", "val/")) for k in metrics) else "train"


class VerlConsoleParser:
    name = NAME

    def feed(self, line: str) -> tuple[Record, ...]:
        i = line.find("step:")
        if i < 0:
            return _NONE
        m = _HEAD.match(line, i)
        if m is None:
            return _NONE
        metrics = labelled_values(line[m.end() :], " - ")
        return (Record(step=int(m.group(1)), metrics=metrics, kind=_kind(metrics)),)

    def flush(self) -> tuple[Record, ...]:
        return _NONE


class VerlJsonlParser:
    name = JSONL_NAME

    def feed(self, line: str) -> tuple[Record, ...]:
        start = line.find("{")
        if start < 0 or '"step"' not in line:
            return _NONE
        found = json_step_metrics(line[start:], "data")
        if found is None:
            return _NONE
        step, metrics = found
        return (Record(step=step, metrics=metrics, kind=_kind(metrics)),)

    def flush(self) -> tuple[Record, ...]:
        return _NONE
