"""Run lm-evaluation-harness on a run's weights: check everything first (the environment, the data files,
the weights), then one subprocess of `programs/lm_eval_run.py` in the eval environment, its output teed to
`<output>/logs/<stamp>-eval.txt`. It writes into a staging folder (`<output>/.af/eval-<pid>/`); only a
finished evaluation replaces `<output>/mmlu_test/`, `ceval_validation/`, `gsm8k_test/` (a failed or
interrupted one leaves the previous results as they were and no half-written folder).

The device: `cpu` for `accelerator: cpu`, else the node's accelerator as the device files show it (`npu:0`,
`cuda:0`; `config.devices.detect_accelerator`), else `cpu`. The evaluation sees the first visible device.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendfactory.backends.environment import python_of
from ascendfactory.errors import ConfigError, Problem, StageFailedError
from ascendfactory.evaluation import datasets, env, options
from ascendfactory.evaluation.weights import Weights
from ascendfactory.output_tree import OutputTree

PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "lm_eval_run.py"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass
class EvalResult:
    dataset: str
    folder: str
    accuracy: float | None  # percent: Average of results.log
    subjects: dict[str, float] = field(default_factory=dict)
    zero_shot: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "folder": self.folder,
            "accuracy": self.accuracy,
            "subjects": self.subjects,
            "zero_shot_subjects": self.zero_shot,
        }


def device_for(cpu: bool) -> str:
    if cpu:
        return "cpu"
    from ascendfactory.config.devices import detect_accelerator

    kind = detect_accelerator()
    return {"npu": "npu:0", "cuda": "cuda:0"}.get(kind, "cpu")


def read_log(path: Path) -> tuple[float | None, dict[str, float]]:
    """`results.log`'s Average and subjects (`<name>: <percent>` lines)."""
    average, subjects = None, {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, _, value = line.rpartition(":")
        try:
            number = float(value)
        except ValueError:
            continue
        if name.strip() == "Average":
            average = number
        else:
            subjects[name.strip()] = number
    return average, subjects


def evaluate(
    weights: Weights,
    dataset: str,
    output_dir: str,
    *,
    cpu: bool,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] = print,
    batch_size: int | str = 1,
    num_fewshot: int | None = None,
) -> list[EvalResult]:
    """Evaluate `weights` on `dataset`; `num_fewshot` None keeps each benchmark's default shots
    (`evaluation.options`)."""
    batch_size = options.batch_size(batch_size)
    environ = dict(os.environ if environ is None else environ)
    prefix, where = env.find_env(environ)
    lacking = env.missing(prefix)
    if lacking:
        raise ConfigError(
            Problem(
                key="eval environment",
                message=f"{prefix} ({where}) lacks {', '.join(lacking)}",
                fix=env.ENV.install_fix,
            )
        )
    root = datasets.data_root(environ)
    benches = datasets.selected(dataset)
    found = {b.name: datasets.files_of(b, root) for b in benches}  # every missing file named before starting
    shots = {b.name: options.shots(b, found[b.name], num_fewshot) for b in benches}
    out = Path(output_dir).resolve()
    tree = OutputTree(str(out))
    staging = Path(tree.records(f"eval-{os.getpid()}"))
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    spec = {
        "model": weights.model,
        "peft": weights.adapter,
        "device": device_for(cpu),
        "batch_size": batch_size,
        "tasks": [
            {
                "dataset": b.name,
                "out": str(staging / b.out_dir),
                "shots": shots[b.name],
                "subjects": found[b.name],
            }
            for b in benches
        ],
    }
    spec_path = staging / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    logs = Path(tree.logs_dir)
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{time.strftime('%Y%m%d_%H%M%S')}-eval.txt"
    argv = [python_of(prefix), str(PROGRAM), str(spec_path)]
    say(
        f"evaluating {weights.model}{' + adapter ' + weights.adapter if weights.adapter else ''} "
        f"({weights.source}) on {', '.join(b.name for b in benches)} with lm-eval on {spec['device']}"
    )
    say(f"log: {log_path}")
    try:
        code = _run(argv, {**environ, **OFFLINE}, log_path)
        if code:
            raise StageFailedError("eval", code, str(log_path), tail=_tail(log_path))
        results = []
        for b in benches:
            made = staging / b.out_dir
            if not (made / "results.log").is_file():
                raise StageFailedError("eval", 1, str(log_path), tail=f"no {b.out_dir}/results.log written")
            final = out / b.out_dir
            if final.exists():
                shutil.rmtree(final)
            os.replace(made, final)
            _repoint(final, made)
            average, subjects = read_log(final / "results.log")
            zero_shot = datasets.zero_shot(found[b.name])  # by default only: the user's 0 is no shortfall
            results.append(
                EvalResult(b.name, str(final), average, subjects, zero_shot if num_fewshot is None else [])
            )
        return results
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _repoint(final: Path, staged: Path) -> None:
    """The task files and the command name the staging folder; after the move they name the final one, so
    `lm_eval_command.txt` runs as written."""
    for path in [final / "lm_eval_command.txt", *(final / "tasks").glob("*.yaml")]:
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            path.write_text(text.replace(str(staged), str(final)), encoding="utf-8")


def _run(argv: list[str], environ: dict[str, str], log_path: Path) -> int:
    """The program with its output teed into the log (and the console's stderr, for its progress bars)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ)
        stream = proc.stdout
        assert stream is not None
        try:
            for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
                log.write(chunk)
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(timeout=30)
            raise
        return proc.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
