"""Log names, torchrun argv, the per-rank tee and failure analysis."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import runner_fakes as fakes

from ascendfactory.pipeline.launch import LogNames, StepProcess, Tee, read_tail, with_rendezvous_timeout
from ascendfactory.pipeline.plan import RankLayout, Step


def test_log_names_follow_the_documented_pattern(tmp_path):
    names = LogNames.for_run(str(tmp_path), "qwen2.5-7b", "full/4k", "20260122_101500")
    assert Path(names.run_log(2, 15)).name == "qwen2.5-7b-full_4k-20260122_101500-run_log-N2-15.txt"
    assert Path(names.npu_info(3)).name == "qwen2.5-7b-full_4k-20260122_101500-npu_info-R3.txt"
    assert Path(names.step("hf2mg")).name == "qwen2.5-7b-full_4k-20260122_101500-hf2mg.txt"
    assert Path(names.launcher(1)).name == "qwen2.5-7b-full_4k-20260122_101500-launcher-node1.txt"


def test_rendezvous_timeout_goes_to_torchrun_only():
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "train.py"]
    assert with_rendezvous_timeout(argv, 90.5)[3:5] == ["--rdzv_conf", "timeout=90"]
    assert with_rendezvous_timeout(["torchrun", "x.py"], 5) == [
        "torchrun", "--rdzv_conf", "timeout=5", "x.py"]
    given = [*argv[:3], "--rdzv_conf=timeout=7", *argv[3:]]
    assert with_rendezvous_timeout(given, 90) == given
    assert with_rendezvous_timeout([sys.executable, "convert.py"], 90) == [sys.executable, "convert.py"]


def test_tee_splits_by_global_rank_and_strips_the_prefix(tmp_path):
    names = LogNames.for_run(str(tmp_path), "m", "e", "20260101_000000")
    seen = []
    step = Step(name="train", kind="train", argv=["x"],
                ranks=RankLayout(nnodes=2, nproc_per_node=2, node_rank=1))
    tee = Tee(step, names, on_line=lambda rank, text: seen.append((rank, text)))
    for line in ["launcher says hi", "[default0]:hello", "[default1]:Traceback (most recent call last):",
                 "[default0]:Traceback (most recent call last):", "[default7]:not ours",
                 "[rank1]:also rank 1"]:
        tee.route(line)
    tee.close()
    assert Path(names.run_log(2, 2)).read_text() == "hello\nTraceback (most recent call last):\n"
    assert Path(names.run_log(2, 3)).read_text() == "Traceback (most recent call last):\nalso rank 1\n"
    assert Path(names.launcher(1)).read_text() == "launcher says hi\n[default7]:not ours\n"
    assert tee.first_traceback == 3
    assert seen[1] == (2, "hello") and seen[0] == (None, "launcher says hi")


def test_read_tail_returns_the_last_lines(tmp_path):
    p = tmp_path / "log.txt"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert read_tail(str(p), 3) == "line 97\nline 98\nline 99"
    assert read_tail(str(tmp_path / "missing")) == ""


def test_failing_rank_and_tail_from_a_launched_step(tmp_path):
    trainer = fakes.write_script(tmp_path, "trainer.py", fakes.FAKE_TRAINER)
    launcher = fakes.write_script(tmp_path, "launcher.py", fakes.FAKE_LAUNCHER)
    step = fakes.train_step(trainer, tmp_path, iters=4, launcher=launcher, fake_nproc=2)
    names = LogNames.for_run(str(tmp_path / "logs"), "m", "e", "20260101_000000")
    proc = StepProcess(step, env={**os.environ, "FAKE_FAIL_AT": "2", "FAKE_FAIL_RANK": "0"},
                       names=names)
    proc.start(step.argv)
    while proc.poll() is None:
        time.sleep(0.05)
    outcome = proc.finish()
    assert outcome.returncode == 1 and outcome.rank == 0
    assert outcome.log_path == names.run_log(1, 0)
    assert "RuntimeError: fake failure at iteration 2" in outcome.tail
    assert "step train exited with code 1" in Path(names.run_log(1, 1)).read_text()
