"""The local files each benchmark reads, under `AF_EVAL_DATA_DIR` (default `./eval_data`), in each
benchmark's own distribution layout (README, "Evaluating the trained weights"; tests/data/eval holds tiny
samples):

    mmlu/data/test/<subject>_test.csv   + mmlu/data/dev/<subject>_dev.csv     (Hendrycks' data.tar; no header)
    ceval/val/<subject>_val.csv         + ceval/dev/<subject>_dev.csv         (ceval-exam; with a header)
    gsm8k/test.jsonl                    + gsm8k/train.jsonl                   (grade-school-math)

Nothing is downloaded: a missing folder or file is a `ConfigError` naming the path to provide. The dev /
train files give the few-shot examples (5 shots, at most as many as the file has); without them the
benchmark runs zero-shot and says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ascendfactory.errors import ConfigError, Problem

DATA_VARIABLE = "AF_EVAL_DATA_DIR"


@dataclass(frozen=True)
class Benchmark:
    name: str
    out_dir: str  # the results folder the product writes
    test_glob: str  # relative to the data root
    test_suffix: str  # removed from a file name to give the subject
    test_split: str
    dev_dir: str
    dev_suffix: str
    shots: int
    source: str


BENCHMARKS: dict[str, Benchmark] = {
    "mmlu": Benchmark(
        "mmlu",
        "mmlu_test",
        "mmlu/data/test/*_test.csv",
        "_test.csv",
        "test",
        "mmlu/data/dev",
        "_dev.csv",
        5,
        "MMLU (Hendrycks et al., data.tar: data/test/<subject>_test.csv, no header)",
    ),
    "ceval": Benchmark(
        "ceval",
        "ceval_validation",
        "ceval/val/*_val.csv",
        "_val.csv",
        "val",
        "ceval/dev",
        "_dev.csv",
        5,
        "C-Eval (ceval-exam: val/<subject>_val.csv with header id,question,A,B,C,D,answer,explanation)",
    ),
    "gsm8k": Benchmark(
        "gsm8k",
        "gsm8k_test",
        "gsm8k/test.jsonl",
        ".jsonl",
        "test",
        "gsm8k",
        ".jsonl",
        5,
        "GSM8K (grade-school-math: test.jsonl, question / answer ending in '#### <number>')",
    ),
}


def data_root(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(DATA_VARIABLE) or "eval_data").expanduser().resolve()


def selected(dataset: str) -> list[Benchmark]:
    if dataset == "all":
        return list(BENCHMARKS.values())
    if dataset not in BENCHMARKS:
        raise ConfigError(
            Problem(
                key="--dataset",
                message=f"unknown dataset {dataset!r}",
                fix="one of: all, " + ", ".join(BENCHMARKS),
            )
        )
    return [BENCHMARKS[dataset]]


def files_of(bench: Benchmark, root: Path) -> dict[str, dict[str, str]]:
    """{subject: {split: file}} of one benchmark under `root`; ConfigError naming what to provide."""
    tests = sorted(root.glob(bench.test_glob))
    if not tests:
        raise ConfigError(
            Problem(
                key=DATA_VARIABLE,
                message=f"no {bench.name} test file: {root / bench.test_glob} matches nothing",
                fix=f"put {bench.source} there, or point {DATA_VARIABLE} at the folder that holds "
                f"{bench.test_glob.split('/')[0]}/",
            )
        )
    out: dict[str, dict[str, str]] = {}
    for path in tests:
        if bench.name == "gsm8k":
            files = {"test": str(path)}
            train = root / "gsm8k" / "train.jsonl"
            if train.is_file():
                files["train"] = str(train)
            return {"test": files}
        subject = path.name.removesuffix(bench.test_suffix)
        files = {bench.test_split: str(path)}
        dev = root / bench.dev_dir / f"{subject}{bench.dev_suffix}"
        if dev.is_file():
            files["dev"] = str(dev)
        out[subject] = files
    return out


def zero_shot(files: dict[str, dict[str, str]]) -> list[str]:
    """The subjects without few-shot examples (no dev / train file)."""
    return [s for s, f in files.items() if "dev" not in f and "train" not in f]
