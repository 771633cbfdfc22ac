"""The benchmark commands on the quickstart's real outputs: one quickstart run through the CLI (preprocess,
hf2mg, torchrun DP 2 on CPU, mg2hf), then

- `performance` reads it: throughput by Megatron's formula, step time, TFLOP/s, peak memory, and the step
  time the plan predicted before the run (recorded in .af/summary.json) against the measured one; against a
  baseline of its own figures it is within, against one 25% faster it is a regression (exit 3);
- `eval` evaluates its mg2hf weights with lm-evaluation-harness on the shipped samples (tests/data/eval) on
  CPU, writes mmlu_test/, ceval_validation/, gsm8k_test/ (results.log, results.json), and its accuracy equals
  what the library's own `lm_eval` command gives on the same files.

The eval part needs the eval environment (`sh install.sh eval`, in the README's test command)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import openpyxl
import pytest

from ascendfactory.evaluation import env as eval_env
from tests.conftest import REPO
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
SAMPLES = REPO / "tests" / "data" / "eval"


def run_cli(args: list[str], timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, demo_model) -> Path:
    out = tmp_path_factory.mktemp("bench") / "runs" / "quickstart"
    proc = run_cli(
        [
            "train",
            str(REPO / "cfgs" / "quickstart.yaml"),
            f"--af_output_dir={out}",
            f"--backend_config.training.tokenizer-name-or-path={demo_model}",
            f"--env.MASTER_PORT={free_port()}",
            "--backend_config.training.train-iters=16",
            "--backend_config.training.log-interval=1",
            "--backend_config.training.save-interval=16",
            "--backend_config.training.eval-interval=16",
        ]
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_performance_on_the_quickstart(quickstart, tmp_path):
    summary = json.loads((quickstart / ".af" / "summary.json").read_text())
    predicted = summary["predicted"]
    assert predicted["device"] == "cpu" and predicted["step_s"] > 0 and predicted["workload"]["gbs"] == 16
    assert predicted["in_range"] is True  # the demo model's hidden 64 is the CPU calibration's smallest
    proc = run_cli(["performance", f"--result_dir={quickstart.parent}", f"--output_dir={tmp_path}", "--json"])
    row = json.loads(proc.stdout)["runs"][0]
    run = row["run"]
    # the shipped baseline's CPU quickstart entry is matched; on this shared 2-core machine the run may be
    # slower than that entry, so the exit status follows the verdict its own comparisons give
    assert row["baseline"]["commit"] == "4555a06" and row["baseline"]["device"] == "cpu"
    assert proc.returncode == (3 if row["verdict"] == "regression" else 0), proc.stderr[-2000:]
    assert row["verdict"] == "regression" or run["tokens_per_s_per_device"] >= 0.95 * 13259.6
    assert (run["backend"], run["model"], run["experiment"], run["seq_length"], run["devices"]) == (
        "torch",
        "tiny-demo",
        "quickstart-sft",
        128,
        2,
    )
    assert run["format"] == "megatron" and run["tokens_per_s_per_device"] > 0 and run["step_time_s"] > 0
    # tokens/s/p = GBS x seq / (devices x elapsed ms) x 1000, over the steady-state window
    assert run["tokens_per_s_per_device"] == pytest.approx(16 * 128 / (2 * run["step_time_s"]), rel=1e-6)
    assert run["tflops_per_device"] > 0 and run["peak_memory_mb"] > 0 and run["mfu"] is not None
    # the plan's predicted step time beside the measured one (no range is asserted: the shared machine's
    # load moves the measured step by more than the model's error, docs/time-to-train.md)
    assert run["predicted_step_s"] == pytest.approx(predicted["step_s"])
    assert run["prediction_error"] == pytest.approx(predicted["step_s"] / run["step_time_s"] - 1)
    assert not any(n.startswith("no predicted step time:") for n in run["notes"]), run["notes"]
    # against a baseline of its own figures: within; against one 25% faster: a regression, exit 3
    for factor, code, verdict in ((1.0, 0, "ok"), (1.25, 3, "regression")):
        base = tmp_path / f"base{factor}.yaml"
        base.write_text(
            "baselines:\n  tiny-demo:\n    quickstart-sft:\n      - {device: cpu, seq_length: 128, "
            f"tokens_per_s_per_device: {run['tokens_per_s_per_device'] * factor}, date: '2026-11-27', "
            "commit: test}\n"
        )
        proc = run_cli(
            [
                "performance",
                f"--result_dir={quickstart.parent}",
                f"--baseline={base}",
                f"--output_dir={tmp_path}",
                "--json",
            ]
        )
        assert proc.returncode == code, proc.stderr[-2000:]
        data = json.loads(proc.stdout)
        assert data["runs"][0]["verdict"] == verdict
        book = openpyxl.load_workbook(data["workbook"])
        assert list(book["performance"].iter_rows(min_row=2, values_only=True))[0][-1] == verdict


@pytest.mark.skipif(
    bool(eval_env.missing(eval_env.find_env(os.environ)[0])),
    reason="no eval environment (sh install.sh eval)",
)
def test_eval_on_the_quickstart_weights_equals_lm_evals_own_command(quickstart):
    environ = {"AF_EVAL_DATA_DIR": str(SAMPLES)}
    # the experiment as the run resolved it (its exp-config.yaml): its output folder, its weights
    proc = run_cli(["eval", str(quickstart / "exp-config.yaml"), "--dataset", "all", "--json"], env=environ)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["weights"]["model"] == str(quickstart / "ckpt_converted_mg2hf")
    found = {r["dataset"]: r for r in data["results"]}
    assert set(found) == {"mmlu", "ceval", "gsm8k"}
    for folder in ("mmlu_test", "ceval_validation", "gsm8k_test"):
        assert (quickstart / folder / "results.log").is_file() and (
            quickstart / folder / "results.json"
        ).is_file()
    predictions = json.loads((quickstart / "mmlu_test" / "results.json").read_text())
    assert set(predictions) == {"elementary_mathematics", "high_school_geography"}
    assert len(predictions["elementary_mathematics"]) == 5
    assert set(predictions["elementary_mathematics"].values()) <= {"A", "B", "C", "D"}
    assert not list((quickstart / ".af").glob("eval-*"))  # the staging folder is gone
    # the library's own command on the same files gives the same accuracy
    python = Path(eval_env.find_env(os.environ)[0]) / "bin"
    for dataset, folder, metric in (
        ("mmlu", "mmlu_test", "acc,none"),
        ("ceval", "ceval_validation", "acc,none"),
    ):
        command = shlex.split((quickstart / folder / "lm_eval_command.txt").read_text())
        assert command[0] == "lm_eval"
        own = subprocess.run(
            [str(python / "lm_eval"), *command[1:], "--output_path", str(quickstart / "own" / folder)],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
        )
        assert own.returncode == 0, own.stderr[-3000:]
        result = json.loads(next((quickstart / "own" / folder).rglob("results_*.json")).read_text())
        group = command[command.index("--tasks") + 1]
        assert found[dataset]["accuracy"] == pytest.approx(100 * result["results"][group][metric], abs=0.005)
