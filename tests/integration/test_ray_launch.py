"""The Ray launch through the real CLI and runner, with a backend defined in the tests (`ray_contract/`).

Two `train` invocations (NODE_RANK 0 and 1 over 127.0.0.1) form one Ray cluster and run a real driver on
both nodes; when one node dies, the other exits with a clear error. Needs ray (`install.sh --dev`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.support.ports import free_port

pytest.importorskip("ray")
pytestmark = pytest.mark.integration

CLI = [sys.executable, str(Path(__file__).parent / "ray_contract" / "cli.py")]


def experiment(tmp_path: Path, name: str, *, nnodes: int, node_rank: int, port: int, **options) -> Path:
    out = tmp_path / f"{name}-node{node_rank}"
    cfg = {
        "backend": "ray-contract",
        "af_model_name": "qwen2.5-0.5b",
        "exp_name": name,
        "af_output_dir": str(out),
        "shared_filesystem": False,
        "node_wait_timeout_s": 90,
        "env": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "NNODES": nnodes, "NODE_RANK": node_rank},
        "backend_config": options,
    }
    path = tmp_path / f"{name}-node{node_rank}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*CLI, "train", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "AF_MONITOR_INTERVAL_S": "1"},
    )


def kill_node(proc: subprocess.Popen) -> None:
    """A node dies: every process of it, whatever session the launchers moved them to, at once."""
    procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass


def node_log(out: Path, node_rank: int, nnodes: int) -> str:
    (log,) = (out / "logs").glob(f"raycontract-*-ray-node{node_rank}-of-{nnodes}.txt")
    return log.read_text()


def no_ray_process_left(port: int) -> bool:
    """No process of the cluster on `port` is left (other Ray clusters on the machine are not ours)."""
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if ("raylet" in cmd or "gcs_server" in cmd or "ray start" in cmd) and re.search(
            rf"[:= ]{port}\b", cmd
        ):
            return False
    return True


def test_dry_run_shows_the_ray_node_commands(tmp_path):
    exp = experiment(tmp_path, "dry", nnodes=2, node_rank=1, port=6123)
    proc = subprocess.run(
        [*CLI, "train", str(exp), "--dry-run", "--format", "json"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    (train,) = [s for s in plan["steps"] if s["role"] == "train"]
    assert train["launch"] == "ray"
    assert train["argv"][1].endswith("programs/ray_node.py")
    assert train["argv"][2:5] == ["worker", "--address", "127.0.0.1:6123"]
    logs = plan["logs"]  # Plan.to_dict shows the log naming and loss keys too (issue 28)
    assert {k: logs[k] for k in ("format", "loss_rank", "throughput")} == {
        "format": "verl",
        "loss_rank": "first",
        "throughput": "verl",
    }
    assert logs["naming"]["run_log"] == "ray-node{node_rank}-of-{nnodes}"
    assert plan["checkpoints"] is None


def test_two_cli_invocations_form_one_ray_cluster(tmp_path):
    port = free_port()
    head = start(experiment(tmp_path, "pair", nnodes=2, node_rank=0, port=port, steps=6))
    worker = start(experiment(tmp_path, "pair", nnodes=2, node_rank=1, port=port, steps=6))
    head_out, _ = head.communicate(timeout=240)
    worker_out, _ = worker.communicate(timeout=60)
    assert head.returncode == 0, head_out[-4000:]
    assert worker.returncode == 0, worker_out[-4000:]

    out0, out1 = tmp_path / "pair-node0", tmp_path / "pair-node1"
    log0 = node_log(out0, 0, 2)
    assert "cluster ready: 2 of 2 nodes" in log0
    assert "on 2 node(s)" in log0  # the driver's tasks ran on both nodes
    assert "the driver on the head succeeded" in node_log(out1, 1, 2)
    # The first rank's log holds the loss: node 0 summarises and plots, node 1 has nothing to plot.
    summary0 = json.loads((out0 / ".af" / "summary.json").read_text())
    assert summary0["first_step"] == 1 and summary0["last_step"] == 6
    assert summary0["loss_end"] < summary0["loss_start"]
    assert summary0["throughput"]["formula"].startswith("mean(perf/throughput)")
    assert (out0 / "training_loss.png").stat().st_size > 0
    assert not (out1 / "training_loss.png").exists()
    assert not (out0 / "saved_checkpoints").exists()
    # The device monitor follows the node's whole Ray tree (raylet, its workers, the driver), not only
    # the node program (~20 MB on its own).
    (info,) = (out0 / "logs").glob("raycontract-*-npu_info-R0.txt")
    rss = [
        float(line.split("rss_mb ")[1].split()[0])
        for line in info.read_text().splitlines()
        if "rss_mb" in line
    ]
    assert rss and max(rss) > 200
    assert no_ray_process_left(port)


@pytest.mark.parametrize(
    "dies", [1, pytest.param(0, marks=pytest.mark.slow)], ids=["worker-dies", "head-dies"]
)  # head-dies: slow
def test_a_dead_node_stops_the_other_with_a_clear_error(tmp_path, dies):
    port = free_port()
    procs = [
        start(experiment(tmp_path, "kill", nnodes=2, node_rank=r, port=port, steps=200, step_sleep_s=1.0))
        for r in (0, 1)
    ]
    log0 = tmp_path / "kill-node0" / "logs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for training to run on both nodes
        logs = list(log0.glob("raycontract-*-ray-node0-of-2.txt"))
        if logs and "step:2 " in logs[0].read_text():
            break
        assert all(p.poll() is None for p in procs), procs[0].communicate()[0][-3000:]
        time.sleep(1)
    else:
        pytest.fail("training did not start on the two nodes")
    kill_node(procs[dies])
    survivor = procs[1 - dies]
    t0 = time.monotonic()
    text, _ = survivor.communicate(timeout=120)
    took = time.monotonic() - t0
    procs[dies].wait(10)
    assert survivor.returncode != 0
    # The console ends with one error naming the step, its exit code and the node's log, whose last line
    # says what happened to the cluster.
    assert "error: step 'train' failed with exit code" in text
    log = node_log(tmp_path / f"kill-node{1 - dies}", 1 - dies, 2)
    if dies == 1:
        assert "node(s) left the Ray cluster while the driver ran" in log
    else:
        assert f"lost the head at 127.0.0.1:{port}" in log
    assert "step train failed" in text
    assert took < 90, f"the surviving node took {took:.0f} s to stop"
    time.sleep(2)
    assert no_ray_process_left(port)


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)], ids=["sigint", "sigterm"]
)  # sigterm: slow (the runner's SIGTERM handling has its own torchrun test in CI)
def test_an_interrupt_stops_the_cluster_this_run_started_and_nothing_else(tmp_path, sig):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a bystander
    port = free_port()
    proc = start(experiment(tmp_path, "stop", nnodes=1, node_rank=0, port=port, steps=200, step_sleep_s=1.0))
    logs = tmp_path / "stop-node0" / "logs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = list(logs.glob("raycontract-*-ray-node0-of-1.txt"))
        if found and "step:1 " in found[0].read_text():
            break
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        time.sleep(0.5)
    proc.send_signal(sig)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, text[-3000:]
    assert f"interrupted by {signal.Signals(sig).name}" in text
    assert no_ray_process_left(port)
    assert other.poll() is None
    other.kill()
