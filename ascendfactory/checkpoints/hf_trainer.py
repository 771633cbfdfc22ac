"""The `hf_trainer` checkpoint scheme: the Hugging Face Trainer's `checkpoint-N/` directories (LLaMA-Factory).

A checkpoint is complete when its `trainer_state.json` exists: the Trainer writes it last, after the
weights, optimizer, scheduler and RNG state. There is no tracker file: the Trainer's own
`get_last_checkpoint` takes the highest number whether complete or not, so a plan resumes from
`newest_complete(root)` explicitly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any

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


HF_DEFAULT_EPOCHS = 3.0  # TrainingArguments.num_train_epochs


def finished_at(checkpoint: str, *, max_steps: Any = None, num_train_epochs: Any = None) -> int | None:
    """The step of `checkpoint` when the run it belongs to has nothing left to train, else None.

    The training keys are the run's own: `max_steps` > 0 ends it there; otherwise the Trainer's own end
    (`trainer_state.json`'s `max_steps`) counts when `num_train_epochs` is the one that end was computed
    for. Resuming a finished checkpoint is not a no-op for the Trainer: it trains one more step."""
    try:
        with open(os.path.join(checkpoint, COMPLETE_MARKER), encoding="utf-8") as f:
            state = json.load(f)
        step = int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        wanted = int(max_steps) if max_steps is not None else -1
    except (TypeError, ValueError):
        return None
    if wanted > 0:
        return step if step >= wanted else None
    try:
        epochs = float(num_train_epochs) if num_train_epochs is not None else HF_DEFAULT_EPOCHS
        same_epochs = float(state.get("num_train_epochs")) == epochs
        end = int(state.get("max_steps"))
    except (TypeError, ValueError):
        return None
    return step if same_epochs and 0 < end <= step else None


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
