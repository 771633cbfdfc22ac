"""How many devices (processes) each node runs. The precedence lives here and only here:

1. `ASCEND_RT_VISIBLE_DEVICES` or `CUDA_VISIBLE_DEVICES`, when set and non-empty: the number of ids listed
   (`ASCEND_RT_VISIBLE_DEVICES=0,1` -> 2);
2. else `env.NPUS_PER_NODE` from the config (command line > file > the cluster platform's variable, e.g.
   `SLURM_GPUS_ON_NODE` or `MA_NUM_GPUS`: `config.platforms`);
3. else the machine: 8 on an Ascend NPU machine (the product default), the number of GPUs on a CUDA
   machine, 1 on a CPU-only machine.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass

VISIBLE_DEVICE_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class DeviceCount:
    count: int
    source: str  # where the number came from, shown by --dry-run


def detect_accelerator() -> str:
    """'npu', 'cuda' or 'cpu', from device files only (no torch import)."""
    if glob.glob("/dev/davinci[0-9]*") or os.environ.get("ASCEND_TOOLKIT_HOME"):
        return "npu"
    if glob.glob("/proc/driver/nvidia/gpus/*") or glob.glob("/dev/nvidia[0-9]*"):
        return "cuda"
    return "cpu"


def resolve_devices_per_node(
    configured: int | None, environ: Mapping[str, str] | None = None, *, configured_from: str = ""
) -> DeviceCount:
    """`configured_from`: where `configured` came from when not the experiment (a platform variable)."""
    environ = os.environ if environ is None else environ
    for var in VISIBLE_DEVICE_VARS:
        value = environ.get(var, "").strip()
        if value:
            ids = [v for v in value.split(",") if v.strip()]
            return DeviceCount(len(ids), f"{var}={value}")
    if configured:
        return DeviceCount(configured, configured_from or "env.NPUS_PER_NODE")
    kind = detect_accelerator()
    if kind == "npu":
        return DeviceCount(8, "default for an NPU machine")
    if kind == "cuda":
        n = len(glob.glob("/proc/driver/nvidia/gpus/*")) or len(glob.glob("/dev/nvidia[0-9]*"))
        return DeviceCount(max(n, 1), "GPUs found on this machine")
    return DeviceCount(1, "CPU-only machine (set env.NPUS_PER_NODE for more processes)")
