"""Device-memory monitor: `logs/<prefix>-<timestamp>-npu_info-R${RankID}.txt`, one file per rank of this node
(the file names come from the plan's `LogSpec.naming`).

A background thread samples every `interval_s` seconds while the train step runs:

- Ascend: `npu-smi info`, the two table rows of each rank's NPU (its HBM usage) under a timestamp;
- CUDA: `nvidia-smi --query-gpu=...` as one CSV line per rank's GPU;
- always (and alone on CPU): RSS and CPU use of each rank's process tree (psutil). torchrun workers are
  found as the descendants of the launcher whose environment has `LOCAL_RANK`; for a Ray node or a single
  process the whole tree under the launched process is the one rank (Ray's workers are the raylet's
  children, which `ray_node.py` keeps inside that tree).

Overhead is one process-table walk (and one device-tool call) per sample; `cpu_seconds` measures it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import IO

import psutil

from ascendfactory.pipeline.launchers import MonitorTargets

INTERVAL_ENV = "AF_MONITOR_INTERVAL_S"
DEFAULT_INTERVAL_S = 5.0
ACCELERATOR_ENV = "AF_ACCELERATOR"  # set by the plan for CPU processes (an experiment's `accelerator: cpu`)
NVIDIA_QUERY = "index,name,memory.used,memory.total,utilization.gpu"
_NPU_ROW = re.compile(r"^\|\s*(\d+)\s")


def detect_kind() -> str:
    """'npu' when npu-smi is on PATH, else 'cuda' when nvidia-smi is, else 'cpu'."""
    if shutil.which("npu-smi"):
        return "npu"
    if shutil.which("nvidia-smi"):
        return "cuda"
    return "cpu"


def visible_devices(env: dict[str, str], kind: str) -> list[int] | None:
    """Device ids from ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES (None when unset)."""
    name = "ASCEND_RT_VISIBLE_DEVICES" if kind == "npu" else "CUDA_VISIBLE_DEVICES"
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None


def parse_npu_smi(text: str) -> dict[int, list[str]]:
    """`npu-smi info` -> {npu id: its table rows}. The process table after the device table is ignored."""
    out: dict[int, list[str]] = {}
    current: int | None = None
    for line in text.splitlines():
        if "Process id" in line or "Process ID" in line:
            break
        if line.startswith("+"):
            current = None
            continue
        m = _NPU_ROW.match(line)
        if current is None and m:
            current = int(m.group(1))
            out[current] = []
        if current is not None:
            out[current].append(line)
    return out


def parse_nvidia_smi(text: str) -> dict[int, str]:
    """`nvidia-smi --query-gpu=index,... --format=csv,noheader,nounits` -> {gpu index: its line}."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        head = line.split(",", 1)[0].strip()
        if head.isdigit():
            out[int(head)] = line.strip()
    return out


class DeviceMonitor(threading.Thread):
    """Samples until `stop()`; `attach(pid)` points it at the launcher whose workers it should follow."""

    def __init__(
        self,
        targets: MonitorTargets,
        paths: dict[int, str],
        *,
        env: dict[str, str],
        interval_s: float | None = None,
        kind: str | None = None,
    ) -> None:
        """`paths`: the device-info file of each global rank in `targets.ranks`."""
        super().__init__(name="af-device-monitor", daemon=True)
        self.targets, self.env = targets, env
        self.interval_s = (
            interval_s if interval_s is not None else float(env.get(INTERVAL_ENV) or DEFAULT_INTERVAL_S)
        )
        # CPU processes on a node with accelerators (`accelerator: cpu`): their RSS, not the devices' memory
        self.kind = kind or ("cpu" if env.get(ACCELERATOR_ENV) == "cpu" else detect_kind())
        self.devices = visible_devices(env, self.kind)
        self.root_pid: int | None = None
        self.samples = 0
        self.cpu_seconds = 0.0
        self.paths = {local: paths[rank] for local, rank in enumerate(targets.ranks)}
        self._halt = threading.Event()
        self._ranks: dict[int, int] = {}  # pid -> local rank
        self._procs: dict[int, psutil.Process] = {}

    def attach(self, pid: int) -> None:
        self.root_pid = pid
        self._ranks.clear()
        self._procs.clear()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=10)

    def run(self) -> None:
        for path in self.paths.values():
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        files = {local: open(path, "a", encoding="utf-8", buffering=1) for local, path in self.paths.items()}
        try:
            for f in files.values():
                f.write(f"# device monitor ({self.kind}), a sample every {self.interval_s:g}s\n")
            while not self._halt.wait(self.interval_s):
                t0 = time.thread_time()
                self.sample(files)
                self.cpu_seconds += time.thread_time() - t0
        finally:
            for f in files.values():
                f.close()

    def device_of(self, local: int) -> int:
        return self.devices[local] if self.devices and local < len(self.devices) else local

    def sample(self, files: Mapping[int, IO[str]]) -> None:
        """Take one sample and append it to each rank's file."""
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        device_lines: dict[int, list[str]] = {}
        if self.kind == "npu":
            blocks = parse_npu_smi(_run(["npu-smi", "info"]))
            device_lines = {local: blocks.get(self.device_of(local), []) for local in files}
        elif self.kind == "cuda":
            rows = parse_nvidia_smi(
                _run(["nvidia-smi", f"--query-gpu={NVIDIA_QUERY}", "--format=csv,noheader,nounits"])
            )
            device_lines = {
                local: [f"gpu {NVIDIA_QUERY}: {rows[d]}"]
                for local in files
                if (d := self.device_of(local)) in rows
            }
        usage = self.rank_usage()
        for local, f in files.items():
            lines = device_lines.get(local, [])
            proc = usage.get(local)
            rank = self.targets.ranks[local]
            proc_text = (
                f"rank {rank} pid {proc[0]} rss_mb {proc[1]:.1f} cpu_percent {proc[2]:.0f}"
                if proc
                else f"rank {rank} no process"
            )
            f.write(f"[{stamp}] {proc_text}\n")
            for line in lines:
                f.write(f"[{stamp}] {line}\n")
        self.samples += 1

    def rank_usage(self) -> dict[int, tuple[int, float, float]]:
        """{local rank: (pid, RSS MiB of its process tree, CPU %)} for the workers under the launcher."""
        if self.root_pid is None:
            return {}
        try:
            root = psutil.Process(self.root_pid)
            descendants = root.children(recursive=True)
        except psutil.Error:
            return {}
        if not self.targets.local_rank_env:
            return {0: self._tree_usage(root, descendants)}
        alive = {p.pid for p in descendants}
        for pid in list(self._ranks):
            if pid not in alive:
                self._ranks.pop(pid)
                self._procs.pop(pid, None)
        parent: dict[int, int] = {}
        for p in descendants:
            if p.pid not in self._ranks:
                self._ranks[p.pid] = self._local_rank(p)
                self._procs[p.pid] = p
            try:
                parent[p.pid] = p.ppid()
            except psutil.Error:
                continue
        owner: dict[int, int] = {}  # pid -> the rank process whose tree it belongs to (one walk, no rescans)
        for pid in parent:
            node = pid
            while node in parent and not (
                self._ranks.get(node, -1) >= 0 and self._ranks.get(parent[node], -1) < 0
            ):
                node = parent[node]
            if node in parent:
                owner[pid] = node
        rss: dict[int, int] = {}
        for pid, root in owner.items():
            try:
                rss[root] = rss.get(root, 0) + self._procs[pid].memory_info().rss
            except psutil.Error:
                continue
        out: dict[int, tuple[int, float, float]] = {}
        for root, total in rss.items():
            try:
                out[self._ranks[root]] = (root, total / 2**20, self._procs[root].cpu_percent(None))
            except psutil.Error:
                continue
        return out

    def _tree_usage(
        self, root: psutil.Process, descendants: list[psutil.Process]
    ) -> tuple[int, float, float]:
        """The whole tree as one rank: total RSS, and the CPU use of the launched process."""
        total = 0
        for p in [root, *descendants]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                continue
        self._procs.setdefault(root.pid, root)
        try:
            cpu = self._procs[root.pid].cpu_percent(None)
        except psutil.Error:
            cpu = 0.0
        return root.pid, total / 2**20, cpu

    @staticmethod
    def _local_rank(p: psutil.Process) -> int:
        try:
            value = p.environ().get("LOCAL_RANK")
        except psutil.Error:
            return -1
        return int(value) if value and value.isdigit() else -1


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
