"""The one record type every log parser yields, and the small helpers shared by the parsers.

A `Record` is one logged step: `step`, `wall_time` (seconds; Unix time when the log line carries a
timestamp, seconds since the run started for LLaMA-Factory's `elapsed_time`, else None) and a flat
`metrics` dict of floats keyed by the framework's own label (`lm loss`,
`elapsed time per iteration (ms)`, `critic/score/mean`, `loss`, ...). `kind` says what the line was:

- ``train``: a training step (the default)
- ``eval``: a validation record (LLaMA-Factory `eval_loss`, VeRL step-0 `val-*`, Megatron validation)
- ``test``: a held-out test record (Megatron's `validation loss at iteration N on test set`)
- ``progress``: a record with progress but no loss (LLaMA-Factory's final summary record)
- ``summary``: an end-of-run summary (HF `{'train_runtime': ...}`)
- ``memory``: Megatron's `[Rank N] (after K iterations) memory (MB)` report
- ``checkpoint_start`` / ``checkpoint``: Megatron's `saving checkpoint at iteration` and
  `successfully saved checkpoint from iteration` messages (`note` holds the directory)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Record:
    """One logged step. `metrics` values are floats (NaN and inf are kept: they are findings)."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    wall_time: float | None = None
    kind: str = "train"
    total_steps: int | None = None
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "step": self.step,
            "kind": self.kind,
            "wall_time": self.wall_time,
            "total_steps": self.total_steps,
            "note": self.note or None,
            "metrics": dict(self.metrics),
        }


_WRAPPED = re.compile(r"^\s*[A-Za-z_][\w.]*\(\s*([^,()]*)")  # np.float64(0.1), tensor(0.5, device=..)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.IGNORECASE)


def to_float(value: object) -> float | None:
    """A metric value as a float, or None when it is not a number.

    Accepts ints and floats (not bools), numeric strings (`1.234567E+00`, ` 0 `, `nan`, `inf`) and
    one wrapper call around a number (`np.float64(0.25)`, `tensor(1.5, device='npu:0')`).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        return float(value)
    except ValueError:
        pass
    m = _WRAPPED.match(value)
    text = m.group(1) if m else value
    m = _NUMBER.fullmatch(text.strip())
    if m is None:
        return None
    return float(m.group(0))


def parse_clock(text: str) -> float | None:
    """`H:MM:SS`, `MM:SS` or `N days, H:MM:SS` (Python's `str(timedelta)`) as seconds."""
    text = text.strip()
    days = 0
    if "day" in text:
        head, _, text = text.partition(",")
        try:
            days = int(head.split()[0])
        except (ValueError, IndexError):
            return None
    parts = text.strip().split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        return None
    if not 1 <= len(nums) <= 3:
        return None
    seconds = 0.0
    for n in nums:
        seconds = seconds * 60 + n
    return days * 86400 + seconds


def json_step_metrics(text: str, key: str) -> tuple[int, dict[str, float]] | None:
    """JSON `{"step": N, <key>: {...}}` -> (N, numeric metrics, nested keys joined by `/`); None otherwise."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    step = to_float(obj.get("step"))
    data = obj.get(key)
    if step is None or not isinstance(data, dict):
        return None
    return int(step), numeric_items(data)


def numeric_items(data: dict[str, object], *, prefix: str = "") -> dict[str, float]:
    """The numeric values of a (possibly nested) JSON object, nested keys joined with `/`."""
    out: dict[str, float] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(numeric_items(value, prefix=name + "/"))
            continue
        number = to_float(value)
        if number is not None:
            out[name] = number
    return out


def dedupe(records: Iterable[Record]) -> list[Record]:
    """Join resumed segments: one record per (kind, step), the later one wins, sorted by step.

    A resumed run appends to the same log (LLaMA-Factory's trainer_log.jsonl, a re-launched
    Megatron job tee'd into one file), so steps repeat; the later segment is the one that counts.
    """
    latest: dict[tuple[str, int], Record] = {}
    for rec in records:
        key = (rec.kind, rec.step)
        latest.pop(key, None)  # re-insert so order reflects the later segment
        latest[key] = rec
    return sorted(latest.values(), key=lambda r: r.step)


def labelled_values(text: str, sep: str, aliases: dict[str, str] | None = None) -> dict[str, float]:
    """`label: value<sep>label: value ...` -> {label: number}; segments without a number are skipped.

    Labels are stripped, inner runs of white space folded to one space, then renamed by `aliases`. This runs
    once per log line, so it is one plain loop: the fast path is float(); decorated numbers go through
    `to_float`.
    """
    metrics: dict[str, float] = {}
    for seg in text.split(sep):
        label, colon, raw = seg.partition(":")
        if not colon:
            continue
        try:
            value = float(raw)
        except ValueError:
            number = to_float(raw)
            if number is None:
                continue
            value = number
        label = label.strip()
        if "  " in label or "\t" in label:
            label = " ".join(label.split())
        metrics[aliases.get(label, label) if aliases else label] = value
    return metrics
