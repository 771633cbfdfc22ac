"""A user's own sft data whose answers mostly start past `seq-length: 64` (audit row 18), end to end on the
embedded backend: the data-fit step refuses with the counts; with `check_data_fit: false` the trainer stops
at the first NaN iteration, naming it, and the CLI exits non-zero without an auto-resume retry; with the NaN
check off as well, a run with a few NaN iterations finishes and its summary and log show them, and one with
mostly NaN iterations fails as having trained nothing."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
QUICK = REPO / "cfgs" / "quickstart.yaml"
LONG_PROMPT = " ".join(f"Consider item number {i} of the list carefully." for i in range(20))


def own_records(path: Path, long: int = 30) -> Path:
    """50 alpaca records: the first `long` (30) have a prompt far past 64 tokens, the others a short one."""
    rows = [
        {
            "instruction": LONG_PROMPT if i < long else f"What is {i} plus 1?",
            "input": "",
            "output": f"{i + 1}.",
        }
        for i in range(50)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tmp_path: Path, model: Path, *extra: str, long: int = 30) -> subprocess.CompletedProcess:
    data = own_records(tmp_path / "own.jsonl", long)
    argv = [
        "train",
        str(QUICK),
        f"--af_output_dir={tmp_path / 'run'}",
        f"--backend_config.preprocess_data.input={data}",
        f"--backend_config.training.tokenizer-name-or-path={model}",
        f"--env.MASTER_PORT={free_port()}",
        "--env.NPUS_PER_NODE=1",
        "--ckpt_load_type=0",
        "--convert_mg2hf_at_last=false",
        "--backend_config.training.seq-length=64",
        "--backend_config.training.micro-batch-size=1",
        "--backend_config.training.global-batch-size=2",
        "--backend_config.training.train-iters=8",
        "--backend_config.training.log-interval=1",
        "--backend_config.training.eval-iters=0",
        "--backend_config.training.split=100,0,0",
        *extra,
    ]
    return subprocess.run([*CLI, *argv], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_the_data_fit_step_refuses_before_training(tmp_path, demo_model):
    proc = run(tmp_path, demo_model)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert (
        "data-fit" in text
        and "30 of 50 samples (60%) have every answer token at or past seq-length 64" in text
    )
    assert not (tmp_path / "run" / "saved_checkpoints").exists()  # train never started


def test_with_the_check_off_the_trainer_stops_at_the_first_nan_iteration(tmp_path, demo_model):
    proc = run(tmp_path, demo_model, "--check_data_fit=false")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    logs = tmp_path / "run" / "logs"
    assert "WARNING: 30 of 50 samples" in next(logs.glob("*-data-fit.txt")).read_text()
    assert "data-fit: WARNING: 30 of 50 samples" in text  # on the console too
    assert "found NaN in the loss" in text and "has no label tokens" in text
    runner_log = next(logs.glob("*runner*")).read_text()
    assert "auto-resume stops" in runner_log and "auto-resume 1/" not in runner_log
    assert "step train: failed" in runner_log and "step train: done" not in runner_log
    named = int(re.search(r"iteration (\d+): found NaN in the loss", text).group(1))
    log = next(logs.glob("*run_log-N1-0.txt")).read_text()
    logged = [x for x in log.splitlines() if " iteration " in x and "consumed samples" in x]
    assert len(logged) == named - 1  # log-interval 1: every earlier iteration, none after
    assert all("number of nan iterations:   0" in x and "lm loss: nan" not in x for x in logged)


def test_training_through_nan_shows_them_in_the_log_summary_and_plot(tmp_path, demo_model):
    """10 of 50 samples train on nothing: some iterations are NaN, fewer than half; the run finishes."""
    proc = run(
        tmp_path,
        demo_model,
        "--check_data_fit=false",
        "--backend_config.training.no-check-for-nan-in-loss-and-grad=true",
        "--backend_config.training.train-iters=16",
        long=10,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    summary = json.loads((tmp_path / "run" / ".af" / "summary.json").read_text())
    assert 0 < summary["nan_iterations"] <= 8 and "WARNING: NaN loss in" in text
    log = next((tmp_path / "run" / "logs").glob("*run_log-N1-0.txt")).read_text()
    lines = [x for x in log.splitlines() if " iteration " in x and "consumed samples" in x]
    assert len(lines) == 16 and all("lm loss:" in x for x in lines)  # never dropped
    assert any("lm loss: nan" in x for x in lines)
    assert (tmp_path / "run" / "training_loss.png").exists()


def test_training_mostly_nan_fails_whatever_the_nan_checks_say(tmp_path, demo_model):
    """Audit A1: both guards off, most iterations NaN: the train step fails (exit 1, 'trained nothing'),
    not 'done' with exit 0; the log keeps every line."""
    proc = run(
        tmp_path,
        demo_model,
        "--check_data_fit=false",
        "--backend_config.training.no-check-for-nan-in-loss-and-grad=true",
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-3000:]
    assert "error: step 'train' trained nothing" in text and "more than 50% of the iterations" in text
    assert "run finished" not in text and "auto-resume" not in text
    log = next((tmp_path / "run" / "logs").glob("*run_log-N1-0.txt")).read_text()
    lines = [x for x in log.splitlines() if " iteration " in x and "consumed samples" in x]
    assert len(lines) == 8 and sum("lm loss: nan" in x for x in lines) > 4
