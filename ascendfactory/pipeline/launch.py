"""Launching one step: log file names, the per-rank tee of torchrun's output, and what a failure looked like.

Log names follow spec section 3.3 (`logs/xx-xx-<timestamp>-run_log-${Nodes}-${RankID}.txt`), with
`xx-xx` = `<af_model_name>-<exp_name>`, `${Nodes}` = `N<nnodes>` and `${RankID}` the global rank::

    qwen2.5-0.5b-full-4k-20260122_101500-run_log-N1-0.txt      one per rank of this node (train)
    qwen2.5-0.5b-full-4k-20260122_101500-launcher-node0.txt    torchrun's own lines (no rank prefix)
    qwen2.5-0.5b-full-4k-20260122_101500-npu_info-R0.txt       device memory monitor, one per rank
    qwen2.5-0.5b-full-4k-20260122_101500-hf2mg.txt             one per non-distributed step
    qwen2.5-0.5b-full-4k-20260122_101500-runner.txt            what the runner did (starts, skips, stops)

torchrun is run with `--tee 3`, so each worker line arrives as `[<role><local_rank>]:text`; the prefix is
stripped and the line goes to the file of global rank `node_rank * nproc_per_node + local_rank`.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO

from ascendfactory.pipeline import procgroup
from ascendfactory.pipeline.plan import RankLayout, Step

RANK_PREFIX = re.compile(r"^\[([A-Za-z_]*?)(\d+)\]:")
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?\brank\s*:\s*(\d+)", re.S)
TRACEBACK = "Traceback (most recent call last)"
TAIL_LINES = 20
DIST_TIMEOUT_ENV = "AF_DISTRIBUTED_TIMEOUT_S"  # collective timeout for the trainer's init_process_group

LineHook = Callable[[int | None, str], None]  # (global rank or None for launcher/step lines, text)


def timestamp(now: datetime | None = None) -> str:
    return (now or datetime.now()).strftime("%Y%m%d_%H%M%S")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


@dataclass(frozen=True)
class LogNames:
    """Every file name under `{af_output_dir}/logs/` for one invocation of `train`."""

    logs_dir: str
    prefix: str  # <af_model_name>-<exp_name>
    stamp: str  # YYYYMMDD_HHMMSS, fixed when the run starts

    @classmethod
    def for_run(cls, logs_dir: str, model_name: str, exp_name: str, stamp: str | None = None) -> LogNames:
        return cls(logs_dir, f"{_safe(model_name)}-{_safe(exp_name)}", stamp or timestamp())

    def _p(self, tail: str) -> str:
        return os.path.join(self.logs_dir, f"{self.prefix}-{self.stamp}-{tail}.txt")

    def run_log(self, nnodes: int, rank: int) -> str:
        return self._p(f"run_log-N{nnodes}-{rank}")

    def npu_info(self, rank: int) -> str:
        return self._p(f"npu_info-R{rank}")

    def launcher(self, node_rank: int) -> str:
        return self._p(f"launcher-node{node_rank}")

    def step(self, name: str) -> str:
        return self._p(_safe(name))

    @property
    def runner(self) -> str:
        return self._p("runner")


def is_torchrun(argv: list[str]) -> bool:
    return (len(argv) > 2 and argv[1] == "-m" and argv[2] == "torch.distributed.run") or (
        bool(argv) and os.path.basename(argv[0]) == "torchrun")


def with_rendezvous_timeout(argv: list[str], timeout_s: float) -> list[str]:
    """torchrun argv with `--rdzv_conf timeout=<s>` (static rendezvous: how long nodes wait for each other)
    unless the plan already sets a rendezvous config. Other argv is returned unchanged."""
    if not is_torchrun(argv) or any(a.split("=")[0] in ("--rdzv_conf", "--rdzv-conf") for a in argv):
        return list(argv)
    at = 3 if argv[1] == "-m" else 1
    return [*argv[:at], "--rdzv_conf", f"timeout={max(int(timeout_s), 1)}", *argv[at:]]


class Tee:
    """Routes a step's output lines to its log files (per rank for distributed steps)."""

    def __init__(self, step: Step, names: LogNames, *, on_line: LineHook | None = None) -> None:
        self.layout: RankLayout | None = step.ranks
        self.on_line = on_line
        self.files: dict[int | None, IO[str]] = {}
        self.paths: dict[int | None, str] = {}
        os.makedirs(names.logs_dir, exist_ok=True)
        if self.layout is not None:
            for local in range(self.layout.nproc_per_node):
                rank = self.layout.global_rank(local)
                self.paths[rank] = names.run_log(self.layout.nnodes, rank)
            self.paths[None] = names.launcher(self.layout.node_rank)
        else:
            self.paths[None] = names.step(step.name)
        for key, path in self.paths.items():
            self.files[key] = open(path, "a", encoding="utf-8", buffering=1)
        self.first_traceback: int | None = None
        self.launcher_tail: deque[str] = deque(maxlen=400)

    def route(self, line: str) -> None:
        rank: int | None = None
        text = line
        if self.layout is not None:
            m = RANK_PREFIX.match(line)
            if m:
                rank = self.layout.global_rank(int(m.group(2)))
                text = line[m.end():]
                if rank not in self.files:  # a prefix beyond nproc_per_node: keep it with the launcher
                    rank, text = None, line
        if rank is not None and self.first_traceback is None and text.startswith(TRACEBACK):
            self.first_traceback = rank
        if rank is None:
            self.launcher_tail.append(text)
        self.files[rank].write(text + "\n")
        if self.on_line is not None:
            self.on_line(rank, text)

    def note(self, text: str) -> None:
        """A line from the runner itself, written to every file of this step."""
        for f in self.files.values():
            f.write(text + "\n")

    def close(self) -> None:
        for f in self.files.values():
            f.close()


@dataclass
class Outcome:
    """How a step's process ended."""

    returncode: int
    wall_s: float
    log_path: str  # the log that explains the result (the failing rank's, else the step's)
    logs: list[str] = field(default_factory=list)
    rank: int | None = None  # first failing rank (distributed steps)
    tail: str = ""


def read_tail(path: str, n: int = TAIL_LINES, *, max_bytes: int = 256 * 1024) -> str:
    """The last `n` lines of a file, reading at most `max_bytes` from its end."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - max_bytes, 0))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-n:])


class StepProcess:
    """One step's subprocess: started in its own group, output teed by a reader thread, stoppable."""

    def __init__(self, step: Step, *, env: dict[str, str], names: LogNames,
                 on_line: LineHook | None = None) -> None:
        self.step = step
        self.env = env
        self.tee = Tee(step, names, on_line=on_line)
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._t0 = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, argv: list[str]) -> None:
        self.tee.note(f"[ascendfactory] {datetime.now():%Y-%m-%d %H:%M:%S} starting step {self.step.name}")
        self._t0 = time.monotonic()
        self.proc = procgroup.start(argv, env=self.env, cwd=self.step.cwd)
        self._reader = threading.Thread(target=self._read, name=f"tee-{self.step.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        if self.proc is None or self.proc.stdout is None:
            return
        for raw in iter(self.proc.stdout.readline, b""):
            self.tee.route(raw.decode("utf-8", "replace").rstrip("\r\n"))
        self.proc.stdout.close()

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, *, reason: str, grace_s: float = procgroup.DEFAULT_GRACE_S) -> None:
        """Stop every process of the step (SIGTERM, grace, SIGKILL) and record why in its logs."""
        if self.proc is not None:
            procgroup.stop(self.proc, grace_s=grace_s)
        self.tee.note(f"[ascendfactory] {reason}")

    def finish(self) -> Outcome:
        """Wait for the process and the reader, close the logs and describe the result."""
        rc = self.proc.wait() if self.proc is not None else 0
        if self._reader is not None:
            self._reader.join(timeout=10)
        wall = time.monotonic() - self._t0
        tee = self.tee
        rank = None
        if rc != 0 and tee.layout is not None:
            rank = tee.first_traceback
            if rank is None:
                m = ROOT_CAUSE.search("\n".join(tee.launcher_tail))
                rank = int(m.group(1)) if m else None
        log = tee.paths.get(rank) or tee.paths[None]
        for f in tee.files.values():
            f.flush()
        tail = read_tail(log) if rc != 0 else ""
        if rc != 0 and not tail.strip() and log != tee.paths[None]:  # the rank died silently (kill -9)
            log = tee.paths[None]
            tail = read_tail(log)
        tee.note(f"[ascendfactory] {datetime.now():%Y-%m-%d %H:%M:%S} step {self.step.name} exited "
                 f"with code {rc} after {wall:.1f}s")
        tee.close()
        logs = [p for k, p in tee.paths.items() if k is not None] + [tee.paths[None]]
        return Outcome(returncode=rc, wall_s=wall, log_path=log, logs=logs, rank=rank, tail=tail)
