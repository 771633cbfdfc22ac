"""How many devices (processes) each node runs, and how many it has. The precedence lives here and only here:

1. `ASCEND_RT_VISIBLE_DEVICES` or `CUDA_VISIBLE_DEVICES`, when set and non-empty: the number of ids listed
   (`ASCEND_RT_VISIBLE_DEVICES=0,1` -> 2);
2. else `env.NPUS_PER_NODE` from the config (command line > file > the cluster platform's variable, e.g.
   `SLURM_GPUS_ON_NODE` or `MA_NUM_GPUS`: `config.platforms`);
3. else the machine: 8 on an Ascend NPU machine (the product default), the number of GPUs on a CUDA
   machine, 1 on a CPU-only machine.

What the node has (`node_accelerators`) is read from device files only, never by importing torch: NVIDIA's
driver lists one directory per GPU under `/proc/driver/nvidia/gpus/`, Ascend's one `/dev/davinciN` per NPU.
The visibility variable then narrows that the way the runtime does: CUDA stops at the first id that is not
a device of this node (or repeats one), see "CUDA_VISIBLE_DEVICES" in the CUDA C Programming Guide,
section "CUDA Environment Variables"; ids written as UUIDs (`GPU-...`, `MIG-...`) cannot be checked here
and count as visible.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

VISIBLE_DEVICE_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
VISIBLE_VAR = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}
NOUN = {"npu": "NPU", "cuda": "GPU"}
# Where the device files are read: the one boundary a test moves to a folder of fake device files.
DEVICE_ROOT = "/"
_DAVINCI = re.compile(r"^davinci\d+$")


@dataclass(frozen=True)
class DeviceCount:
    count: int
    source: str  # where the number came from, shown by --dry-run


@dataclass(frozen=True)
class NodeAccelerators:
    """The accelerators of this node: `kind` ('npu', 'cuda', 'cpu'), how many its device files show
    (`installed`), how many a process started here can use after the visibility variable (`visible`), and
    how that was read (`source`, for messages)."""

    kind: str
    installed: int
    visible: int
    source: str

    @property
    def noun(self) -> str:
        return NOUN.get(self.kind, "device")


def _under_root(pattern: str) -> list[str]:
    return glob.glob(os.path.join(DEVICE_ROOT, pattern.lstrip("/")))


def installed_devices(kind: str) -> int:
    """Devices of `kind` this node's device files show (0 when none or unknown)."""
    if kind == "cuda":
        return len(_under_root("/proc/driver/nvidia/gpus/*")) or len(_under_root("/dev/nvidia[0-9]*"))
    if kind == "npu":
        return sum(1 for p in _under_root("/dev/davinci*") if _DAVINCI.match(os.path.basename(p)))
    return 0


def detect_accelerator() -> str:
    """'npu', 'cuda' or 'cpu', from device files only (no torch import)."""
    if installed_devices("npu") or os.environ.get("ASCEND_TOOLKIT_HOME"):
        return "npu"
    if installed_devices("cuda"):
        return "cuda"
    return "cpu"


def visible_ids(value: str, installed: int) -> int:
    """How many of the ids listed in a visibility variable a process can use on a node with `installed`
    devices: the leading ids that name a device of the node, once each."""
    seen: set[str] = set()
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            continue
        if token.isdigit():
            if int(token) >= installed or token in seen:
                break
        elif not token.upper().startswith(("GPU-", "MIG-")):
            break  # CUDA reads "-1" or a bad word as the end of the list
        seen.add(token)
    return len(seen)


def node_accelerators(environ: Mapping[str, str] | None = None) -> NodeAccelerators:
    """What this node has (see the module docstring)."""
    environ = os.environ if environ is None else environ
    kind = detect_accelerator()
    installed = installed_devices(kind)
    if kind == "cpu" or installed == 0:
        return NodeAccelerators(kind, 0, 0, "no GPU or NPU device files on this node")
    noun = NOUN[kind] + ("s" if installed != 1 else "")
    var = VISIBLE_VAR[kind]
    value = environ.get(var, "").strip()
    if not value:
        return NodeAccelerators(kind, installed, installed, f"{installed} {noun} on this node")
    visible = visible_ids(value, installed)
    return NodeAccelerators(kind, installed, visible, f"{var}={value} of the {installed} {noun} on this node")


def resolve_devices_per_node(
    configured: int | None,
    environ: Mapping[str, str] | None = None,
    *,
    configured_from: str = "",
    cpu: bool = False,
) -> DeviceCount:
    """`configured_from`: where `configured` came from when not the experiment (a platform variable).
    `cpu`: CPU processes (`accelerator: cpu`): the configured count, else 1; the node's devices and their
    visibility variables play no part."""
    environ = os.environ if environ is None else environ
    if cpu:
        if configured:
            return DeviceCount(configured, configured_from or "env.NPUS_PER_NODE")
        return DeviceCount(1, "accelerator: cpu (set env.NPUS_PER_NODE for more processes)")
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
        return DeviceCount(max(installed_devices("cuda"), 1), "GPUs found on this machine")
    return DeviceCount(1, "CPU-only machine (set env.NPUS_PER_NODE for more processes)")
