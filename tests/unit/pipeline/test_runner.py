"""The runner end to end with tiny fake step programs (no torch): logs, skips, failures, resume, signals."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from ascendfactory.backends import planner
from ascendfactory.errors import StageFailedError
from ascendfactory.plan import Process, Role, Step
from tests.support import runner_fakes as fakes
from tests.support.runner_fakes import run_experiment


@pytest.fixture
def progs(tmp_path):
    return {
        name: fakes.write_script(tmp_path, f"{name}.py", src)
        for name, src in (
            ("trainer", fakes.FAKE_TRAINER),
            ("launcher", fakes.FAKE_LAUNCHER),
            ("writer", fakes.WRITER),
            ("spawner", fakes.SPAWNER),
        )
    }


def _pipeline(out: Path, progs, **train_kw) -> list[Step]:
    conv = str(out / "converted_weight_TP1PP1")
    return [
        fakes.proc_step("hf2mg", Role.CONVERT, [sys.executable, progs["writer"], conv], outputs=[conv]),
        fakes.train_step(progs["trainer"], out, launcher=progs["launcher"], **train_kw),
        fakes.plot_step(out),
    ]


def _logs(out: Path, pattern: str) -> list[Path]:
    return sorted((out / "logs").glob(pattern))


def test_full_run_writes_the_documented_outputs(tmp_path, progs):
    out = tmp_path / "out"
    plan = fakes.plan(out, _pipeline(out, progs, iters=6, save_interval=2, fake_nproc=2), world_size=2)
    loaded = fakes.loaded(out, env={"NNODES": 1, "HF_TOKEN": "s3cret"})
    assert run_experiment(plan, loaded, live=False, stamp="20260122_101500") == 0
    logs = {p.name for p in (out / "logs").iterdir()}
    prefix = "fake-model-unit-20260122_101500"
    assert {
        f"{prefix}-run_log-N1-0.txt",
        f"{prefix}-run_log-N1-1.txt",
        f"{prefix}-hf2mg.txt",
        f"{prefix}-launcher-node0.txt",
        f"{prefix}-npu_info-R0.txt",
        f"{prefix}-npu_info-R1.txt",
        f"{prefix}-runner.txt",
    } <= logs
    last = (out / "logs" / f"{prefix}-run_log-N1-1.txt").read_text()
    assert "iteration        6/       6" in last and "[default" not in last
    assert "iteration" not in (out / "logs" / f"{prefix}-run_log-N1-0.txt").read_text()
    assert "launcher: all workers exited" in (out / "logs" / f"{prefix}-launcher-node0.txt").read_text()
    assert (out / "training_loss.png").stat().st_size > 0
    assert yaml.safe_load((out / "exp-config.yaml").read_text())["env"]["HF_TOKEN"] == "***"
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert [s["state"] for s in summary["steps"]] == ["done", "done", "done"]
    assert summary["loss_end"] == pytest.approx(10 / 6)
    assert summary["throughput"]["value"] == pytest.approx(8 * 128 / (2 * 100.0) * 1000)
    assert (out / ".af" / "hf2mg.json").exists() and not (out / ".af" / "train.json").exists()


def test_rerun_skips_up_to_date_steps_and_goes_to_training(tmp_path, progs):
    out = tmp_path / "out"
    steps = _pipeline(out, progs, iters=2)
    run_experiment(fakes.plan(out, steps), fakes.loaded(out), live=False, stamp="20260101_000000")
    run_experiment(
        fakes.plan(out, _pipeline(out, progs, iters=2)),
        fakes.loaded(out),
        live=False,
        stamp="20260101_000001",
    )
    second = json.loads((out / ".af" / "summary.json").read_text())["steps"]
    assert second[0]["state"] == "skipped" and second[0]["detail"].startswith("outputs up to date (manifest")
    assert second[1]["state"] == "done"
    assert not _logs(out, "*000001-hf2mg.txt")


def test_failing_step_names_exit_code_and_tail_and_removes_only_its_new_outputs(tmp_path, progs, monkeypatch):
    out = tmp_path / "out"
    steps = _pipeline(out, progs)
    monkeypatch.setenv("FAKE_WRITER_FAIL", "1")
    with pytest.raises(StageFailedError) as e:
        run_experiment(fakes.plan(out, steps), fakes.loaded(out), live=False)
    err = e.value
    assert (err.stage, err.returncode, err.rank) == ("hf2mg", 3, None)
    assert "RuntimeError: fake converter failure" in err.tail and err.log_path.endswith("-hf2mg.txt")
    assert not (out / "converted_weight_TP1PP1").exists()  # created by the failed run: removed
    assert (out / ".af" / "hf2mg.failed.json").exists() and not (out / ".af" / "hf2mg.json").exists()
    (out / "converted_weight_TP1PP1").mkdir()
    (out / "converted_weight_TP1PP1" / "keep.bin").write_text("user data")
    with pytest.raises(StageFailedError):
        run_experiment(fakes.plan(out, _pipeline(out, progs)), fakes.loaded(out), live=False)
    assert (out / "converted_weight_TP1PP1" / "keep.bin").exists()  # was there before: kept


def test_failing_train_reports_the_first_failing_rank_and_keeps_checkpoints(tmp_path, progs, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_FAIL_AT", "3")
    monkeypatch.setenv("FAKE_FAIL_RANK", "0")
    steps = _pipeline(out, progs, iters=6, save_interval=2, fake_nproc=2)
    with pytest.raises(StageFailedError) as e:
        run_experiment(fakes.plan(out, steps, world_size=2), fakes.loaded(out), live=False)
    assert (e.value.stage, e.value.rank) == ("train", 0)
    assert "fake failure at iteration 3" in e.value.tail and e.value.log_path.endswith("run_log-N1-0.txt")
    assert (out / "saved_checkpoints" / "iter_0000002").is_dir()
    assert (out / ".af" / "hf2mg.json").exists()  # the outputs of the steps before are kept


def _resuming_planner(progs, out: Path, **kw):
    """What the real planner does after a failure: load saved_checkpoints when it holds a checkpoint."""
    from ascendfactory.checkpoints.megatron import inspect

    def make_plan(loaded, *, dry_run, environ=None):
        resume = inspect(str(out / "saved_checkpoints")).resumable
        step = fakes.train_step(progs["trainer"], out, launcher=progs["launcher"], load=resume, **kw)
        return fakes.plan(out, [step], world_size=2)

    return make_plan


def test_auto_resume_restarts_from_the_newest_checkpoint(tmp_path, progs, monkeypatch):
    out = tmp_path / "out"
    kw = dict(iters=8, save_interval=2, fake_nproc=2)
    monkeypatch.setenv("FAKE_FAIL_AT", "5")
    monkeypatch.setenv("FAKE_FAIL_RANK", "0")  # the rank that saves (the fake's ranks do not synchronise)
    monkeypatch.setenv("FAKE_FAIL_MARKER", str(tmp_path / "failed-once"))
    monkeypatch.setattr(planner, "make_plan", _resuming_planner(progs, out, **kw))
    loaded = fakes.loaded(out, train_auto_resume=True, auto_resume={"max_attempts": 2, "backoff_s": 0})
    assert run_experiment(fakes.plan(out, _pipeline(out, progs, **kw), world_size=2), loaded, live=False) == 0
    runner_log = _logs(out, "*-runner.txt")[-1].read_text()
    assert "auto-resume 1/2 from iter_0000004" in runner_log
    last = _logs(out, "*-run_log-N1-1.txt")[-1].read_text()
    assert "loading checkpoint" in last and "iteration        8/       8" in last
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert (summary["first_step"], summary["last_step"]) == (1, 8)  # one curve over both segments


def test_auto_resume_gives_up_after_max_attempts(tmp_path, progs, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("FAKE_FAIL_AT", "1")  # fails every time, before any checkpoint
    monkeypatch.setattr(planner, "make_plan", _resuming_planner(progs, out, iters=3, fake_nproc=2))
    loaded = fakes.loaded(out, train_auto_resume=True, auto_resume={"max_attempts": 2, "backoff_s": 0})
    with pytest.raises(StageFailedError):
        run_experiment(
            fakes.plan(out, _pipeline(out, progs, iters=3, fake_nproc=2), world_size=2), loaded, live=False
        )
    text = _logs(out, "*-runner.txt")[-1].read_text()
    assert "auto-resume 2/2 from the start" in text and "auto-resume 3/" not in text


def test_rerun_after_a_crash_repairs_the_tracker_and_resumes(tmp_path, progs, monkeypatch):
    out = tmp_path / "out"
    save = out / "saved_checkpoints"
    for it in (2, 4):
        (save / f"iter_{it:07d}" / "mp_rank_00").mkdir(parents=True)
        (save / f"iter_{it:07d}" / "mp_rank_00" / "model_optim_rng.pt").write_text(str(it))
    (save / "latest_checkpointed_iteration.txt").write_text("6")  # names a dir that never got written
    monkeypatch.setattr(planner, "make_plan", _resuming_planner(progs, out, iters=6, fake_nproc=1))
    loaded = fakes.loaded(out, train_auto_resume=True)
    plan = fakes.plan(out, [fakes.train_step(progs["trainer"], out, launcher=progs["launcher"], iters=6)])
    assert run_experiment(plan, loaded, live=False) == 0
    assert "rewrote it to 4" in _logs(out, "*-runner.txt")[-1].read_text()
    assert "at iteration 4" in _logs(out, "*-run_log-N1-0.txt")[-1].read_text()


def test_save_total_limit_prunes_during_and_after_training(tmp_path, progs):
    out = tmp_path / "out"
    steps = [
        fakes.train_step(
            progs["trainer"], out, launcher=progs["launcher"], iters=8, save_interval=2, sleep=0.3
        )
    ]
    assert run_experiment(fakes.plan(out, steps), fakes.loaded(out, save_total_limit=1), live=False) == 0
    assert sorted(p.name for p in (out / "saved_checkpoints").iterdir()) == [
        "iter_0000008",
        "latest_checkpointed_iteration.txt",
    ]
    assert _logs(out, "*-runner.txt")[-1].read_text().count("save_total_limit 1: removed") == 3


def test_other_nodes_wait_for_node0_steps(tmp_path, progs):
    out = tmp_path / "out"
    conv = str(out / "conv")
    node0 = fakes.proc_step(
        "hf2mg", Role.CONVERT, [sys.executable, progs["writer"], conv], outputs=[conv], only_node0=True
    )
    run_experiment(fakes.plan(out, [node0]), fakes.loaded(out, env={"NNODES": 2, "NODE_RANK": 0}), live=False)
    node1 = dataclasses.replace(
        node0,
        launch=Process(  # not even started
            (sys.executable, "-c", "raise SystemExit('node 1 must not run this')")
        ),
    )
    loaded1 = fakes.loaded(out, env={"NNODES": 2, "NODE_RANK": 1}, node_wait_timeout_s=5)
    (out / ".af" / "hf2mg.json").touch()  # node 0 has just written it
    assert run_experiment(fakes.plan(out, [node1]), loaded1, live=False) == 0
    assert json.loads((out / ".af" / "summary.json").read_text())["steps"][0]["state"] == "waited"
    os.remove(out / ".af" / "hf2mg.json")
    with pytest.raises(StageFailedError) as e:
        run_experiment(
            fakes.plan(out, [node1]),
            fakes.loaded(out, env={"NNODES": 2, "NODE_RANK": 1}, node_wait_timeout_s=0.5),
            live=False,
        )
    assert e.value.returncode == 124


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_every_process_of_the_run(tmp_path, progs, sig, code):
    out = tmp_path / "out"
    pidfile = tmp_path / "pids"
    step = fakes.proc_step(
        "preprocess",
        Role.PREPROCESS,
        [sys.executable, progs["spawner"], str(pidfile)],
        outputs=[str(out / "preprocess_data")],
    )
    spec = fakes.driver_spec(
        {"af_model_name": "m", "exp_name": "e", "af_output_dir": str(out)}, [step], grace_s=2.0
    )
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    driver = fakes.write_script(tmp_path, "driver.py", fakes.DRIVER)
    runner = subprocess.Popen(
        [sys.executable, driver, str(tmp_path / "spec.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and len(pidfile.read_text().split()) == 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert all(psutil.pid_exists(p) for p in pids)
    runner.send_signal(sig)
    output = runner.communicate(timeout=30)[0].decode()
    assert runner.returncode == code, output
    time.sleep(0.2)
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"left running: {alive}"
    name = signal.Signals(sig).name
    assert f"run interrupted by {name}" in _logs(out, "*-runner.txt")[-1].read_text()
    assert f"run interrupted by {name}" in _logs(out, "*-preprocess.txt")[-1].read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_plotting_stops_the_run(tmp_path, monkeypatch, sig):
    from ascendfactory.errors import InterruptedRunError
    from ascendfactory.pipeline import results

    out = tmp_path / "out"
    step = fakes.proc_step("work", Role.PREPROCESS, [sys.executable, "-c", "print('done')"])
    p = fakes.plan(out, [step, fakes.plot_step(out)])
    monkeypatch.setattr(
        fakes.plan.__globals__["Plan"],
        "with_role",
        lambda self, role: (
            Step(name="train", role=Role.TRAIN, launch=Process(("true",), rank=0))
            if role is Role.TRAIN
            else next((s for s in self.steps if s.role is role), None)
        ),
    )

    def plot_then_signal(paths, out_png, logs, **kw):
        os.kill(os.getpid(), sig)
        time.sleep(0.1)
        return out_png

    monkeypatch.setattr(results, "plot", plot_then_signal)
    monkeypatch.setattr(results, "loss_logs", lambda *a, **k: [str(tmp_path / "any.txt")])
    with pytest.raises(InterruptedRunError) as e:
        run_experiment(p, fakes.loaded(out))
    assert e.value.signum == sig
    assert f"run interrupted by {signal.Signals(sig).name}" in _logs(out, "*-runner.txt")[-1].read_text()


def test_auto_resume_does_not_retry_an_error_a_restart_cannot_fix(tmp_path):
    import dataclasses

    from ascendfactory.cli._output import out as cli_out
    from ascendfactory.pipeline import runner

    out = tmp_path / "out"
    count = tmp_path / "attempts"
    code = (
        "import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.write_text(p.read_text() + 'x' if p.exists() "
        "else 'x'); print('error (rank 0): 2 configuration problems:', file=sys.stderr); sys.exit(2)"
    )
    step = Step(
        name="train", role=Role.TRAIN, launch=Process((sys.executable, "-c", code, str(count)), rank=0)
    )
    experiment = fakes.loaded(out, train_auto_resume=True, auto_resume={"max_attempts": 3, "backoff_s": 0})
    p = fakes.complete(fakes.plan(out, [step]), experiment)
    p.policy = dataclasses.replace(p.policy, unretryable=("configuration problem",))
    with pytest.raises(StageFailedError):
        runner.run_experiment(p, out=cli_out, replan=lambda: p)
    assert count.read_text() == "x"  # one attempt
    log = _logs(out, "*-runner.txt")[-1].read_text()
    assert "'configuration problem' in its log is an error a restart cannot fix" in log


def test_a_replanned_train_step_gets_its_plans_files_written(tmp_path):
    """A framework config the train step reads (mindspeed-rl's yaml) follows the re-plan's load decision."""
    from ascendfactory.pipeline.runner import Runner
    from ascendfactory.plan import LogNaming, LogSpec, Plan, Process, Role, Step, ThroughputSpec

    def plan(text: str) -> Plan:
        logs = LogSpec(
            format="megatron", naming=LogNaming("x"), loss_rank="last", throughput=ThroughputSpec("megatron")
        )
        p = Plan(backend="b", exp_name="e", model_name="m", output_dir=str(tmp_path), logs=logs)
        p.files[str(tmp_path / "framework.yaml")] = text
        p.add(Step(name="train", role=Role.TRAIN, launch=Process(("true",))))
        return p

    first = plan("load: converted\n")
    r = Runner(first, out=None, replan=lambda: plan("load: saved_checkpoints\n"))
    new = r._replan_train(first.steps[0])
    assert new.name == "train"
    assert (tmp_path / "framework.yaml").read_text() == "load: saved_checkpoints\n"


def test_a_dead_runners_leftovers_are_found_by_their_tag_and_stopped(tmp_path):
    """What a killed runner left running in an output dir is stopped by the next run there, only that."""
    import subprocess

    from ascendfactory.pipeline import procgroup

    out = str(tmp_path / "run")
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale_tag = f"{out}|{dead.pid}|1.000"  # a runner that no longer exists
    env = dict(os.environ)
    left = subprocess.Popen(
        ["sleep", "60"], env={**env, procgroup.RUN_TAG: stale_tag}, start_new_session=True
    )
    live_tag = procgroup.run_tag(out)  # this process is alive: its processes are not leftovers
    mine = subprocess.Popen(["sleep", "60"], env={**env, procgroup.RUN_TAG: live_tag})
    other = subprocess.Popen(["sleep", "60"], env={**env, procgroup.RUN_TAG: f"{out}-other|{dead.pid}|1.000"})
    try:
        assert [p.pid for p in procgroup.dead_runs(out)] == [left.pid]
        assert procgroup.stop_dead_runs(out, grace_s=2) == [left.pid]
        assert left.wait(5) is not None and mine.poll() is None and other.poll() is None
    finally:
        for p in (left, mine, other):
            p.kill()
            p.wait()
