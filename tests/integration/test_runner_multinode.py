"""Two runner invocations over 127.0.0.1 forming one torchrun job (NNODES=2, NODE_RANK 0 and 1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ascendfactory.plan import Role  # noqa: E402
from tests.support import runner_fakes as fakes

pytestmark = pytest.mark.integration


def _start_node(
    tmp_path: Path,
    node_rank: int,
    port: int,
    *,
    iters: int,
    sleep: float,
    timeout_s: float = 60,
    env: dict[str, str] | None = None,
    auto_resume: bool = False,
) -> subprocess.Popen:
    out = tmp_path / "shared"  # both nodes see the same af_output_dir (shared_filesystem: true)
    trainer = fakes.write_script(tmp_path, "trainer.py", fakes.FAKE_TRAINER)
    writer = fakes.write_script(tmp_path, "writer.py", fakes.WRITER)
    conv = str(out / "converted_weight_TP1PP1")
    hf2mg = fakes.proc_step(
        "hf2mg", Role.CONVERT, [sys.executable, writer, conv], outputs=[conv], only_node0=True
    )
    train = fakes.train_step(
        trainer,
        out,
        iters=iters,
        save_interval=2,
        nproc=1,
        nnodes=2,
        node_rank=node_rank,
        port=port,
        sleep=sleep,
    )
    plot = fakes.plot_step(out, None if node_rank == 1 else "the loss is printed by the last rank")
    spec = {
        "config": {
            "af_model_name": "m",
            "exp_name": "e",
            "af_output_dir": str(out),
            "env": {"NNODES": 2, "NODE_RANK": node_rank, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
            "node_wait_timeout_s": timeout_s,
            "train_auto_resume": auto_resume,
            "auto_resume": {"backoff_s": 0},
        },
        "steps": [fakes.step_spec(s) for s in (hf2mg, train, plot)],
        "facts": {"world_size": 2},
        "root": str(Path(fakes.__file__).resolve().parents[2]),
        "final_iteration": iters,  # re-plans as a Megatron backend would: complete at train-iters
    }
    path = tmp_path / f"node{node_rank}.json"
    path.write_text(json.dumps(spec))
    driver = fakes.write_script(tmp_path, "driver.py", fakes.DRIVER)
    env = {**os.environ, "AF_FAKE_DIST": "1", "AF_MONITOR_INTERVAL_S": "1", **(env or {})}
    return subprocess.Popen(
        [sys.executable, driver, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def test_two_nodes_form_one_job_and_node1_waits_for_node0_steps(tmp_path):
    port = fakes.free_port()
    node1 = _start_node(tmp_path, 1, port, iters=4, sleep=0.1)  # starts first: it must wait for hf2mg
    time.sleep(1.0)
    node0 = _start_node(tmp_path, 0, port, iters=4, sleep=0.1)
    out0, out1 = (p.communicate(timeout=240)[0].decode() for p in (node0, node1))
    assert node0.returncode == 0, out0
    assert node1.returncode == 0, out1
    shared = tmp_path / "shared"
    assert "step hf2mg: waited" in out1 and "wrote part0" not in out1
    last_rank = list((shared / "logs").glob("*-run_log-N2-1.txt"))
    assert any("iteration        4/       4" in p.read_text() for p in last_rank)
    assert list((shared / "logs").glob("*-run_log-N2-0.txt")) and (shared / "training_loss.png").exists()


def _kill_tree(proc: subprocess.Popen) -> None:
    procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass


def test_a_killed_peer_makes_the_other_node_exit_with_an_error_in_time(tmp_path):
    port = fakes.free_port()
    timeout_s = 30
    node0 = _start_node(tmp_path, 0, port, iters=10_000, sleep=0.2, timeout_s=timeout_s)
    node1 = _start_node(tmp_path, 1, port, iters=10_000, sleep=0.2, timeout_s=timeout_s)
    logs = tmp_path / "shared" / "logs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rank1 = list(logs.glob("*-run_log-N2-1.txt")) if logs.exists() else []
        if rank1 and "iteration        3/" in rank1[0].read_text():
            break
        time.sleep(0.2)
    else:
        pytest.fail("the two nodes never started training together")
    _kill_tree(node1)  # the whole machine of node 1 dies: runner, torchrun and worker
    t0 = time.monotonic()
    out0 = node0.communicate(timeout=timeout_s + 60)[0].decode()
    took = time.monotonic() - t0
    node1.wait(timeout=10)
    print(f"node 0 exited {took:.1f}s after node 1 died")
    assert node0.returncode not in (0, None)
    assert "step 'train' failed" in out0
    assert took < timeout_s, f"node 0 took {took:.0f}s to notice"


def test_a_node_failing_after_the_last_step_ends_complete_without_waiting_for_the_others(tmp_path):
    """Node 0's rank aborts in its teardown after the last save (exit 134) while node 1 finished: auto-resume
    asks whether the run is complete (the last iteration saved, node 1's outcome) and ends the step complete,
    instead of restarting node 0 alone to wait node_wait_timeout_s for a peer that has left, every attempt."""
    port = fakes.free_port()
    timeout_s = 90
    teardown_abort = {"FAKE_EXIT_AT_END": "134", "FAKE_FAIL_RANK": "0"}
    node0 = _start_node(
        tmp_path, 0, port, iters=4, sleep=0.1, timeout_s=timeout_s, env=teardown_abort, auto_resume=True
    )
    node1 = _start_node(tmp_path, 1, port, iters=4, sleep=0.1, timeout_s=timeout_s, auto_resume=True)
    t0 = time.monotonic()
    out0, out1 = (p.communicate(timeout=4 * timeout_s)[0].decode() for p in (node0, node1))
    took = time.monotonic() - t0
    print(f"both nodes done in {took:.1f}s")
    assert node1.returncode == 0, out1
    assert node0.returncode == 0, out0
    assert "train exited with code" in out0 and "NODE_RANK 1 finished: the step is complete" in out0
    assert "auto-resume" not in out0 and took < timeout_s
