"""Parallel degrees (validated in one place), the process group and the (pp, dp, tp) DeviceMesh.

Rank order is Megatron's: TP varies fastest, then DP, then PP, so the mesh is laid out as (pp, dp, tp).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ascendfactory.errors import DeviceMismatchError, ParallelismError, Problem


@dataclass(frozen=True)
class ParallelDims:
    tp: int
    pp: int
    dp: int
    world_size: int
    micro_batch_size: int
    global_batch_size: int
    ep: int = 1  # expert parallelism: the experts split over groups of `ep` data-parallel ranks

    @classmethod
    def from_args(
        cls, args: Any, world_size: int, *, num_heads: int, num_kv_heads: int, vocab: int
    ) -> ParallelDims:
        """Validate TP/PP/DP and batch sizes against the world size and the model; all problems at once."""
        tp, pp, mbs = (
            args.tensor_model_parallel_size,
            args.pipeline_model_parallel_size,
            args.micro_batch_size,
        )
        problems: list[Problem] = []

        def bad(key: str, message: str, fix: str) -> None:
            problems.append(Problem(key=key, message=message, fix=fix, source="command line"))

        if world_size % (tp * pp):
            bad(
                "--tensor-model-parallel-size",
                f"world size ({world_size}) is not divisible by tensor parallel size "
                f"({tp}) times pipeline parallel size ({pp}) times context parallel size (1)",
                "choose TP x PP dividing the number of processes (--nproc-per-node x --nnodes)",
            )
            raise ParallelismError(problems)
        dp = world_size // (tp * pp)
        gbs = args.global_batch_size or mbs * dp
        if gbs % (mbs * dp):
            bad(
                "--global-batch-size",
                f"global batch size ({gbs}) is not divisible by micro batch size ({mbs}) "
                f"times data parallel size ({dp})",
                f"use a multiple of {mbs * dp}",
            )
        virtual = getattr(args, "num_layers_per_virtual_pipeline_stage", None) or getattr(
            args, "virtual_pipeline_model_parallel_size", None
        )
        if virtual and gbs % (mbs * dp) == 0 and (gbs // (mbs * dp)) % pp:
            bad(  # Megatron's rule for the interleaved schedule (core_r0.8.0 validate_args)
                "--global-batch-size",
                f"number of microbatches ({gbs // (mbs * dp)}) is not divisible by pipeline-model-parallel-"
                f"size ({pp}) when using interleaved schedule",
                f"use a global batch size that is a multiple of {mbs * dp * pp} (MBS x DP x PP)",
            )
        if num_heads % tp:
            bad(
                "--tensor-model-parallel-size",
                f"num_attention_heads ({num_heads}) must be a multiple of tensor_model_parallel_size ({tp}).",
                "use a TP size dividing the head counts",
            )
        if num_kv_heads % tp:
            bad(
                "--tensor-model-parallel-size",
                f"num_query_groups ({num_kv_heads}) must be a multiple of tensor_model_parallel_size ({tp}).",
                "use a TP size dividing the KV head count",
            )
        if vocab % tp:
            bad(
                "--padded-vocab-size",
                f"padded vocabulary ({vocab}) is not divisible by TP ({tp})",
                "use --make-vocab-size-divisible-by or a --padded-vocab-size that is a multiple of TP",
            )
        ep = int(getattr(args, "expert_model_parallel_size", 1) or 1)
        if dp % ep:
            bad(  # Megatron core_r0.8.0 parallel_state.initialize_model_parallel
                "--expert-model-parallel-size",
                f"data_parallel_size ({dp}) is not divisible by expert_model_parallel_size ({ep})",
                "expert parallelism splits the data-parallel ranks: choose EP dividing "
                "world size / (TP x PP)",
            )
        if problems:
            raise ParallelismError(problems)
        return cls(
            tp=tp, pp=pp, dp=dp, world_size=world_size, micro_batch_size=mbs, global_batch_size=gbs, ep=ep
        )

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    def describe(self) -> str:
        line = (
            f"using world size: {self.world_size}, data-parallel size: {self.dp}, context-parallel size: 1 "
            f"tensor-model-parallel size: {self.tp}, pipeline-model-parallel size: {self.pp}"
        )
        return line + (f", expert-model-parallel size: {self.ep}" if self.ep > 1 else "")


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    device: Any  # torch.device
    backend: str


ACCELERATOR_ENV = "AF_ACCELERATOR"  # "cpu": CPU + gloo even where an accelerator is (`accelerator: cpu`)


def device_and_backend(local_rank: int) -> tuple[Any, str]:
    """CUDA + nccl, Ascend NPU + hccl (torch_npu), or CPU + gloo (always with AF_ACCELERATOR=cpu)."""
    import torch

    if os.environ.get(ACCELERATOR_ENV) == "cpu":
        return torch.device("cpu"), "gloo"
    if importlib.util.find_spec("torch_npu") is not None:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():
            _take_device(torch.npu, local_rank, "NPU", "ASCEND_RT_VISIBLE_DEVICES")
            return torch.device("npu", local_rank), "hccl"
    if torch.cuda.is_available():
        _take_device(torch.cuda, local_rank, "GPU", "CUDA_VISIBLE_DEVICES")
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def _take_device(runtime: Any, local_rank: int, noun: str, var: str) -> None:
    """`runtime.set_device(local_rank)`, or one line saying why this rank has no device (the plan checks the
    node's device files; this catches what they do not show: a container's limits, a busy or lost device)."""
    count = runtime.device_count()
    error = None
    if local_rank < count:
        try:
            runtime.set_device(local_rank)
            return
        except RuntimeError as e:  # CUDA's "invalid device ordinal", a device in an exclusive mode, ...
            error = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    shown = os.environ.get(var)
    raise DeviceMismatchError(
        f"local rank {local_rank} cannot use {noun} {local_rank}"
        + (f" ({error})" if error else "")
        + f": {count} {noun}(s) are the devices visible to this process ({var}="
        + (f"{shown})" if shown is not None else "unset)")
        + f"; run at most {count} process(es) per node (env.NPUS_PER_NODE: {max(count, 1)}), "
        "or accelerator: cpu for CPU processes"
    )


MALLOC_ENV = "AF_TRAIN_MALLOC_TUNING"  # "0": leave glibc malloc's thresholds alone
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameter numbers (glibc malloc.h)


def tune_cpu_allocator(keep_bytes: int = 1 << 30) -> bool:
    """Keep freed activation/gradient buffers in the heap between steps (glibc only; True when applied).

    CPU tensors come from malloc. Past glibc's dynamic mmap threshold, each step's large activations and
    gradients are mmap'ed fresh and unmapped when freed, or the heap top is trimmed, so every step pays
    thousands of page faults zero-filling the same memory again. Raising both thresholds makes the steady
    state reuse the heap. Numerics are untouched; memory is returned to the system at exit only.
    """
    if os.environ.get(MALLOC_ENV, "1") == "0":
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, keep_bytes)) and bool(mallopt(_M_TRIM_THRESHOLD, keep_bytes))


def collective_timeout_s(timeout_minutes: int | None) -> float:
    """--distributed-timeout-minutes when given, else AF_DISTRIBUTED_TIMEOUT_S (the runner's
    node_wait_timeout_s, so a hung peer fails the job within it), else Megatron's 10 minutes."""
    if timeout_minutes:
        return timeout_minutes * 60.0
    return float(os.environ.get("AF_DISTRIBUTED_TIMEOUT_S") or 600.0)


def init_distributed(timeout_minutes: int | None = None) -> DistEnv:
    """Join the torchrun rendezvous (single process without torchrun: a world of one)."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "RANK" not in os.environ:
        from socket import socket

        with socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ.setdefault("MASTER_PORT", str(s.getsockname()[1]))
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device, backend = device_and_backend(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend, timeout=timedelta(seconds=collective_timeout_s(timeout_minutes))
        )
    return DistEnv(
        rank=dist.get_rank(),
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        device=device,
        backend=backend,
    )


def build_mesh(dims: ParallelDims, device: Any) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dims.pp, dims.dp, dims.tp), mesh_dim_names=("pp", "dp", "tp"))


@dataclass(frozen=True)
class ExpertGroups:
    """Megatron's expert-parallel group (the `ep` consecutive data-parallel ranks that split the experts
    and exchange tokens) and data-modulo-expert-parallel group (the ranks holding the same experts, over
    which expert gradients are averaged) of this rank; None where a group would have one rank."""

    ep_group: Any
    ep_rank: int
    expert_dp_group: Any
    expert_dp: int


def expert_groups(dims: ParallelDims) -> ExpertGroups:
    """Megatron core_r0.8.0 `initialize_model_parallel`: within a (pp, tp) position, data-parallel rank
    d = j x ep + e is expert-parallel rank e of expert group j. Every rank creates every group, in one
    order (mesh (pp, dp, tp): rank = pp x dp x tp + d x tp + t)."""
    import torch.distributed as dist

    rank, ep = dist.get_rank(), dims.ep
    d = (rank // dims.tp) % dims.dp
    mine: dict[str, Any] = {"ep": None, "edp": None}
    if ep == 1:
        return ExpertGroups(None, 0, None, dims.dp)
    for p in range(dims.pp):
        for t in range(dims.tp):
            base = p * dims.dp * dims.tp + t
            for j in range(dims.dp // ep):
                ranks = [base + (j * ep + e) * dims.tp for e in range(ep)]
                group = dist.new_group(ranks)
                if rank in ranks:
                    mine["ep"] = group
            for e in range(ep):
                ranks = [base + (j * ep + e) * dims.tp for j in range(dims.dp // ep)]
                group = dist.new_group(ranks) if len(ranks) > 1 else None
                if rank in ranks:
                    mine["edp"] = group
    return ExpertGroups(mine["ep"], d % ep, mine["edp"], dims.dp // ep)


def embedding_group(dims: ParallelDims, mesh: Any) -> Any:
    """Megatron's embedding group of this rank: the first and the last pipeline stage at its (dp, tp)
    position (None with PP == 1, and on middle stages). Every rank creates every group, in one order."""
    if dims.pp == 1:
        return None
    if dims.pp == 2:
        return mesh["pp"].get_group()
    import torch.distributed as dist

    per_stage, rank, mine = dims.dp * dims.tp, dist.get_rank(), None
    for i in range(per_stage):
        ranks = [i, (dims.pp - 1) * per_stage + i]  # mesh (pp, dp, tp): rank = pp * dp * tp + dp * tp + tp
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = group
    return mine
