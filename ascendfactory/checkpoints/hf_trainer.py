"""The `hf_trainer` checkpoint scheme: the Hugging Face Trainer's `checkpoint-N/` directories (LLaMA-Factory).

A checkpoint is complete when its `trainer_state.json` exists: the Trainer writes it last, after the
weights, optimizer, scheduler and RNG state. There is no tracker file: the Trainer's own
`get_last_checkpoint` takes the highest number whether complete or not, so a plan resumes from
`newest_complete(root)` explicitly.
"""

from __future__ import annotations

import os
import re
import shutil

from ascendfactory.checkpoints.numbered import numbered_dirs

PREFIX = "checkpoint-"
_NAME = re.compile(r"^checkpoint-(\d+)$")
COMPLETE_MARKER = "trainer_state.json"


def checkpoints(root: str) -> list[tuple[int, str, bool]]:
    """(step, path, complete) of every `checkpoint-N` under `root`, oldest first."""
    return numbered_dirs(root, _NAME, lambda path: os.path.isfile(os.path.join(path, COMPLETE_MARKER)))


def newest_complete(root: str) -> str | None:
    """The path of the newest complete checkpoint, or None."""
    complete = [path for _, path, done in checkpoints(root) if done]
    return complete[-1] if complete else None


class HFTrainerScheme:
    """The `hf_trainer` checkpoint scheme, as the runner uses it."""

    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        newest = newest_complete(root)
        return (os.path.basename(newest) if newest else None), None

    def apply_retention(self, root: str, keep: int) -> list[str]:
        complete = [path for _, path, done in checkpoints(root) if done]
        removed = complete[: max(0, len(complete) - keep)] if keep > 0 else []
        for path in removed:
            shutil.rmtree(path, ignore_errors=True)
        return removed


SCHEME = HFTrainerScheme()
