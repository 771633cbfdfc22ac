"""Megatron checkpoint directories: the tracker, complete iterations, resume decisions, retention."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass

TRACKER = "latest_checkpointed_iteration.txt"
_ITER = re.compile(r"^iter_(\d{7})$")


@dataclass(frozen=True)
class CheckpointState:
    root: str
    tracker: int | str | None  # int, 'release', or None (no/invalid tracker)
    iterations: tuple[int, ...]  # complete iter_* directories present, ascending

    @property
    def resumable(self) -> bool:
        """The tracker names an iteration whose directory exists (spec section 4, rule 2)."""
        return isinstance(self.tracker, int) and self.tracker in self.iterations


def read_tracker(root: str) -> int | str | None:
    path = os.path.join(root, TRACKER)
    try:
        text = open(path, encoding="utf-8").read().strip()
    except OSError:
        return None
    if text == "release":
        return text
    return int(text) if text.isdigit() and int(text) > 0 else None


def iteration_dirs(root: str) -> list[int]:
    """Iterations with an `iter_%07d` directory holding at least one model file (no temp dirs)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = []
    for name in names:
        m = _ITER.match(name)
        if not m:
            continue
        d = os.path.join(root, name)
        if any(os.path.isfile(os.path.join(d, sub, "model_optim_rng.pt"))
               for sub in os.listdir(d) if sub.startswith("mp_rank_")):
            out.append(int(m.group(1)))
    return sorted(out)


def inspect(root: str) -> CheckpointState:
    return CheckpointState(root=root, tracker=read_tracker(root), iterations=tuple(iteration_dirs(root)))


def apply_retention(root: str, keep: int) -> list[str]:
    """Keep the newest `keep` iter_* dirs (0 keeps all). Never deletes the tracker's iteration.

    Only complete directories are candidates, so one being written (a temp name) is never touched.
    Returns the removed paths.
    """
    if keep <= 0:
        return []
    state = inspect(root)
    protected = {state.tracker} if isinstance(state.tracker, int) else set()
    candidates = [it for it in state.iterations if it not in protected]
    n_remove = len(state.iterations) - keep
    removed = []
    for it in candidates[: max(n_remove, 0)]:
        path = os.path.join(root, f"iter_{it:07d}")
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
