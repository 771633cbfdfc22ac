"""LLaMA-Factory: `trainer_log.jsonl` records and the HF Trainer console dicts.

trainer_log.jsonl (one JSON object per line, written by LLaMA-Factory's `LogCallback`):
- `current_steps` -> `Record.step`, `total_steps` -> `Record.total_steps`;
- `elapsed_time` / `remaining_time` (`H:MM:SS` or `N days, H:MM:SS`) -> seconds. `Record.wall_time` is
  seconds since the segment started (the timer restarts on resume): `total_tokens / throughput` when
  both are logged (LLaMA-Factory divides the global token count by the session's time; exact to the
  hundredth of a token/s, where `elapsed_time` has whole seconds), else `elapsed_time`;
- other numeric keys (`loss`, `lr`, `epoch`, `percentage`, `throughput`, `total_tokens`,
  `eval_loss`, `vram_allocated`, ...) go to `metrics` as they are;
- kind: ``train`` when `loss` is present, ``eval`` for `eval_*` / `predict_*` records, otherwise
  ``progress`` (the final train-summary record, which has throughput but no loss).
A resumed run appends to the file, so steps repeat; `record.dedupe` keeps the later segment.

Console (stdout) dicts printed by HF's `ProgressCallback`:
`{'loss': 1.23, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.12}`; transformers 5.x quotes
the values (`{'loss': '6.854', 'epoch': '0.02', 'num_input_tokens_seen': 768}`). These carry no step;
the step is taken from the last tqdm bar seen (`| 10/200 [`), else counted (1, 2, ...). The final
`{'train_runtime': ..., 'train_loss': ...}` dict becomes a ``summary`` record.
"""

from __future__ import annotations

import json
import re

from ascendfactory.metrics.record import Record, numeric_items, parse_clock, to_float

NAME = "llamafactory"
CONSOLE_NAME = "hf_console"

_NONE: tuple[Record, ...] = ()
_PAIR = re.compile(r"'([^']+)':\s*([^,{}]+(?:\([^()]*\))?)")
_TQDM = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")
_CONSOLE_KEYS = ("{'loss':", "{'eval_loss':", "{'train_runtime':", "'learning_rate':", "{'train_loss':")


def sniff(line: str) -> bool:
    s = line.lstrip()
    return s.startswith("{") and '"current_steps"' in s


def sniff_console(line: str) -> bool:
    return any(k in line for k in _CONSOLE_KEYS)


def _kind(keys: dict[str, float]) -> str:
    if "loss" in keys:
        return "train"
    if any(k.startswith(("eval_", "predict_")) for k in keys):
        return "eval"
    return "progress"


class TrainerLogParser:
    """trainer_log.jsonl lines."""

    name = NAME

    def feed(self, line: str) -> tuple[Record, ...]:
        start = line.find("{")
        if start < 0 or "current_steps" not in line:
            return _NONE
        try:
            data = json.loads(line[start:])
        except ValueError:
            return _NONE
        if not isinstance(data, dict) or "current_steps" not in data:
            return _NONE
        step = to_float(data.pop("current_steps"))
        if step is None:
            return _NONE
        total = to_float(data.pop("total_steps", None))
        wall = None
        for key in ("elapsed_time", "remaining_time"):
            if isinstance(data.get(key), str):
                seconds = parse_clock(data[key])
                data[key] = seconds
                if key == "elapsed_time":
                    wall = seconds
        metrics = numeric_items(data)
        tokens, rate = metrics.get("total_tokens"), metrics.get("throughput")
        if tokens is not None and rate:
            wall = tokens / rate
        return (
            Record(
                step=int(step),
                metrics=metrics,
                wall_time=wall,
                kind=_kind(metrics),
                total_steps=int(total) if total is not None else None,
            ),
        )

    def flush(self) -> tuple[Record, ...]:
        return _NONE


def kind_of_step(metrics: dict[str, float]) -> bool:
    """A training step's dict (its loss), not the evaluation's or the end-of-training summary."""
    return "loss" in metrics


class ConsoleDictParser:
    """HF Trainer stdout dicts; the step comes from the tqdm bar when one is seen."""

    name = CONSOLE_NAME

    def __init__(self) -> None:
        self._bar_step: int | None = None
        self._bar_total: int | None = None
        self._count = 0
        self._last_steps: list[int] = []  # the steps of the training dicts so far

    def _interval(self) -> int:
        """The logging interval the last two training dicts show (1 before there are two)."""
        last = self._last_steps
        return max(1, last[-1] - last[-2]) if len(last) > 1 else 1

    def feed(self, line: str) -> tuple[Record, ...]:
        records: tuple[Record, ...] = _NONE
        brace = line.find("{'")
        head = line if brace < 0 else line[:brace]
        if "|" in head and "[" in head:
            bars = _TQDM.findall(head)
            if bars:
                self._bar_step, self._bar_total = int(bars[-1][0]), int(bars[-1][1])
        if brace >= 0:
            metrics = {}
            for key, raw in _PAIR.findall(line[brace:]):
                value = to_float(raw.strip().strip("'\""))
                if value is not None:
                    metrics[key] = value
            if metrics and any(
                k in metrics for k in ("loss", "eval_loss", "train_runtime", "learning_rate", "train_loss")
            ):
                self._count += 1
                step = self._bar_step if self._bar_step is not None else self._count
                if kind_of_step(metrics) and self._last_steps and step <= self._last_steps[-1]:
                    # tqdm redraws at most every 0.1 s: a fast step's bar can still show the step before
                    # (`0/30` beside step 1's loss); the step after the last one, as trainer_log.jsonl has it
                    step = self._last_steps[-1] + self._interval()
                elif kind_of_step(metrics) and not self._last_steps and step == 0:
                    step = 1
                if kind_of_step(metrics):
                    self._last_steps.append(step)
                # the end-of-training dict has train_runtime and no loss; with token counting,
                # transformers 5.x also puts train_runtime into every step's dict
                kind = "summary" if "train_runtime" in metrics and "loss" not in metrics else _kind(metrics)
                records = (Record(step=step, metrics=metrics, kind=kind, total_steps=self._bar_total),)
        return records

    def flush(self) -> tuple[Record, ...]:
        return _NONE
