"""The device's own fixed allocations beside the model's tensors: what a training process holds on every
device whatever its size (the `runtime` component of every stage).

- **CUDA** (every PyTorch framework on an NVIDIA GPU): cuBLAS gets a workspace per (handle, stream) from
  PyTorch's caching allocator, so it counts in `torch.cuda.max_memory_allocated`. A training step uses two
  handles: the Python thread's forward and the autograd engine's device thread that runs backward (each
  thread reserves its own handle from PyTorch's handle pool). Sizes, from PyTorch's
  `aten/src/ATen/cuda/CublasHandlePool.cpp` (`parseChosenWorkspaceSize`, `parseCUDABlasLtWorkspaceSize`):
  cuBLAS `CUBLAS_WORKSPACE_CONFIG` (`:SIZE_KiB:COUNT` pairs, summed), default 4096 KiB x 8 = 32 MiB on
  compute capability 9.0 (Hopper: H100, H200, H800, H20), else `:4096:2:16:8` = 8 MiB + 128 KiB; cuBLASLt
  `CUBLASLT_WORKSPACE_SIZE` KiB, default 1024 KiB, capped at the cuBLAS size, none of its own when
  `TORCH_CUBLASLT_UNIFIED_WORKSPACE=1` (it then shares cuBLAS's). On the quickstart (a 14.2 MiB job) an H200
  measured 81.5 MiB `max allocated` (the embedded trainer of
  that time, fp32 weights under autocast): 14.2 + 2 x (32 + 1) = 80.2 MiB.
- **NPU** (Ascend, HCCL): every communication domain a rank communicates in holds a buffer of
  `HCCL_BUFFSIZE` MB (default 200: MindSpeed `docs/features/hccl-group-buffer-set.md`, after CANN's
  environment-variable reference); HCCL allocates it outside PyTorch's allocator, so `max_memory_allocated`
  does not show it, but the device does. The domains counted: the default group and each parallel
  dimension above 1 (`Job.groups()`).
- **CPU** and an unknown device: nothing (no workspace is allocated on the host's behalf).

The runtime context itself (CUDA/CANN context, kernels) and the allocator's fragmentation stay in the
reserve (`devices.DeviceMemory.reserve`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ascendfactory.memory.devices import DeviceMemory
from ascendfactory.memory.report import MemoryEstimate

MiB = 2**20
HOPPER_CUBLAS = 4096 * 8 * 1024  # bytes: the cuBLAS workspace PyTorch allocates on compute capability 9.0
OTHER_CUBLAS = 4096 * 1024 * 2 + 16 * 1024 * 8  # ":4096:2:16:8"
CUBLASLT_KIB = 1024  # CUBLASLT_WORKSPACE_SIZE's default (KiB)
HANDLES = 2  # the forward thread's cuBLAS handle and the autograd device thread's
HCCL_BUFFSIZE_MB = 200


def cublas_workspace(environ: Mapping[str, str], *, hopper: bool) -> int:
    """Bytes of one cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG, else PyTorch's default for the arch)."""
    config = environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", config)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return HOPPER_CUBLAS if hopper else OTHER_CUBLAS


def cublaslt_workspace(environ: Mapping[str, str], cublas: int) -> int:
    """Bytes of one cuBLASLt workspace (its own, unless unified with cuBLAS's)."""
    if environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "").strip() in ("1", "true", "True", "TRUE"):
        return 0
    try:
        kib = int(environ.get("CUBLASLT_WORKSPACE_SIZE", CUBLASLT_KIB))
    except ValueError:
        kib = CUBLASLT_KIB
    return min(kib * 1024, cublas)


def runtime_bytes(kind: str | None, *, hopper: bool, job: Any, environ: Mapping[str, str]) -> tuple[int, str]:
    """(bytes per device, what they are) for a device of `kind` (cuda | npu | None)."""
    if kind == "cuda":
        cublas = cublas_workspace(environ, hopper=hopper)
        lt = cublaslt_workspace(environ, cublas)
        return HANDLES * (cublas + lt), (
            f"CUDA runtime: {HANDLES} cuBLAS handles (forward and autograd threads) x (workspace "
            f"{cublas / MiB:g} MiB + cuBLASLt {lt / MiB:g} MiB), from PyTorch's caching allocator"
        )
    if kind == "npu":
        try:
            mb = int(environ.get("HCCL_BUFFSIZE", HCCL_BUFFSIZE_MB))
        except ValueError:
            mb = HCCL_BUFFSIZE_MB
        groups = int(job.groups()) if hasattr(job, "groups") else 1
        return groups * mb * MiB, (
            f"HCCL: {groups} communication domain(s) x HCCL_BUFFSIZE {mb} MB (outside PyTorch's allocator)"
        )
    return 0, ""


def estimate_on(job: Any, device: DeviceMemory, environ: Mapping[str, str] | None = None) -> MemoryEstimate:
    """`job`'s estimate on `device`: its own terms, then the runtime's allocations in every stage."""
    if device.kind is None and device.bytes is None and getattr(job, "engine", None) == "embedded":
        # nothing named or found: an embedded trainer started here runs on this host's CPU
        job = job.with_(host=True)
    est: MemoryEstimate = job.estimate(device.bytes)
    runtime, what = runtime_bytes(device.kind, hopper=device.hopper, job=job, environ=environ or {})
    for stage in est.stages:
        stage.runtime = float(runtime)
    if what:
        est.assumptions.append(what)
    return est
