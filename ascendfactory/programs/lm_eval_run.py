"""Evaluate HF weights on local MMLU / C-Eval / GSM8K files with lm-evaluation-harness (run in the eval
environment, `sh install.sh eval`; imports nothing of ascendfactory).

    python lm_eval_run.py SPEC.json

SPEC (written by `ascendfactory.evaluation`): `model` (an HF folder), `peft` (a LoRA adapter folder or
null), `device` (cpu, cuda, cuda:0, npu:0, ...), `batch_size`, `tasks`: a list of {`dataset` (mmlu | ceval |
gsm8k), `out` (its results folder), `shots`, `subjects`: {subject: {split: file}} (GSM8K: one subject
`test`)}. For each dataset the program writes lm-eval task files into `<out>/tasks/` that take the
library's own task definitions (`include:` of lm_eval/tasks/mmlu/default/mmlu_<subject>.yaml, ceval/
ceval-valid_<subject>.yaml, gsm8k/gsm8k.yaml: their prompts, few-shot sampling, filters and metrics) and
point them at the local files (`dataset_path: csv` / `json` with `data_files`: nothing is fetched). A
subject lm-eval does not know takes the dataset's template with the same description the library writes.
One `simple_evaluate` runs every task (the model loads once); then each `<out>/` gets

- `results.json`: each subject's predictions by question index (`{"subject": {"0": "B", ...}}`, the shape
  LLaMA-Factory's evaluator writes; GSM8K: the extracted answers), and `results.log`: the accuracy in percent,
  `Average` (all questions, as lm-eval's group aggregates by size) then each subject;
- `lm_eval_results.json`: lm-eval's own results (versions, configs, the aggregated metrics);
- `lm_eval_command.txt`: the library's own command line that evaluates the same files
  (`lm_eval --include_path <out>/tasks --tasks ...`), which gives the same accuracy.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

MMLU_COLUMNS = ["question", "A", "B", "C", "D", "answer"]
LETTERS = ["A", "B", "C", "D"]


def read_rows(path: str, dataset: str) -> list[dict[str, Any]]:
    """One local file's questions as lm-eval's task fields, every cell as text: MMLU CSV rows (no header:
    question, A, B, C, D, answer letter) -> question, choices, answer index (the fields of lm-eval's MMLU
    tasks, cais/mmlu's); C-Eval CSV rows by their header (question, A-D, answer, explanation); GSM8K JSONL
    as it is."""
    if dataset == "gsm8k":
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    with open(path, encoding="utf-8", newline="") as f:
        if dataset == "ceval":
            return [dict(row) for row in csv.DictReader(f)]
        rows = []
        for n, row in enumerate(csv.reader(f), 1):
            if len(row) != len(MMLU_COLUMNS):
                raise SystemExit(f"{path}:{n}: expected 6 columns (question,A,B,C,D,answer), got {len(row)}")
            question, *choices, answer = row
            if answer.strip() not in LETTERS:
                raise SystemExit(f"{path}:{n}: answer {answer!r} is not one of A, B, C, D")
            rows.append({"question": question, "choices": choices, "answer": LETTERS.index(answer.strip())})
        return rows


def as_jsonl(
    files: dict[str, str], dataset: str, folder: Path, stem: str
) -> tuple[dict[str, str], dict[str, int]]:
    """Each split's file rewritten as JSONL of text fields under `folder` (what the task files name), and
    each split's number of rows."""
    folder.mkdir(parents=True, exist_ok=True)
    out, counts = {}, {}
    for split, path in files.items():
        target = folder / f"{stem}_{split}.jsonl"
        rows = read_rows(path, dataset)
        with open(target, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        out[split], counts[split] = str(target), len(rows)
    return out, counts


def _tasks_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).resolve().parent


def _yaml_text(data: dict[str, Any]) -> str:
    """YAML of `data`, one key a line (each value as JSON, which is YAML)."""
    return "".join(f"{k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in data.items())


def _subject_words(subject: str) -> str:
    return subject.replace("_", " ")


def write_tasks(task: dict[str, Any], lib: Path) -> tuple[str, list[str]]:
    """The task files of one dataset; returns (the group or task name to run, the per-subject task names)."""
    dataset, out = task["dataset"], Path(task["out"])
    folder = out / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    shots = int(task["shots"])  # at most the examples the few-shot split has (MMLU's dev: 5 per subject)
    names = []
    if dataset == "gsm8k":
        files, counts = as_jsonl(task["subjects"]["test"], dataset, folder / "data", "gsm8k")
        data: dict[str, Any] = {
            "include": str(lib / "gsm8k" / "gsm8k.yaml"),
            "task": "af_gsm8k",
            "tag": [],
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": files},
            "num_fewshot": min(shots, counts.get("train", 0)),
        }
        if "train" not in files:
            data.update(training_split=None, fewshot_split=None)
        (folder / "af_gsm8k.yaml").write_text(_yaml_text(data), encoding="utf-8")
        return "af_gsm8k", ["af_gsm8k"]
    for subject, given in sorted(task["subjects"].items()):
        name = f"af_{dataset}_{subject}"
        files, counts = as_jsonl(given, dataset, folder / "data", subject)
        if dataset == "mmlu":
            own = lib / "mmlu" / "default" / f"mmlu_{subject}.yaml"
            data = {
                "include": str(own if own.is_file() else lib / "mmlu" / "default" / "_default_template_yaml"),
                "task": name,
                "tag": [],
                "dataset_path": "json",
                "dataset_name": None,
                "dataset_kwargs": {"data_files": files},
                "num_fewshot": min(shots, counts.get("dev", 0)),
            }
            if not own.is_file():
                data["description"] = (
                    "The following are multiple choice questions (with answers) about "
                    f"{_subject_words(subject)}.\n\n"
                )
        else:
            own = lib / "ceval" / f"ceval-valid_{subject}.yaml"
            data = {
                "include": str(own if own.is_file() else lib / "ceval" / "_default_ceval_yaml"),
                "task": name,
                "tag": [],
                "dataset_path": "json",
                "dataset_name": None,
                "dataset_kwargs": {"data_files": files},
                "num_fewshot": min(shots, counts.get("dev", 0)),
            }
            if not own.is_file():
                data["description"] = (
                    f"以下是中国关于{_subject_words(subject)}的单项选择题，请选出其中的正确答案。\n\n"
                )
        if "dev" not in files:
            data["fewshot_split"] = None
        (folder / f"{name}.yaml").write_text(_yaml_text(data), encoding="utf-8")
        names.append(name)
    group = f"af_{dataset}"
    group_cfg = {
        "group": group,
        "task": names,
        "aggregate_metric_list": [{"metric": "acc", "aggregation": "mean", "weight_by_size": True}],
        "metadata": {"version": 1.0},
    }
    (folder / f"{group}.yaml").write_text(_yaml_text(group_cfg), encoding="utf-8")
    return group, names


def _prediction(sample: dict[str, Any], dataset: str) -> str:
    if dataset == "gsm8k":
        resp = sample.get("filtered_resps") or [""]
        return str(resp[0] if isinstance(resp, list) else resp)
    scores = [r[0] if isinstance(r, (list, tuple)) else r for r in sample.get("filtered_resps") or []]
    return LETTERS[max(range(len(scores)), key=lambda i: float(scores[i]))] if scores else ""


def _score(sample: dict[str, Any], dataset: str) -> float:
    return float(sample.get("exact_match" if dataset == "gsm8k" else "acc", 0.0))


def write_results(task: dict[str, Any], group: str, names: list[str], res: dict[str, Any]) -> None:
    dataset, out = task["dataset"], Path(task["out"])
    results, samples = res["results"], res.get("samples", {})
    predictions: dict[str, dict[str, str]] = {}
    per_subject: dict[str, float] = {}
    for name in names:
        subject = "test" if dataset == "gsm8k" else name.removeprefix(f"af_{dataset}_")
        docs = sorted(samples.get(name, []), key=lambda s: s["doc_id"])
        if (
            dataset == "gsm8k"
        ):  # the strict-match filter (GSM8K's own answer format), as lm-eval reports first
            docs = [s for s in docs if s.get("filter", "strict-match") == "strict-match"]
        predictions[subject] = {str(s["doc_id"]): _prediction(s, dataset) for s in docs}
        if docs:
            per_subject[subject] = 100 * sum(_score(s, dataset) for s in docs) / len(docs)
    if dataset == "gsm8k":
        average = 100 * float(results[group]["exact_match,strict-match"])
    else:
        average = 100 * float(results[group]["acc,none"])
    lines = [f"{'Average':>15}: {average:.2f}"]
    lines += [f"{s:>15}: {v:.2f}" for s, v in per_subject.items() if dataset != "gsm8k"]
    (out / "results.json").write_text(json.dumps(predictions, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "results.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    own = {k: v for k, v in res.items() if k not in ("samples",)}
    (out / "lm_eval_results.json").write_text(
        json.dumps(own, indent=2, default=str, ensure_ascii=False), "utf-8"
    )
    print("\n".join(lines), flush=True)


def model_args(spec: dict[str, Any]) -> str:
    parts = [f"pretrained={spec['model']}", "dtype=auto"]
    if spec.get("peft"):
        parts.append(f"peft={spec['peft']}")
    return ",".join(parts)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    lib = _tasks_dir()
    runs = [(task, *write_tasks(task, lib)) for task in spec["tasks"]]
    include = [str(Path(task["out"]) / "tasks") for task, _, _ in runs]
    manager = TaskManager(include_path=include, include_defaults=False)
    res = simple_evaluate(
        model="hf",
        model_args=model_args(spec),
        tasks=[group for _, group, _ in runs],
        device=spec["device"],
        batch_size=spec.get("batch_size", 1),
        task_manager=manager,
        log_samples=True,
        random_seed=0,
        numpy_random_seed=1234,
        torch_random_seed=1234,
        fewshot_random_seed=1234,
    )
    if res is None:  # a non-zero rank of a distributed run
        return 0
    for task, group, names in runs:
        write_results(task, group, names, res)
        command = [
            "lm_eval",
            "--model",
            "hf",
            "--model_args",
            model_args(spec),
            "--include_path",
            str(Path(task["out"]) / "tasks"),
            "--tasks",
            group,
            "--device",
            spec["device"],
            "--batch_size",
            str(spec.get("batch_size", 1)),
        ]
        text = shlex.join(command) + "\n"
        (Path(task["out"]) / "lm_eval_command.txt").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or not re.search(r"\.json$", sys.argv[1]):
        print("usage: python lm_eval_run.py SPEC.json", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
