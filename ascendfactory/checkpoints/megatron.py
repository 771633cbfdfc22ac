"""Megatron checkpoint directories: the tracker, complete iterations, resume decisions, retention.

A Megatron save directory holds `iter_%07d/` folders plus the tracker `latest_checkpointed_iteration.txt`.
Inside an iteration, by format (Megatron-LM core_v0.12.1 megatron/training/checkpointing.py
`_get_checkpoint_format`, which decides the format of a checkpoint on disk the same way):

    torch       mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt   (core_r0.8.0's only layout; --ckpt-format torch)
    torch_dist  metadata.json, common.pt, __R_S.distcp, .metadata  (core_v0.12.1's default; dist_checkpointing
                writes metadata.json last, after every shard: serialization.py `save`, step 7)
    torch_dcp   .metadata and the shards of torch.distributed.checkpoint

A *complete* iteration is an `iter_%07d` directory (never a temp name such as `iter_0000010.tmp`) with at
least one torch shard file, or the file a distributed format writes last (metadata.json, .metadata).
docs/sources.md#resume-and-fault-recovery: resume loads the tracker's iteration, which must name an existing
directory; fault recovery uses the largest complete iteration.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass

from ascendfactory.checkpoints.numbered import numbered_dirs

TRACKER = "latest_checkpointed_iteration.txt"
SHARD_FILE = "model_optim_rng.pt"
DIST_CONFIG = "metadata.json"  # megatron/core/dist_checkpointing/core.py CONFIG_FNAME
DCP_METADATA = ".metadata"  # torch.distributed.checkpoint's metadata file
SAVED_MARKER = "successfully saved checkpoint"  # Megatron's log line after a save (retention trigger)
_ITER = re.compile(r"^iter_(\d{7})$")


@dataclass(frozen=True)
class CheckpointState:
    root: str
    tracker: int | str | None  # int, 'release', or None (no/invalid tracker)
    iterations: tuple[int, ...]  # complete iter_* directories present, ascending

    @property
    def resumable(self) -> bool:
        """The tracker names an iteration whose directory exists (docs/sources.md, resume)."""
        return isinstance(self.tracker, int) and self.tracker in self.iterations

    @property
    def newest(self) -> int | None:
        """The largest complete iteration (what fault recovery resumes from), or None."""
        return self.iterations[-1] if self.iterations else None


def iteration_name(iteration: int) -> str:
    """`iter_%07d`, Megatron's folder name for one saved iteration."""
    return f"iter_{int(iteration):07d}"


def iteration_path(root: str, iteration: int) -> str:
    return os.path.join(root, iteration_name(iteration))


def tracker_text(root: str | os.PathLike) -> str | None:
    """The stripped content of `<root>/latest_checkpointed_iteration.txt`, None when there is no such file."""
    try:
        with open(os.path.join(root, TRACKER), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def parse_tracker(text: str) -> int | str | None:
    """Megatron's rule: an iteration > 0, or the literal 'release'; anything else is None (invalid)."""
    if text == "release":
        return text
    return int(text) if text.isdigit() and int(text) > 0 else None


def read_tracker(root: str) -> int | str | None:
    """The tracker's value, None when it is missing or invalid (callers that must fail say why themselves)."""
    text = tracker_text(root)
    return None if text is None else parse_tracker(text)


def write_tracker(root: str | os.PathLike, iteration: int) -> None:
    """Write the tracker atomically (temp file + rename), as a crash must never leave it half-written."""
    tmp = os.path.join(root, TRACKER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(int(iteration)))
    os.replace(tmp, os.path.join(root, TRACKER))


def checkpoint_format(path: str) -> str | None:
    """The format of the iteration folder `path` (torch_dist, torch, torch_dcp, Megatron's order), None
    when it holds none of them complete."""
    try:
        subs = os.listdir(path)
    except OSError:
        return None
    if DIST_CONFIG in subs and os.path.isfile(os.path.join(path, DIST_CONFIG)):
        return "torch_dist"
    if any(
        sub.startswith("mp_rank_") and os.path.isfile(os.path.join(path, sub, SHARD_FILE)) for sub in subs
    ):
        return "torch"
    if DCP_METADATA in subs:
        return "torch_dcp"
    return None


def _complete(path: str) -> bool:
    return checkpoint_format(path) is not None


def iteration_dirs(root: str) -> list[int]:
    """Iterations with an `iter_%07d` directory holding at least one model file (no temp dirs)."""
    return [n for n, _, complete in numbered_dirs(root, _ITER, _complete) if complete]


def inspect(root: str) -> CheckpointState:
    return CheckpointState(root=root, tracker=read_tracker(root), iterations=tuple(iteration_dirs(root)))


def repair_tracker(root: str) -> tuple[CheckpointState, str | None]:
    """Make the tracker name the newest complete iteration when it is missing or names a missing dir.

    A tracker that names an existing iteration is left alone (the user may have edited it to pick an earlier
    one, docs/sources.md#resume-and-fault-recovery). Returns the state after the repair and a sentence
    describing what was changed (None when nothing was).
    """
    state = inspect(root)
    if state.resumable or state.tracker == "release" or state.newest is None:
        return state, None
    before = (
        "missing"
        if state.tracker is None
        else f"names iteration {state.tracker}, which has no complete directory"
    )
    write_tracker(root, state.newest)
    return inspect(root), (
        f"{TRACKER} was {before}; rewrote it to {state.newest} "
        f"(newest complete checkpoint {iteration_name(state.newest)})"
    )


def retention_candidates(state: CheckpointState, keep: int) -> list[int]:
    """Iterations `apply_retention` would delete: the oldest complete ones beyond the newest `keep`.

    Protected: the tracker's iteration, and every iteration newer than the tracker (it may still be
    being written: Megatron writes the directory first and the tracker last). Without a valid tracker
    nothing is deleted, since which directory is in use cannot be told.
    """
    if keep <= 0 or not isinstance(state.tracker, int):
        return []
    kept = [it for it in state.iterations if it <= state.tracker]
    return kept[: max(len(kept) - keep, 0)] if state.tracker in kept else []


def apply_retention(root: str, keep: int) -> list[str]:
    """Keep the newest `keep` complete iter_* dirs (0 keeps all); returns the removed paths.

    Never deletes the tracker's iteration or one newer than it (possibly being written); temp
    directories are never candidates.
    """
    removed = []
    for it in retention_candidates(inspect(root), keep):
        path = iteration_path(root, it)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class MegatronScheme:
    """The `megatron` checkpoint scheme, as the runner uses it."""

    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        state, repaired = repair_tracker(root)
        start = iteration_name(state.tracker) if state.resumable else None  # type: ignore[arg-type]
        return start, repaired

    def apply_retention(self, root: str, keep: int) -> list[str]:
        return apply_retention(root, keep)


SCHEME = MegatronScheme()
