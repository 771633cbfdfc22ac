"""The device runtime's own allocations (`memory.runtime`): PyTorch's cuBLAS / cuBLASLt workspaces on CUDA,
HCCL's buffers on an NPU, nothing on CPU; and the quickstart on an H200 against its measured peak."""

from __future__ import annotations

import json
import os

from ascendfactory.cli.app import main
from ascendfactory.memory import devices
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.runtime import cublas_workspace, cublaslt_workspace, runtime_bytes
from ascendfactory.memory.shape import ModelShape

MiB = 2**20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SHAPE = ModelShape(name="s", layers=4, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=1000, tied=False)


def test_cublas_workspace_sizes_follow_pytorchs_defaults_and_variables():
    assert cublas_workspace({}, hopper=True) == 32 * MiB  # 4096 KiB x 8 on compute capability 9.0
    assert cublas_workspace({}, hopper=False) == 8 * MiB + 128 * 1024  # :4096:2:16:8
    assert cublas_workspace({"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}, hopper=False) == 32 * MiB
    assert cublas_workspace({"CUBLAS_WORKSPACE_CONFIG": ":16:8"}, hopper=True) == 128 * 1024  # determinism
    assert cublaslt_workspace({}, 32 * MiB) == 1 * MiB
    assert cublaslt_workspace({"CUBLASLT_WORKSPACE_SIZE": "65536"}, 32 * MiB) == 32 * MiB  # capped
    assert cublaslt_workspace({"TORCH_CUBLASLT_UNIFIED_WORKSPACE": "1"}, 32 * MiB) == 0


def test_runtime_per_device_kind():
    job = MegatronJob(shape=SHAPE, tp=2, dp=2, seq=64)
    cuda, what = runtime_bytes("cuda", hopper=True, job=job, environ={})
    assert cuda == 2 * (32 + 1) * MiB and "cuBLAS" in what  # forward and autograd threads
    npu, what = runtime_bytes("npu", hopper=False, job=job, environ={})
    assert npu == 3 * 200 * MiB and "HCCL" in what  # default group, TP, DP
    assert runtime_bytes("npu", hopper=False, job=job, environ={"HCCL_BUFFSIZE": "50"})[0] == 3 * 50 * MiB
    assert runtime_bytes("npu", hopper=False, job=job.with_(tp=1, dp=1), environ={})[0] == 0  # one device
    assert runtime_bytes(None, hopper=False, job=job, environ={}) == (0, "")  # CPU / unknown


def test_device_kinds_and_hopper():
    assert devices.resolve_device_memory(memory_gb=None, device="h200", probe=False).hopper
    a100 = devices.resolve_device_memory(memory_gb=None, device="a100-80gb", probe=False)
    assert a100.kind == "cuda" and not a100.hopper
    assert devices.resolve_device_memory(memory_gb=None, device="ascend-910b2", probe=False).kind == "npu"
    assert devices.DeviceMemory(1, "NVIDIA H200", "nvidia-smi", "cuda").hopper
    assert not devices.DeviceMemory(1, "NVIDIA A100-SXM4-80GB", "nvidia-smi", "cuda").hopper


def test_the_quickstart_on_an_h200_adds_the_cuda_workspaces(monkeypatch, capsys):
    """The first CUDA run (an H200, one device) measured 81.5 MiB `max allocated` with the trainer of that
    time (fp32 weights under autocast): 14.2 MiB of tensors estimated, 80.2 MiB with the workspaces (-1.6%).
    The trainer now holds 16-bit weights (fewer tensor bytes); the workspaces are the same 66 MiB on top of
    the tensors, whatever the trainer keeps."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(devices, "probe_devices", lambda **_: None)

    def memory(*extra):
        main(["estimate", "cfgs/quickstart.yaml", "--env.NPUS_PER_NODE=1", *extra, "--json"])
        return json.loads(capsys.readouterr().out)["memory"]

    on_h200 = memory("--memory_check.device=h200")
    on_cpu = memory()  # no device kind: no runtime term
    assert on_h200["device_kind"] == "cuda" and on_cpu["device_kind"] is None
    assert on_h200["stages"][0]["runtime"] == 66 * MiB and on_cpu["stages"][0]["runtime"] == 0
    assert on_h200["per_device_peak_bytes"] == on_cpu["per_device_peak_bytes"] + 66 * MiB
    assert 66 * MiB < on_h200["per_device_peak_bytes"] < 81.5 * 1.03 * MiB
