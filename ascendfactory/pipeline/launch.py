"""Running one step's process: log file names, the tee of its output, and what its end looked like.

Log names come from the plan (`LogSpec.naming`): `logs/<prefix>-<timestamp>-<tail>.txt`. For the Megatron
backends (docs/sources.md#output-tree, `xx-xx` = `<af_model_name>-<exp_name>`)::

    qwen2.5-0.5b-full-4k-20260122_101500-run_log-N1-0.txt      one per rank of this node (train)
    qwen2.5-0.5b-full-4k-20260122_101500-launcher-node0.txt    the launcher's own lines (no rank)
    qwen2.5-0.5b-full-4k-20260122_101500-npu_info-R0.txt       device memory monitor, one per rank
    qwen2.5-0.5b-full-4k-20260122_101500-hf2mg.txt             one per step that writes its own log
    qwen2.5-0.5b-full-4k-20260122_101500-runner.txt            what the runner did (starts, skips, stops)

Which file a line goes to is the launcher's business (`pipeline.launchers`): a `Tee` gets the files and a
`split(line) -> (rank, text)` function from it.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO

from ascendfactory.pipeline import procgroup
from ascendfactory.plan import LogNaming, safe_name

TRACEBACK = "Traceback (most recent call last)"
TAIL_LINES = 20

LineHook = Callable[[int | None, str], None]  # (global rank or None for launcher/step lines, text)
Split = Callable[[str], tuple[int | None, str]]


def timestamp(now: datetime | None = None) -> str:
    return (now or datetime.now()).strftime("%Y%m%d_%H%M%S")


@dataclass(frozen=True)
class LogNames:
    """Every file name under `{af_output_dir}/logs/` for one invocation of `train`."""

    logs_dir: str
    naming: LogNaming
    stamp: str  # YYYYMMDD_HHMMSS, fixed when the run starts

    @classmethod
    def for_run(cls, logs_dir: str, model_name: str, exp_name: str, stamp: str | None = None) -> LogNames:
        """Names with the default tails and the prefix `<af_model_name>-<exp_name>` (the runner's tests)."""
        return cls(
            logs_dir, LogNaming(prefix=f"{safe_name(model_name)}-{safe_name(exp_name)}"), stamp or timestamp()
        )

    @property
    def prefix(self) -> str:
        return self.naming.prefix

    def _p(self, tail: str) -> str:
        return os.path.join(self.logs_dir, f"{self.prefix}-{self.stamp}-{tail}.txt")

    def _tail(
        self, template: str, *, rank: int = 0, nnodes: int = 1, world_size: int = 1, node_rank: int = 0
    ) -> str:
        return template.format(rank=rank, nnodes=nnodes, world_size=world_size, node_rank=node_rank)

    def run_log(self, nnodes: int, rank: int, *, world_size: int = 1, node_rank: int = 0) -> str:
        return self._p(
            self._tail(
                self.naming.run_log, rank=rank, nnodes=nnodes, world_size=world_size, node_rank=node_rank
            )
        )

    def run_log_pattern(self, nnodes: int, rank: int, *, world_size: int = 1, node_rank: int = 0) -> str:
        """The glob of this rank's run logs across runs (any timestamp)."""
        import glob

        tail = self._tail(
            self.naming.run_log, rank=rank, nnodes=nnodes, world_size=world_size, node_rank=node_rank
        )
        return os.path.join(self.logs_dir, f"{glob.escape(self.prefix)}-*-{tail}.txt")

    def npu_info(self, rank: int, *, nnodes: int = 1, world_size: int = 1, node_rank: int = 0) -> str:
        """The device monitor's file of one rank (`npu_info-R<rank>` for the Megatron backends)."""
        return self._p(
            self._tail(
                self.naming.device_info, rank=rank, nnodes=nnodes, world_size=world_size, node_rank=node_rank
            )
        )

    def launcher(self, node_rank: int) -> str:
        return self._p(self._tail(self.naming.launcher, node_rank=node_rank))

    def step(self, name: str) -> str:
        return self._p(safe_name(name))

    @property
    def runner(self) -> str:
        return self._p("runner")


class Tee:
    """Routes a step's output lines to its log files: `paths` maps a rank (None: the launcher or the step
    itself) to a file; `split` tells a line's rank. Remembers the first rank that printed a traceback."""

    def __init__(
        self, paths: dict[int | None, str], *, split: Split | None = None, on_line: LineHook | None = None
    ) -> None:
        self.paths = dict(paths)
        self.split = split
        self.on_line = on_line
        self.files: dict[int | None, IO[str]] = {}
        for path in self.paths.values():
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        for key, path in self.paths.items():
            self.files[key] = open(path, "a", encoding="utf-8", buffering=1)
        self.default = None if None in self.files else next(iter(self.files))
        self.first_traceback: int | None = None
        self.launcher_tail: deque[str] = deque(maxlen=400)

    def route(self, line: str) -> None:
        rank, text = self.split(line) if self.split else (self.default, line)
        if rank not in self.files:  # a rank beyond this node's: keep the line whole with the default file
            rank, text = self.default, line
        if rank is not None and self.first_traceback is None and text.startswith(TRACEBACK):
            self.first_traceback = rank
        if rank is None or rank == self.default:
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
    """One step's subprocess: started in its own group, output teed by a reader thread, stoppable.

    `failing_rank(tee)` (from the launcher) names the rank that explains a failure, when there is one.
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        tee: Tee,
        failing_rank: Callable[[Tee], int | None] | None = None,
    ) -> None:
        self.name, self.argv, self.cwd, self.env, self.tee = name, argv, cwd, env, tee
        self.failing_rank = failing_rank
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._t0 = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        self.tee.note(f"[ascendfactory] {datetime.now():%Y-%m-%d %H:%M:%S} starting step {self.name}")
        self._t0 = time.monotonic()
        self.proc = procgroup.start(self.argv, env=self.env, cwd=self.cwd)
        self._reader = threading.Thread(target=self._read, name=f"tee-{self.name}", daemon=True)
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
        procgroup.stop_leftovers(grace_s=grace_s)
        self.tee.note(f"[ascendfactory] {reason}")

    def finish(self) -> Outcome:
        """Wait for the process and the reader, close the logs and describe the result."""
        rc = self.proc.wait() if self.proc is not None else 0
        stray = procgroup.stop_leftovers(grace_s=5.0)  # e.g. torchrun's workers after the agent died
        if stray:
            self.tee.note(
                f"[ascendfactory] stopped {len(stray)} process(es) step {self.name} left running: "
                + " ".join(map(str, stray))
            )
        if self._reader is not None:
            self._reader.join(timeout=10)
        wall = time.monotonic() - self._t0
        tee = self.tee
        rank = self.failing_rank(tee) if rc != 0 and self.failing_rank is not None else None
        fallback = tee.paths[tee.default]
        log = tee.paths.get(rank) or fallback
        for f in tee.files.values():
            f.flush()
        tail = read_tail(log) if rc != 0 else ""
        if rc != 0 and not tail.strip() and log != fallback:  # the rank died silently (kill -9)
            log = fallback
            tail = read_tail(log)
        tee.note(
            f"[ascendfactory] {datetime.now():%Y-%m-%d %H:%M:%S} step {self.name} exited "
            f"with code {rc} after {wall:.1f}s"
        )
        tee.close()
        logs = [p for k, p in tee.paths.items() if k is not None and k != tee.default] + [fallback]
        return Outcome(returncode=rc, wall_s=wall, log_path=log, logs=logs, rank=rank, tail=tail)
