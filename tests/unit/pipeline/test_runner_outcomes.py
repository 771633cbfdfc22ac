"""What a train step's outcome means beyond its exit code: a failure after the last save (complete, or failed
with the other nodes' reason; never a lone retry), a training that trained nothing (failed, whatever the
NaN checks said), an interrupt (said once, with what the same command does next). Fake step programs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascendfactory.backends import planner
from ascendfactory.errors import StageFailedError
from ascendfactory.pipeline import manifest
from ascendfactory.plan import Role
from tests.support import runner_fakes as fakes
from tests.support.runner_fakes import run_experiment


@pytest.fixture
def trainer(tmp_path):
    return fakes.write_script(tmp_path, "trainer.py", fakes.FAKE_TRAINER)


def _runner_log(out: Path) -> str:
    return sorted((out / "logs").glob("*-runner.txt"))[-1].read_text()


def _train(trainer, out, **kw):
    return fakes.train_step(trainer, out, iters=4, save_interval=2, **kw)


def _resume(monkeypatch, out, train, *, final=4):
    monkeypatch.setattr(planner, "make_plan", fakes.finishing_planner(out, train, final=final))


def _peer(out: Path, train, *, rank: int, returncode: int) -> None:
    manifest.write_outcome(str(out / ".af"), train, node_rank=rank, returncode=returncode, log_path="/n1.txt")


def test_a_failure_after_the_last_save_ends_the_step_complete(tmp_path, trainer, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_EXIT_AT_END", "134")
    train = _train(trainer, out)
    _resume(monkeypatch, out, train)
    loaded = fakes.loaded(out, train_auto_resume=True, auto_resume={"backoff_s": 0})
    assert run_experiment(fakes.plan(out, [train, fakes.plot_step(out)]), loaded, live=False) == 0
    log = _runner_log(out)
    assert "train exited with code 134 after the run saved its last iteration: the step is complete" in log
    assert "auto-resume" not in log and log.count("step train: running") == 1
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert summary["steps"][0]["detail"] == "complete; exit code 134 came after the last save"


def test_with_other_nodes_their_outcome_decides(tmp_path, trainer, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_EXIT_AT_END", "134")
    train = _train(trainer, out)
    _resume(monkeypatch, out, train)
    env = {"NNODES": 2, "NODE_RANK": 0}
    loaded = fakes.loaded(out, env=env, train_auto_resume=True, auto_resume={"backoff_s": 0})
    _peer(out, train, rank=1, returncode=0)  # node 1 finished before node 0's teardown abort
    assert run_experiment(fakes.plan(out, [train]), loaded, live=False) == 0
    assert "after the run saved its last iteration; NODE_RANK 1 finished: the step is complete" in (
        _runner_log(out)
    )

    out2 = tmp_path / "out2"
    train2 = _train(trainer, out2)
    _resume(monkeypatch, out2, train2)
    loaded2 = fakes.loaded(out2, env=env, train_auto_resume=True, auto_resume={"backoff_s": 0})
    _peer(out2, train2, rank=1, returncode=1)
    with pytest.raises(StageFailedError) as e:
        run_experiment(fakes.plan(out2, [train2]), loaded2, live=False)
    assert "NODE_RANK 1 failed too (exit code 1, log /n1.txt): not retried (nothing is left to train)" in (
        e.value.tail
    )
    assert _runner_log(out2).count("step train: running") == 1


def test_a_silent_peer_is_waited_for_no_longer_than_node_wait_timeout(tmp_path, trainer, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_EXIT_AT_END", "134")
    train = _train(trainer, out)
    _resume(monkeypatch, out, train)
    loaded = fakes.loaded(
        out,
        env={"NNODES": 2, "NODE_RANK": 0},
        node_wait_timeout_s=1.5,
        train_auto_resume=True,
        auto_resume={"backoff_s": 0},
    )
    t0 = time.monotonic()
    with pytest.raises(StageFailedError) as e:
        run_experiment(fakes.plan(out, [train]), loaded, live=False)
    assert time.monotonic() - t0 < 30
    assert "NODE_RANK 1 reported no outcome within node_wait_timeout_s (1.5s" in e.value.tail


def test_a_node_does_not_restart_alone_when_the_others_finished(tmp_path, trainer, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_FAIL_AT", "3")  # before the last save: the run is not complete
    train = _train(trainer, out)
    _resume(monkeypatch, out, train)
    loaded = fakes.loaded(
        out, env={"NNODES": 2, "NODE_RANK": 0}, train_auto_resume=True, auto_resume={"backoff_s": 0}
    )
    _peer(out, train, rank=1, returncode=0)
    with pytest.raises(StageFailedError) as e:
        run_experiment(fakes.plan(out, [train]), loaded, live=False)
    assert "NODE_RANK 1 already finished its train step" in e.value.tail
    assert "Run the same command on every node to resume from iter_0000002" in e.value.tail
    assert _runner_log(out).count("step train: running") == 1


@pytest.mark.parametrize("nan_from, fails", [(1, True), (2, True), (3, False)])
def test_a_training_that_trained_nothing_fails(tmp_path, trainer, monkeypatch, nan_from, fails):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_NAN_FROM", str(nan_from))  # iterations nan_from..4 NaN, checks off
    launcher = fakes.write_script(tmp_path, "launcher.py", fakes.FAKE_LAUNCHER)
    train = _train(trainer, out, launcher=launcher)  # under a launcher: rank 0 logs the loss
    mg2hf = fakes.proc_step("mg2hf", Role.EXPORT, [sys.executable, "-c", "pass"])
    plan = fakes.plan(out, [train, mg2hf, fakes.plot_step(out)])
    if not fails:  # 2 of 4 NaN: not more than half
        assert run_experiment(plan, fakes.loaded(out), live=False) == 0
        return
    with pytest.raises(StageFailedError) as e:
        run_experiment(plan, fakes.loaded(out), live=False)
    assert e.value.exit_code == 1 and str(e.value).startswith("step 'train' trained nothing")
    nan = 5 - nan_from
    head = "no logged lm loss is finite" if nan == 4 else "more than 50% of the iterations had a NaN / inf"
    assert f"{head}" in e.value.tail and f"{nan} of 4 iteration(s) NaN" in e.value.tail
    assert "mg2hf: running" not in _runner_log(out)
    # the same command again: the train step is complete (its last checkpoint is there), still a failure
    again = fakes.plan(out, [fakes.replanned_train(out, train, final=4), mg2hf])
    with pytest.raises(StageFailedError, match="trained nothing"):
        run_experiment(again, fakes.loaded(out), live=False)


def test_an_interrupt_is_said_once_with_where_the_same_command_resumes(tmp_path, trainer):
    out = tmp_path / "out"
    train = fakes.train_step(trainer, out, iters=200, save_interval=2, sleep=0.1)
    config = {"af_model_name": "m", "exp_name": "e", "af_output_dir": str(out), "train_auto_resume": True}
    spec = fakes.driver_spec(config, [train], grace_s=2.0)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    driver = fakes.write_script(tmp_path, "driver.py", fakes.DRIVER)
    proc = subprocess.Popen(
        [sys.executable, driver, str(tmp_path / "spec.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while not (out / "saved_checkpoints" / "iter_0000004").is_dir() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, output
    assert output.count("run interrupted by SIGINT") == 1, output
    assert "; run the same command again to resume from iter_00000" in output


def test_without_a_shared_filesystem_a_node_does_not_wait_for_what_it_cannot_read(
    tmp_path, trainer, monkeypatch
):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_EXIT_AT_END", "134")
    train = _train(trainer, out)
    _resume(monkeypatch, out, train)
    loaded = fakes.loaded(
        out,
        env={"NNODES": 2, "NODE_RANK": 0},
        shared_filesystem=False,
        node_wait_timeout_s=600,
        train_auto_resume=True,
        auto_resume={"backoff_s": 0},
    )
    t0 = time.monotonic()
    with pytest.raises(StageFailedError) as e:
        run_experiment(fakes.plan(out, [train]), loaded, live=False)
    assert time.monotonic() - t0 < 60
    assert "NODE_RANK 1's outcome cannot be read here (shared_filesystem: false)" in e.value.tail
