"""Which device a trainer rank takes: CPU when the plan says so, else its accelerator, and one clear line
when the rank has none (CUDA faked at the calls the trainer makes; no GPU was available to this work)."""

from __future__ import annotations

import pytest
import torch

from ascendfactory.backends.device_fit import UNRETRYABLE
from ascendfactory.engine.train import parallel
from ascendfactory.engine.train.__main__ import main
from ascendfactory.errors import DeviceMismatchError


def fake_cuda(monkeypatch, count: int, set_device=None) -> list[int]:
    taken: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", set_device or taken.append)
    monkeypatch.setattr(parallel.importlib.util, "find_spec", lambda name, *a: None)  # no torch_npu
    return taken


def test_cpu_processes_leave_the_gpus_alone(monkeypatch):
    taken = fake_cuda(monkeypatch, 1)
    monkeypatch.setenv(parallel.ACCELERATOR_ENV, "cpu")
    assert parallel.device_and_backend(1) == (torch.device("cpu"), "gloo") and taken == []


def test_a_rank_takes_its_gpu(monkeypatch):
    monkeypatch.delenv(parallel.ACCELERATOR_ENV, raising=False)
    taken = fake_cuda(monkeypatch, 2)
    assert parallel.device_and_backend(1) == (torch.device("cuda", 1), "nccl") and taken == [1]


def test_a_rank_past_the_visible_gpus_says_so_in_one_line(monkeypatch):
    monkeypatch.delenv(parallel.ACCELERATOR_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    fake_cuda(monkeypatch, 1)
    with pytest.raises(DeviceMismatchError) as e:
        parallel.device_and_backend(1)
    text = str(e.value)
    assert "\n" not in text and any(u in text for u in UNRETRYABLE)
    assert text.startswith("local rank 1 cannot use GPU 1: 1 GPU(s) are the devices visible to this process")
    assert "(CUDA_VISIBLE_DEVICES=3); run at most 1 process(es) per node (env.NPUS_PER_NODE: 1)" in text


def test_a_runtime_refusal_is_named_too(monkeypatch):
    monkeypatch.delenv(parallel.ACCELERATOR_ENV, raising=False)

    def busy(i):
        raise RuntimeError("CUDA error: invalid device ordinal\nCUDA kernel errors might be ...")

    fake_cuda(monkeypatch, 2, busy)
    with pytest.raises(DeviceMismatchError, match=r"cannot use GPU 0 \(CUDA error: invalid device ordinal\)"):
        parallel.device_and_backend(0)


def test_the_trainer_prints_one_line_per_failing_rank(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv(parallel.ACCELERATOR_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("AF_DEBUG", raising=False)
    for k, v in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(k, v)
    fake_cuda(monkeypatch, 1)
    argv = ["--seq-length", "8", "--train-iters", "1", "--lr", "1e-3"]
    argv += ["--tokenizer-name-or-path", str(tmp_path), "--data-path", str(tmp_path / "d")]
    argv += ["--micro-batch-size", "1", "--global-batch-size", "2"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error (rank 1): local rank 1 cannot use GPU 1"), err
