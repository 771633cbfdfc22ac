"""Megatron-style iteration lines: MindSpeed-LLM (mcore and FSDP2), legacy ModelLink, MindSpeed-MM,
Megatron-DeepSpeed.

A line is recognised by its head, `iteration <N>/<T>` (spaces allowed around `/`), optionally after
a `[YYYY-MM-DD HH:MM:SS]` timestamp or a logger prefix (`INFO [...] >>`). Everything after the head
is split on `|` into `label: value` segments, so any subset and order of fields parses, and new
fields (`tokens per gpu per second (tgs)`, `TFLOPs`, `tokens per sample`, `consumed tokens`,
`max_memory_allocated(GB)`, ...) appear in `metrics` under their own label. Labels keep the
framework's spelling except legacy ModelLink's `gloabl batch size`, which becomes
`global batch size`.

Also recognised:
- a line wrapped over two physical lines (legacy ModelLink READMEs): a head line that does not end
  in `|` is joined with the next line when that line continues the field list;
- Megatron validation (`training.py` `evaluate_and_print_results`, printed between two dashed lines):
  `validation loss at iteration N | lm loss value: X | lm loss PPL: Y |` every `--eval-interval`
  iterations and `... at iteration N on validation set | ...` after training (kind ``eval``), and
  `... at iteration N on test set | ...` (kind ``test``);
- `[Rank R] (after K iterations) memory (MB) | allocated: ... | max allocated: ...` (kind
  ``memory``; keys `memory/allocated_mb`, `memory/max_allocated_mb`, ..., `memory/rank`);
- `saving checkpoint at iteration N to DIR` (kind ``checkpoint_start``) and
  `successfully saved checkpoint from iteration N to DIR` (kind ``checkpoint``).

Timestamps are read as UTC (MindSpeed-LLM 2.1.0 prints UTC, newer versions local time); only
differences between them are used.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from ascendfactory.metrics.record import Record, labelled_values, to_float

NAME = "megatron"

_HEAD = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)")
_TS = re.compile(r"\[(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)")
_VALID = re.compile(r"validation loss at iteration\s+(\d+)(\s+on test set)?")
_MEMORY = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\)")
_CKPT = re.compile(r"(saving|successfully saved) checkpoint (?:at|from) iteration\s+(\d+)(?: to (\S+))?")
_ALIASES = {"gloabl batch size": "global batch size"}
_NO_RECORDS: tuple[Record, ...] = ()

GBS = "global batch size"
ELAPSED_MS = "elapsed time per iteration (ms)"
LOSS_KEYS = ("lm loss", "loss")


# The names Megatron gives its logged values in TensorBoard and W&B where they differ from its log line
# (core_r0.8.0 megatron/training/training.py `training_log`, lines 740-842; `evaluate_and_print_results`
# writes `<key> validation` and `<key> validation ppl`, lines 1387-1400), so a log exported to a tracker
# lines up with the run the framework reported itself.
TRACKER_NAMES = {
    "learning rate": "learning-rate",
    "decoupled learning rate": "decoupled-learning-rate",
    GBS: "batch-size",
    "loss scale": "loss-scale",
    "grad norm": "grad-norm",
    "num zeros": "num-zeros",
    "params norm": "params-norm",
    "throughput per GPU (TFLOP/s/GPU)": "throughput",
}


def tracker_name(kind: str, label: str) -> str:
    """A parsed value's name in Megatron's own tracker writers (`TRACKER_NAMES`); other kinds prefixed."""
    if kind == "eval" and label.endswith(" value"):
        return label.removesuffix(" value") + " validation"
    if kind == "eval" and label.endswith(" PPL"):
        return label.removesuffix(" PPL") + " validation ppl"
    if kind in ("train", "memory"):
        return TRACKER_NAMES.get(label, label)
    return f"{kind}/{label}"


def sniff(line: str) -> bool:
    i = line.find("iteration")
    return i >= 0 and "|" in line and _HEAD.match(line, i) is not None and ":" in line


_MIDNIGHT: dict[str, float] = {}


def _wall_time(prefix: str) -> float | None:
    """Unix time of a `[YYYY-MM-DD HH:MM:SS]` stamp in `prefix` (read as UTC), else None."""
    j = prefix.find("[")
    if j < 0:
        return None
    text = prefix[j + 1 : j + 20]
    day = _MIDNIGHT.get(text[:10])
    try:
        if day is None:
            m = _TS.match(prefix, j)
            if m is None:
                return None
            y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
            day = _MIDNIGHT[text[:10]] = datetime(y, mo, d, tzinfo=timezone.utc).timestamp()
        return day + int(text[11:13]) * 3600 + int(text[14:16]) * 60 + int(text[17:19])
    except ValueError:
        return None


def iteration_record(head: re.Match[str], metrics: dict[str, float], prefix: str) -> Record:
    """The Record of an `iteration N/ T` line: `head` matched N and T, `prefix` is the text before it."""
    return Record(
        step=int(head.group(1)), metrics=metrics, wall_time=_wall_time(prefix), total_steps=int(head.group(2))
    )


def parse_fields(text: str) -> dict[str, float]:
    """`| label: value | label: value |` -> {label: float}, Megatron's misspelt labels renamed."""
    return labelled_values(text, "|", _ALIASES)


def _starts_record(line: str) -> bool:
    i = line.find("iteration")
    if i >= 0 and _HEAD.match(line, i):
        return True
    return "memory (MB)" in line or "checkpoint" in line or "validation loss" in line


class MegatronParser:
    """Push parser: `feed(line)` returns the records that line completes; `flush()` ends the stream."""

    name = NAME

    def __init__(self, *, fields: frozenset[str] | None = None) -> None:
        self._pending: str | None = None
        # With `fields`, only those labels are read (str.find per label instead of a full split).
        self._labels: tuple[tuple[str, str], ...] | None = None
        if fields is not None:
            reverse = {v: k for k, v in _ALIASES.items()}
            pairs = [(f, f + ":") for f in fields] + [(f, reverse[f] + ":") for f in fields if f in reverse]
            self._labels = tuple(pairs)

    @property
    def pending(self) -> bool:
        """True while a head line waits for its wrapped continuation (the next line decides)."""
        return self._pending is not None

    @property
    def labels(self) -> tuple[tuple[str, str], ...] | None:
        """With `fields`: the (metric name, `label:`) pairs read, in the order they are tried."""
        return self._labels

    def feed(self, line: str) -> tuple[Record, ...]:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if "|" in line and not _starts_record(line):
                return self._parse(pending + " " + line.strip(), final=True)
            return self._parse(pending, final=True) + self.feed(line)
        return self._parse(line, final=False)

    def flush(self) -> tuple[Record, ...]:
        if self._pending is None:
            return _NO_RECORDS
        pending, self._pending = self._pending, None
        return self._parse(pending, final=True)

    def _parse(self, line: str, *, final: bool) -> tuple[Record, ...]:
        i = line.find("iteration")
        if i < 0:
            return _NO_RECORDS
        m = _HEAD.match(line, i)
        if m is None:
            return self._other(line)
        if not final and not line.rstrip().endswith("|"):
            self._pending = line.rstrip()
            return _NO_RECORDS
        metrics = parse_fields(line[m.end() :]) if self._labels is None else self._pick(line, m.end())
        if not metrics and self._labels is None:
            return _NO_RECORDS
        return (iteration_record(m, metrics, line[:i]),)

    def _pick(self, line: str, start: int) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for name, label in self._labels or ():
            j = line.find(label, start)
            if j < 0 or line[j - 1] not in " |":
                continue
            j += len(label)
            k = line.find("|", j)
            raw = line[j:k] if k >= 0 else line[j:]
            try:
                metrics[name] = float(raw)
            except ValueError:
                number = to_float(raw)
                if number is not None:
                    metrics[name] = number
        return metrics

    def _other(self, line: str) -> tuple[Record, ...]:
        if "memory (MB)" in line:
            m = _MEMORY.search(line)
            if m:
                fields = parse_fields(line[m.end() :])
                metrics = {f"memory/{k.replace(' ', '_')}_mb": v for k, v in fields.items()}
                metrics["memory/rank"] = float(m.group(1))
                return (Record(step=int(m.group(2)), metrics=metrics, kind="memory"),)
        if "checkpoint" in line:
            m = _CKPT.search(line)
            if m:
                kind = "checkpoint_start" if m.group(1) == "saving" else "checkpoint"
                return (
                    Record(
                        step=int(m.group(2)),
                        kind=kind,
                        note=m.group(3) or "",
                        wall_time=_wall_time(line[: m.start()]),
                    ),
                )
        if "validation loss at iteration" in line:
            m = _VALID.search(line)
            if m:
                metrics = _without_capped_ppl(parse_fields(line[m.end() :]))
                if metrics:
                    return (
                        Record(
                            step=int(m.group(1)),
                            metrics=metrics,
                            kind="test" if m.group(2) else "eval",
                            wall_time=_wall_time(line[: m.start()]),
                        ),
                    )
        return _NO_RECORDS


def _without_capped_ppl(metrics: dict[str, float]) -> dict[str, float]:
    """A validation loss that is NaN / inf makes its PPL NaN: Megatron prints `exp(min(20, loss))`
    (megatron/training/training.py line 1384 at core_r0.8.0, `evaluate_and_print_results`), e^20 = 4.85e8 for
    a NaN loss (`min(20, nan)` is 20), a perplexity no model had."""
    for key, value in list(metrics.items()):
        if key.endswith(" value") and not math.isfinite(value):
            ppl = key[: -len(" value")] + " PPL"
            if ppl in metrics:
                metrics[ppl] = float("nan")
    return metrics


_SEQ_ARG = re.compile(r"^\s*seq_length\s*\.{2,}\s*(\d+)\s*$")  # Megatron's arguments dump


def seq_length_from_line(line: str) -> int | None:
    """`seq_length` from one line of Megatron's arguments dump (`  seq_length ....... 4096`)."""
    m = _SEQ_ARG.match(line)
    return int(m.group(1)) if m else None
