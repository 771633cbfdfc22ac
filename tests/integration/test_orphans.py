"""The runner owns every process of the run: kill -9 of the torchrun agent leaves no worker training."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.test_quickstart_e2e import CLI, QUICK, REPO, overrides

pytestmark = pytest.mark.integration


def workers_of(out: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ascendfactory.engine.train" in cmd and str(out) in cmd and "torch.distributed.run" not in cmd:
            found.append(p)
    return found


def is_agent(p: psutil.Process) -> bool:
    try:
        return "torch.distributed.run" in " ".join(p.cmdline())
    except psutil.Error:
        return False


def test_kill_9_of_the_torchrun_agent_stops_its_workers_too(tmp_path, demo_model):
    out = tmp_path / "run"
    args = overrides(out, demo_model, "--train_auto_resume=false")
    args = [a for a in args if not a.startswith("--backend_config.training.train-iters")]
    proc = subprocess.Popen(
        [*CLI, "train", str(QUICK), *args, "--backend_config.training.train-iters=100000"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 240
    agent = None
    while time.monotonic() < deadline and proc.poll() is None:
        agent = next((k for k in psutil.Process(proc.pid).children(recursive=True) if is_agent(k)), None)
        if agent is not None and len(workers_of(out)) == 2:
            break
        time.sleep(0.2)
    assert agent is not None and len(workers_of(out)) == 2, "training did not start"
    time.sleep(3)  # the workers are training
    workers = workers_of(out)
    agent.kill()
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in text.split("error:")[-1]
    time.sleep(1)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    assert workers_of(out) == []
    runner_log = next((out / "logs").glob("*-launcher-node0.txt")).read_text()
    assert "process(es) step train left running" in runner_log


def test_interrupted_during_mg2hf_the_same_command_completes_the_run(tmp_path, demo_model):
    """SIGINT while mg2hf runs: exit 130, nothing left running; the re-run trains nothing, converts, plots
    and summarises the whole run (training_loss.png and the loss figures in summary.json)."""
    out = tmp_path / "run"
    args = [*CLI, "train", str(QUICK), *overrides(out, demo_model)]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        logs = list((out / "logs").glob("*-runner.txt")) if (out / "logs").is_dir() else []
        if logs and "step mg2hf: running" in logs[0].read_text():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before mg2hf"
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, text[-2000:]
    assert "Traceback" not in text and "interrupted by SIGINT" in text
    assert not (out / "training_loss.png").exists()
    assert [
        p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])
    ] == []

    again = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert (out / "training_loss.png").exists() and (
        out / "ckpt_converted_mg2hf" / "model.safetensors"
    ).exists()
    assert summary["loss_start"] is not None and summary["last_step"] == 24
    states = {s["name"]: s["state"] for s in summary["steps"]}
    assert states["mg2hf"] == "done" and states["preprocess"] == "skipped"


def test_kill_9_of_the_cli_stops_its_training_and_the_rerun_continues(tmp_path, demo_model):
    """The runner itself killed: the kernel's parent-death signal stops torchrun, which stops its workers;
    the same command then resumes, finding nothing of the dead run alive (it would stop it first)."""
    out = tmp_path / "run"
    args = [*CLI, "train", str(QUICK), *overrides(out, demo_model)]
    args = [a for a in args if not a.startswith("--backend_config.training.train-iters")]
    args.append("--backend_config.training.train-iters=60")
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if (
            len(workers_of(out)) == 2
            and (out / "saved_checkpoints" / "latest_checkpointed_iteration.txt").exists()
        ):
            break
        time.sleep(0.2)
    assert len(workers_of(out)) == 2, "training did not start"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 60
    while workers_of(out) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert workers_of(out) == [], "the workers outlived the killed runner"
    again = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert summary["last_step"] == 60
