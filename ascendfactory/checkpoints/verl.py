"""The `verl` checkpoint scheme: `global_step_N/` directories plus `latest_checkpointed_iteration.txt`.

verl's PPO trainer (`trainer/ppo/v1/trainer_base.py::_save_checkpoint`, 0.9.1) saves into
`<trainer.default_local_dir>/global_step_N/`: `actor/` (the actor's checkpoint manager), `critic/` (PPO
with a critic), `data.pt` (the dataloader state, written after them), then rewrites the tracker
`latest_checkpointed_iteration.txt` to `N` (just the integer). `resume_mode=auto` reads the tracker and
resumes from `global_step_<tracker>` only when that directory exists; otherwise it starts over.

A step is *complete* when `data.pt` exists and its `actor/` (and `critic/`, if present) is complete:

- FSDP: `fsdp_config.json` names the world size W and every `model_world_size_W_rank_r.pt` exists;
- Megatron: `ckpt_contents.json` exists (rank 0 writes it, through a temporary file, after the shards).

`repair_tracker` points a missing tracker, or one naming a missing or incomplete step, at the newest
complete step (a tracker naming a complete step is left alone: the user may have chosen an earlier one).
`apply_retention(root, keep)` keeps the newest `keep` complete steps up to the tracker's, removes older
ones, and removes the remains verl's own rotation (`max_actor_ckpt_to_keep`) leaves behind (an older
`global_step_N/` whose `actor/` it deleted); it never touches the tracker's step or a newer one (it may be
being written), and does nothing without a valid tracker.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass

from ascendfactory.checkpoints.numbered import numbered_dirs

TRACKER = "latest_checkpointed_iteration.txt"
PREFIX = "global_step_"
_STEP = re.compile(r"^global_step_(\d+)$")
MEGATRON_MANIFEST = "ckpt_contents.json"


def step_name(step: int) -> str:
    return f"{PREFIX}{int(step)}"


def role_complete(path: str) -> bool:
    """An actor/critic directory written to the end (FSDP shards, or Megatron's contents manifest)."""
    if os.path.isfile(os.path.join(path, MEGATRON_MANIFEST)):
        return True
    try:
        with open(os.path.join(path, "fsdp_config.json"), encoding="utf-8") as f:
            world = int(json.load(f)["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return world > 0 and all(
        os.path.isfile(os.path.join(path, f"model_world_size_{world}_rank_{r}.pt")) for r in range(world)
    )


def step_complete(path: str) -> bool:
    if not os.path.isfile(os.path.join(path, "data.pt")):
        return False
    if not role_complete(os.path.join(path, "actor")):
        return False
    critic = os.path.join(path, "critic")
    return not os.path.isdir(critic) or role_complete(critic)


def steps(root: str) -> list[tuple[int, str, bool]]:
    """(N, path, complete) of every `global_step_N` directory under `root`, oldest first."""
    return numbered_dirs(root, _STEP, step_complete)


def read_tracker(root: str) -> int | None:
    """The tracker's step (a whole number >= 0 as verl writes it), None when missing or unreadable."""
    try:
        with open(os.path.join(root, TRACKER), encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def write_tracker(root: str, step: int) -> None:
    tmp = os.path.join(root, TRACKER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(int(step)))
    os.replace(tmp, os.path.join(root, TRACKER))


@dataclass(frozen=True)
class State:
    root: str
    tracker: int | None
    complete: tuple[int, ...]  # complete steps, ascending

    @property
    def resumable(self) -> bool:
        return self.tracker is not None and self.tracker in self.complete

    @property
    def newest(self) -> int | None:
        return self.complete[-1] if self.complete else None


def inspect(root: str) -> State:
    return State(root, read_tracker(root), tuple(n for n, _, done in steps(root) if done))


def newest_complete(root: str) -> str | None:
    """The path of the step a resume starts from: the tracker's when complete, else the newest complete."""
    state = inspect(root)
    step = state.tracker if state.resumable else state.newest
    return os.path.join(root, step_name(step)) if step is not None else None


def repair_tracker(root: str) -> tuple[State, str | None]:
    state = inspect(root)
    if state.resumable or state.newest is None:
        return state, None
    before = (
        "missing"
        if state.tracker is None
        else f"names step {state.tracker}, which has no complete {step_name(state.tracker)}/"
    )
    write_tracker(root, state.newest)
    return inspect(root), (
        f"{TRACKER} was {before}; rewrote it to {state.newest} (newest complete checkpoint "
        f"{step_name(state.newest)}, which verl's resume_mode=auto then loads)"
    )


def retention_candidates(root: str, keep: int) -> list[str]:
    """Paths `apply_retention` would remove (see the module docstring)."""
    state = inspect(root)
    tracker = state.tracker
    if keep <= 0 or tracker is None or tracker not in state.complete:
        return []
    kept = [n for n in state.complete if n <= tracker]
    drop = set(kept[: max(len(kept) - keep, 0)])
    oldest_kept = min(set(kept) - drop)
    leftovers = {n for n, _, done in steps(root) if not done and n < oldest_kept}
    return [os.path.join(root, step_name(n)) for n in sorted(drop | leftovers)]


def apply_retention(root: str, keep: int) -> list[str]:
    removed = retention_candidates(root, keep)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


class VerlScheme:
    """The `verl` checkpoint scheme, as the runner uses it."""

    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        state, repaired = repair_tracker(root)
        return (step_name(state.tracker) if state.resumable else None), repaired  # type: ignore[arg-type]

    def apply_retention(self, root: str, keep: int) -> list[str]:
        return apply_retention(root, keep)


SCHEME = VerlScheme()
