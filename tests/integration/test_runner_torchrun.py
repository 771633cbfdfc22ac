"""The runner with real torchrun (2 processes, gloo on CPU): per-rank logs, failing rank, SIGTERM, kill -9."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ascendfactory.backends import planner  # noqa: E402
from ascendfactory.errors import StageFailedError  # noqa: E402
from tests.support import runner_fakes as fakes
from tests.support.runner_fakes import run_experiment

pytestmark = pytest.mark.integration


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    monkeypatch.setenv("AF_FAKE_DIST", "1")
    monkeypatch.setenv("AF_MONITOR_INTERVAL_S", "0.5")
    return fakes.write_script(tmp_path, "trainer.py", fakes.FAKE_TRAINER)


def test_torchrun_output_is_split_per_global_rank(tmp_path, trainer):
    out = tmp_path / "out"
    step = fakes.train_step(trainer, out, iters=4, save_interval=2, nproc=2, sleep=0.3)
    plan = fakes.plan(out, [step], world_size=2)
    assert run_experiment(plan, fakes.loaded(out), live=False, stamp="20260101_000000") == 0
    logs = out / "logs"
    rank1 = (logs / "fake-model-unit-20260101_000000-run_log-N1-1.txt").read_text()
    assert "iteration        4/       4" in rank1 and "[default1]" not in rank1
    assert "iteration" not in (logs / "fake-model-unit-20260101_000000-run_log-N1-0.txt").read_text()
    launcher = (logs / "fake-model-unit-20260101_000000-launcher-node0.txt").read_text()
    assert "OMP_NUM_THREADS" in launcher and "iteration" not in launcher
    assert "rss_mb" in (logs / "fake-model-unit-20260101_000000-npu_info-R1.txt").read_text()
    assert (out / "saved_checkpoints" / "iter_0000004").is_dir()


def test_torchrun_failure_names_the_first_failing_rank(tmp_path, trainer, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_FAIL_AT", "2")
    monkeypatch.setenv("FAKE_FAIL_RANK", "0")
    step = fakes.train_step(trainer, out, iters=4, nproc=2)
    with pytest.raises(StageFailedError) as e:
        run_experiment(fakes.plan(out, [step], world_size=2), fakes.loaded(out), live=False)
    assert e.value.rank == 0 and e.value.returncode == 1
    assert "RuntimeError: fake failure at iteration 2" in e.value.tail
    assert e.value.log_path.endswith("run_log-N1-0.txt")


def test_kill_9_of_a_worker_auto_resumes_from_the_newest_checkpoint(tmp_path, trainer, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_FAIL_AT", "5")
    monkeypatch.setenv("FAKE_FAIL_MODE", "kill")
    monkeypatch.setenv("FAKE_FAIL_MARKER", str(tmp_path / "killed-once"))
    port = fakes.free_port()

    def make_plan(loaded, *, dry_run, environ=None):  # the planner's rule: resume when a checkpoint is there
        from ascendfactory.checkpoints.megatron import inspect

        resume = inspect(str(out / "saved_checkpoints")).resumable
        return fakes.plan(
            out,
            [
                fakes.train_step(
                    trainer, out, iters=8, save_interval=2, nproc=2, load=resume, port=fakes.free_port()
                )
            ],
            world_size=2,
        )

    monkeypatch.setattr(planner, "make_plan", make_plan)
    loaded = fakes.loaded(out, train_auto_resume=True, auto_resume={"max_attempts": 2, "backoff_s": 0.5})
    step = fakes.train_step(trainer, out, iters=8, save_interval=2, nproc=2, port=port)
    assert run_experiment(fakes.plan(out, [step], world_size=2), loaded, live=False) == 0
    log = next((out / "logs").glob("*-run_log-N1-1.txt")).read_text()
    assert "loading checkpoint from" in log and "at iteration 4" in log
    assert "iteration        8/       8" in log
    assert (out / "saved_checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "8"
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert summary["loss_end"] == pytest.approx(10 / 8)  # deterministic resume: same loss as an unbroken run


def test_sigterm_stops_torchrun_and_its_workers(tmp_path, trainer):
    out = tmp_path / "out"
    step = fakes.train_step(trainer, out, iters=1000, nproc=2, sleep=0.5)
    spec = fakes.driver_spec(
        {"af_model_name": "m", "exp_name": "e", "af_output_dir": str(out)},
        [step],
        facts={"world_size": 2},
        grace_s=5.0,
    )
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    driver = fakes.write_script(tmp_path, "driver.py", fakes.DRIVER)
    runner = subprocess.Popen(
        [sys.executable, driver, str(tmp_path / "spec.json")], stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    rank_log = None
    while time.monotonic() < deadline:
        rank_log = next((out / "logs").glob("*-run_log-N1-1.txt"), None) if (out / "logs").exists() else None
        if rank_log and "iteration        2/" in rank_log.read_text():
            break
        time.sleep(0.2)
    tree = psutil.Process(runner.pid).children(recursive=True)
    assert len(tree) >= 3  # torchrun + 2 workers (each in a session of its own)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=60) == 143
    time.sleep(0.3)
    alive = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert "run interrupted by SIGTERM" in rank_log.read_text()
