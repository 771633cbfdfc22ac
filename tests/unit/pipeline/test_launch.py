"""Log names, the torchrun launcher's argv, the per-rank tee and failure analysis."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ascendfactory.pipeline.launch import LogNames, Tee, read_tail
from ascendfactory.pipeline.launchers import TorchrunLauncher, open_step
from ascendfactory.plan import RunPolicy, Torchrun
from tests.support import runner_fakes as fakes


def test_log_names_follow_the_documented_pattern(tmp_path):
    names = LogNames.for_run(str(tmp_path), "qwen2.5-7b", "full/4k", "20260122_101500")
    assert Path(names.run_log(2, 15)).name == "qwen2.5-7b-full_4k-20260122_101500-run_log-N2-15.txt"
    assert Path(names.npu_info(3)).name == "qwen2.5-7b-full_4k-20260122_101500-npu_info-R3.txt"
    assert Path(names.step("hf2mg")).name == "qwen2.5-7b-full_4k-20260122_101500-hf2mg.txt"
    assert Path(names.launcher(1)).name == "qwen2.5-7b-full_4k-20260122_101500-launcher-node1.txt"


def _torchrun(**kw) -> Torchrun:
    return Torchrun(
        **{
            **dict(
                python=sys.executable,
                entry=("train.py", "--x", "1"),
                nnodes=2,
                nproc_per_node=2,
                node_rank=1,
                master_addr="10.0.0.1",
                master_port=6000,
            ),
            **kw,
        }
    )


def test_torchrun_launcher_adds_the_rendezvous_and_collective_timeouts():
    launch = _torchrun()
    planned = launch.command()
    assert planned[:3] == [sys.executable, "-m", "torch.distributed.run"] and "--rdzv_conf" not in planned
    assert planned[-5:] == ["--tee", "3", "train.py", "--x", "1"]
    launcher = TorchrunLauncher(launch, RunPolicy(node_wait_timeout_s=90.5))
    assert launcher.argv()[3:5] == ["--rdzv_conf", "timeout=90"] and launcher.argv()[5:] == planned[3:]
    assert launcher.env() == {"AF_DISTRIBUTED_TIMEOUT_S": "90"}
    own = TorchrunLauncher(_torchrun(torchrun=("torchrun",)), RunPolicy(node_wait_timeout_s=5)).argv()
    assert own[:3] == ["torchrun", "--rdzv_conf", "timeout=5"]


def test_tee_splits_by_global_rank_and_strips_the_prefix(tmp_path):
    names = LogNames.for_run(str(tmp_path), "m", "e", "20260101_000000")
    seen = []
    launcher = TorchrunLauncher(_torchrun(), RunPolicy(node_rank=1, nnodes=2))
    tee = Tee(
        launcher.log_paths(fakes.plot_step(tmp_path), names),
        split=launcher.split,
        on_line=lambda rank, text: seen.append((rank, text)),
    )
    for line in [
        "launcher says hi",
        "[default0]:hello",
        "[default1]:Traceback (most recent call last):",
        "[default0]:Traceback (most recent call last):",
        "[default7]:not ours",
        "[rank1]:also rank 1",
    ]:
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
    proc, _ = open_step(
        step, RunPolicy(), names, env={**os.environ, "FAKE_FAIL_AT": "2", "FAKE_FAIL_RANK": "0"}
    )
    proc.start()
    while proc.poll() is None:
        time.sleep(0.05)
    outcome = proc.finish()
    assert outcome.returncode == 1 and outcome.rank == 0
    assert outcome.log_path == names.run_log(1, 0)
    assert "RuntimeError: fake failure at iteration 2" in outcome.tail
    assert "step train exited with code 1" in Path(names.run_log(1, 1)).read_text()
