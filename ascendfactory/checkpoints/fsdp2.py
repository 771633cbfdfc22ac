"""The `mindspeed_fsdp2` checkpoint scheme: MindSpeed-LLM's FSDP2 trainer (`train_fsdp2.py`, 26.0.0+).

The trainer (MindSpeed-LLM 26.1.0 mindspeed_llm/fsdp2/train/trainer.py `Trainer.train`) saves every
`save_steps` optimizer steps, and at the end of every `save_epochs`-th epoch, into
`<training.output_dir>/checkpoints/global_step_N/`; its `CheckpointManager.save`
(mindspeed_llm/fsdp2/checkpoint/checkpoint_manager.py) writes `extra_state/extra_state_rank_R.pt` first (the
step counters, LR scheduler, RNG; not with `save_only_model`), then the model and optimizer through
torch.distributed.checkpoint, whose coordinator writes `.metadata` last, after every shard. There is no
tracker: `training.resume_from_checkpoint` names the folder to continue.

A checkpoint is *complete* when its `.metadata` exists. It *resumes* training (step counters, optimizer)
when it also holds `extra_state/`; a `save_only_model` checkpoint loads weights only and the trainer starts
again at step 0. Retention is the trainer's own (`training.save_total_limit`, `cleanup_old_checkpoints` in
mindspeed_llm/fsdp2/checkpoint/utils.py: the oldest folders by modification time); `apply_retention` is the
same rule on complete checkpoints for a runner that asks."""

from __future__ import annotations

import os
import re
import shutil

from ascendfactory.checkpoints.numbered import numbered_dirs

FOLDER = "checkpoints"  # under training.output_dir
PREFIX = "global_step_"
DCP_METADATA = ".metadata"  # torch.distributed.checkpoint's metadata file, written last
EXTRA_STATE = "extra_state"  # step counters, scheduler and RNG (checkpoint_manager.py _EXTRA_STATE_DIR)
_STEP = re.compile(r"^global_step_(\d+)$")


def root_of(output_dir: str) -> str:
    """Where the trainer saves: `<output_dir>/checkpoints`."""
    return os.path.join(output_dir, FOLDER)


def complete(path: str) -> bool:
    return os.path.isfile(os.path.join(path, DCP_METADATA))


def resumable(path: str) -> bool:
    """A complete checkpoint that continues training (not a `save_only_model` one)."""
    return complete(path) and os.path.isdir(os.path.join(path, EXTRA_STATE))


def steps(root: str) -> list[tuple[int, str, bool]]:
    """(N, path, complete) of every `global_step_N` under `root`, oldest first."""
    return numbered_dirs(root, _STEP, complete)


def newest_resumable(root: str) -> tuple[int, str] | None:
    """(step, path) of the newest checkpoint that continues training, or None."""
    found = [(n, path) for n, path, done in steps(root) if done and resumable(path)]
    return found[-1] if found else None


class FSDP2Scheme:
    """The `mindspeed_fsdp2` checkpoint scheme, as the runner uses it (no tracker to repair)."""

    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        newest = newest_resumable(root)
        return (os.path.basename(newest[1]) if newest else None), None

    def apply_retention(self, root: str, keep: int) -> list[str]:
        done = [path for _, path, ok in steps(root) if ok]
        removed = done[: max(0, len(done) - keep)] if keep > 0 else []
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        return removed


SCHEME = FSDP2Scheme()
