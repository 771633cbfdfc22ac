"""How much memory one device offers: the device's own tool, else the experiment's key, else a table.

Order: `memory_check.device_memory_gb` (the user knows best) > `npu-smi info` / `nvidia-smi` on this machine
> `memory_check.device` looked up in `DEVICES` > unknown (the estimate is shown, nothing is refused).

The reserve kept free for the runtime (CANN / CUDA context, HCCL / NCCL buffers) and allocator
fragmentation is `RESERVE_FIXED + RESERVE_FRACTION x capacity`, an assumption stated in every estimate: the
FSDP estimator of PopSoda2002 adds a fixed 2 GiB; Megatron adds 5% for temporaries
(`theoretical_memory_usage.py`); the allocator's reserved-but-free share on long runs is of the same order.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

GB = 10**9
GiB = 1024**3
RESERVE_FIXED = 2 * GiB
RESERVE_FRACTION = 0.05

# name -> (bytes, source). HBM sizes as the vendors publish them (GB = 10^9 bytes for NVIDIA's GB, Ascend's
# npu-smi reports MB = 2^20 bytes: 65536 MB on a 910B's 64 GB).
DEVICES: dict[str, tuple[int, str]] = {
    "ascend-910b1": (
        64 * GiB,
        "Atlas 800T A2 training server: 8 x Ascend 910B, 64 GB HBM each (npu-smi: 65536 MB)",
    ),
    "ascend-910b2": (
        64 * GiB,
        "Atlas 800T A2 / Atlas 900 A2 PoD: Ascend 910B2, 64 GB HBM (npu-smi: 65536 MB)",
    ),
    "ascend-910b3": (64 * GiB, "Atlas 800T A2: Ascend 910B3, 64 GB HBM (npu-smi: 65536 MB)"),
    "ascend-910b4": (32 * GiB, "Atlas 800I A2 / 300I A2: Ascend 910B4, 32 GB HBM (npu-smi: 32768 MB)"),
    "ascend-910": (32 * GiB, "Atlas 300T training card (model 9000) technical white paper: 32 GB HBM"),
    "a100-40gb": (40 * GiB, "NVIDIA A100 Tensor Core GPU datasheet: 40 GB HBM2"),
    "a100-80gb": (80 * GiB, "NVIDIA A100 Tensor Core GPU datasheet: 80 GB HBM2e"),
    "a800-80gb": (80 * GiB, "NVIDIA A800 datasheet: 80 GB HBM2e"),
    "h100-80gb": (80 * GiB, "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM 80 GB HBM3"),
    "h100-nvl": (94 * GiB, "NVIDIA H100 Tensor Core GPU datasheet: H100 NVL 94 GB HBM3"),
    "h800-80gb": (80 * GiB, "NVIDIA H800 datasheet: 80 GB HBM3"),
    "h20": (96 * GiB, "NVIDIA H20 datasheet: 96 GB HBM3"),
    "h200": (141 * GB, "NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e"),
    "l40s": (48 * GiB, "NVIDIA L40S datasheet: 48 GB GDDR6"),
}


HOPPER = re.compile(r"(?i)\b(G?H100|GH200|H200|H800|H20)\b|^h(100|200|800|20)\b")  # compute capability 9.0


@dataclass(frozen=True)
class DeviceMemory:
    bytes: int | None
    name: str | None
    source: str
    kind: str | None = None  # cuda | npu | None (not known: the runtime's own allocations are not counted)

    @property
    def reserve(self) -> int:
        return 0 if self.bytes is None else int(RESERVE_FIXED + RESERVE_FRACTION * self.bytes)

    @property
    def hopper(self) -> bool:
        """An NVIDIA GPU of compute capability 9.0 (PyTorch sizes its cuBLAS workspace by it)."""
        return self.kind == "cuda" and bool(self.name and HOPPER.search(self.name))


def kind_of(device: str) -> str:
    """cuda or npu, for a name of `DEVICES`."""
    return "npu" if device.startswith("ascend") else "cuda"


def resolve_device_memory(
    *, memory_gb: float | None, device: str | None, probe: bool = True, timeout_s: float = 3.0
) -> DeviceMemory:
    if memory_gb is not None:
        kind = kind_of(device.lower()) if device else None
        return DeviceMemory(int(memory_gb * GiB), device, "memory_check.device_memory_gb", kind)
    if probe:
        found = probe_devices(timeout_s=timeout_s)
        if found is not None:
            return found
    if device is not None:
        size, source = DEVICES[device.lower()]
        return DeviceMemory(size, device.lower(), f"memory_check.device: {source}", kind_of(device.lower()))
    return DeviceMemory(
        None, None, "no npu-smi or nvidia-smi here; set memory_check.device or device_memory_gb"
    )


def probe_devices(*, timeout_s: float = 3.0) -> DeviceMemory | None:
    """The smallest device memory this machine's `nvidia-smi` or `npu-smi` reports (None: no tool)."""
    if shutil.which("nvidia-smi"):
        text = _run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"], timeout_s
        )
        sizes = [
            (int(m.group(2)) * 2**20, m.group(1).strip())
            for m in re.finditer(r"^(.*?),\s*(\d+)\s*$", text or "", re.M)
        ]
        if sizes:
            size, name = min(sizes)
            return DeviceMemory(size, name, "nvidia-smi", "cuda")
    if shutil.which("npu-smi"):
        text = _run(["npu-smi", "info"], timeout_s)
        totals = [
            int(m.group(1)) * 2**20 for m in re.finditer(r"\d+\s*/\s*(\d{4,})\s*\|?\s*$", text or "", re.M)
        ]
        if totals:
            return DeviceMemory(min(totals), "npu", "npu-smi info (HBM total)", "npu")
    return None


def _run(argv: list[str], timeout_s: float) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
