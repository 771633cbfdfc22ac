"""Child processes in their own process group, stopped as a whole; SIGINT/SIGTERM turned into a clean stop.

Each step runs in a new session (`start_new_session=True`), so its process group id is its pid and a signal
to the group reaches every process it started in that group. torchrun starts each worker in a session of
its own, so stopping a step also walks the process tree (psutil) and signals every descendant's group:
SIGTERM first, then SIGKILL after a grace period for whatever is still alive.

The runner makes itself a child subreaper (Linux): a process of the run whose parent dies (torchrun's
workers after `kill -9` of the agent) becomes the runner's child instead of init's, so `leftovers()`
finds every process of the run, whatever session it moved to, and `stop_leftovers()` ends them.

When the runner itself dies (`kill -9`, the OOM killer), each step it started gets SIGTERM from the kernel
(`PR_SET_PDEATHSIG`; torchrun then stops its workers). Every process of a run also carries the run's tag in
its environment (`RUN_TAG`: the output directory and the runner's pid and start time), so the next run in
the same directory finds whatever is left of a dead runner, in any session, and stops it before it starts
anything (`stop_dead_runs`): two generations of a run never write the same checkpoints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import psutil

DEFAULT_GRACE_S = 10.0


RUN_TAG = "AF_RUN_TAG"  # "<abs output dir>|<runner pid>|<runner start time>", inherited by every process
PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    try:
        import ctypes

        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # resolved once, before any fork: the child only calls it

# A fork with a `preexec_fn` runs the interpreter's at-fork hooks: the "before" hooks, then the fork, then
# the "after in parent" hooks. A module that registers a pair while another thread sits in that window
# (logging does: `before=_acquireLock, after_in_parent=_releaseLock`) gets only the second half and prints
# "Exception ignored in _releaseLock ... cannot release un-acquired lock". So a background import and such
# a fork never overlap: both hold this lock (`import_in_background`, `start`).
_FORK_GUARD = threading.Lock()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def start(argv: list[str], *, env: dict[str, str], cwd: str | None) -> subprocess.Popen[bytes]:
    """Start `argv` (a list, never a shell string) in a new session, stdout and stderr on one pipe; it gets
    SIGTERM if this process dies (only from the main thread, whose exit is the process's)."""
    if not argv:
        raise ValueError("empty argv: in-process steps are not started as subprocesses")
    main = threading.current_thread() is threading.main_thread()
    with _FORK_GUARD:
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if main and _PRCTL is not None else None,  # noqa: PLW1509
        )


def import_guarded(modules: tuple[str, ...]) -> None:
    """Import `modules` (from any thread) while no `start()` forks (see `_FORK_GUARD`); a module that is
    not installed is left to whoever uses it to report."""
    import importlib

    with _FORK_GUARD:
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError:
                pass


def import_in_background(modules: tuple[str, ...], *, name: str) -> threading.Thread:
    """Import `modules` in a daemon thread that no `start()` forks beside (`import_guarded`)."""
    thread = threading.Thread(target=import_guarded, args=(modules,), name=name, daemon=True)
    thread.start()
    return thread


def run_tag(output_dir: str) -> str:
    """This runner's tag for the processes of a run in `output_dir`."""
    me = psutil.Process()
    return f"{os.path.abspath(output_dir)}|{me.pid}|{me.create_time():.3f}"


def _runner_alive(tag: str) -> bool:
    try:
        _, pid, created = tag.rsplit("|", 2)
        runner = psutil.Process(int(pid))
        return f"{runner.create_time():.3f}" == created and _alive(runner)
    except (ValueError, psutil.Error):
        return False


def dead_runs(output_dir: str) -> list[psutil.Process]:
    """Live processes tagged with a run in `output_dir` whose runner is gone (it was killed)."""
    prefix = os.path.abspath(output_dir) + "|"
    me = os.getpid()
    found = []
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        try:
            tag = p.environ().get(RUN_TAG, "")
        except (psutil.Error, OSError):
            continue  # another user's process, or gone
        if tag.startswith(prefix) and not _runner_alive(tag) and _alive(p):
            found.append(p)
    return found


def stop_dead_runs(output_dir: str, *, grace_s: float = DEFAULT_GRACE_S) -> list[int]:
    """Stop what a dead runner left running in `output_dir` (SIGTERM, SIGKILL after `grace_s`); pids."""
    procs = dead_runs(output_dir)
    if not procs:
        return []
    _signal_all(procs, _groups(procs), signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    if alive:
        _signal_all(alive, _groups(alive), signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in procs]


def tree(pid: int) -> list[psutil.Process]:
    """`pid` and every live descendant (empty when `pid` is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _groups(procs: list[psutil.Process]) -> set[int]:
    out = set()
    for p in procs:
        try:
            out.add(os.getpgid(p.pid))
        except OSError:
            pass
    return out


def _signal_all(procs: list[psutil.Process], groups: set[int], sig: int) -> None:
    me = os.getpgid(0)
    for g in groups - {me}:
        try:
            os.killpg(g, sig)
        except OSError:
            pass
    for p in procs:  # members that left their group (setsid) without a child of their own
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def stop(proc: subprocess.Popen[bytes], *, grace_s: float = DEFAULT_GRACE_S) -> None:
    """SIGTERM the step's group and every descendant's group; SIGKILL survivors after `grace_s`."""
    procs = tree(proc.pid)
    groups = _groups(procs) | {proc.pid}
    _signal_all(procs, groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        procs = [p for p in procs if _alive(p)] + [c for c in tree(proc.pid)[1:] if c not in procs]
        if not procs and proc.poll() is not None:
            break
        time.sleep(0.05)
    survivors = [p for p in procs if _alive(p)] + tree(proc.pid)
    if survivors:
        _signal_all(survivors, _groups(survivors) | groups, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state); nothing else to do
        pass
    for p in survivors:
        try:
            p.wait(timeout=2)
        except (psutil.Error, psutil.TimeoutExpired):
            pass


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux prctl); False where the platform cannot."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def leftovers() -> list[psutil.Process]:
    """Every live descendant of this process (with the subreaper set: orphans of the run included)."""
    try:
        return [p for p in psutil.Process().children(recursive=True) if _alive(p)]
    except psutil.Error:
        return []


def stop_leftovers(*, grace_s: float = DEFAULT_GRACE_S) -> list[int]:
    """SIGTERM every descendant still alive, SIGKILL survivors after `grace_s`, reap them; their pids."""
    procs = leftovers()
    if not procs:
        return []
    _signal_all(procs, _groups(procs), signal.SIGTERM)
    gone, alive = psutil.wait_procs(procs, timeout=grace_s)
    if alive:
        _signal_all(alive, _groups(alive), signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in procs]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Interrupt:
    """Which signal asked the run to stop (None while none did); shared by the runner's loops."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.event = threading.Event()

    def set(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        self.event.set()

    def sleep(self, seconds: float) -> bool:
        """Sleep unless interrupted; True when the sleep ran out without a signal."""
        return not self.event.wait(seconds)


@contextmanager
def trap_signals(interrupt: Interrupt) -> Iterator[Interrupt]:
    """Route SIGINT and SIGTERM to `interrupt` for the duration (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield interrupt
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        interrupt.set(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield interrupt
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
