"""`eval`'s two knobs, checked before anything runs: `--num_fewshot` (the examples shown before each
question) and `--batch_size` (the questions the model scores at once), both handed to lm-evaluation-harness
as its own `num_fewshot` (in each task file) and `batch_size` (its `simple_evaluate` / `lm_eval
--batch_size`).

- `num_fewshot`: None keeps each benchmark's default (5 shots, at most as many as its dev / train file
  holds; a subject without one runs zero-shot and says so). A number is what the user asked for: 0 runs
  zero-shot; N > 0 needs every subject's dev / train file with at least N examples, else a `ConfigError`
  naming the file and how many it has (a silent cut to fewer shots would report another figure than the
  one asked for).
- `batch_size`: a positive integer, or lm-eval's `auto` / `auto:N` (it finds the largest batch that fits,
  re-trying N times).
"""

from __future__ import annotations

import csv
import re

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.evaluation.datasets import DATA_VARIABLE, Benchmark

AUTO = re.compile(r"auto(:[1-9][0-9]*)?")
FEWSHOT_SPLITS = ("dev", "train")  # MMLU / C-Eval's dev files, GSM8K's train file


def batch_size(value: str | int) -> int | str:
    """`--batch_size` as lm-eval takes it: an int >= 1, or `auto` / `auto:N`."""
    text = str(value).strip()
    if AUTO.fullmatch(text):
        return text
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(
            Problem(
                key="--batch_size",
                message=f"{value!r} is not a batch size",
                fix="a positive integer (1 when unsure), or auto to let lm-eval find the largest that fits",
            )
        )
    return number


def examples_in(path: str, bench: Benchmark) -> int:
    """The questions one few-shot file holds, read as the program reads it (MMLU: CSV rows without a header;
    C-Eval: CSV rows under its header; GSM8K: non-empty JSONL lines)."""
    with open(path, encoding="utf-8", newline="") as f:
        if bench.name == "gsm8k":
            return sum(1 for line in f if line.strip())
        if bench.name == "ceval":
            return sum(1 for _ in csv.DictReader(f))
        return sum(1 for row in csv.reader(f) if row)


def shots(bench: Benchmark, files: dict[str, dict[str, str]], num_fewshot: int | None) -> int:
    """The shots to ask for on `bench` (its default when `num_fewshot` is None); ConfigError when a subject's
    few-shot file is missing or too short for the number asked."""
    if num_fewshot is None:
        return bench.shots
    if num_fewshot < 0:
        raise ConfigError(
            Problem(key="--num_fewshot", message=f"{num_fewshot} is negative", fix="0 (zero-shot) or more")
        )
    for subject, split_files in sorted(files.items()):
        if num_fewshot == 0:
            break
        found = [split_files[s] for s in FEWSHOT_SPLITS if s in split_files]
        if not found:
            raise ConfigError(
                Problem(
                    key="--num_fewshot",
                    message=f"{num_fewshot} shots asked, but {bench.name} subject {subject!r} has no "
                    f"few-shot file ({_fewshot_file(bench, subject)} under {DATA_VARIABLE})",
                    fix="provide that file, or --num_fewshot 0 for zero-shot",
                )
            )
        held = examples_in(found[0], bench)
        if held < num_fewshot:
            raise ConfigError(
                Problem(
                    key="--num_fewshot",
                    message=f"{num_fewshot} shots asked, but {found[0]} holds {held} example(s)",
                    fix=f"--num_fewshot {held} or fewer, or add examples to that file",
                )
            )
    return num_fewshot


def _fewshot_file(bench: Benchmark, subject: str) -> str:
    if bench.name == "gsm8k":
        return f"{bench.dev_dir}/train.jsonl"
    return f"{bench.dev_dir}/{subject}{bench.dev_suffix}"
