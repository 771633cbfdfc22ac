"""The runner owns every process of the run: kill -9 of the torchrun agent leaves no worker training."""

from __future__ import annotations

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
