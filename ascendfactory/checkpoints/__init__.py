"""Checkpoint schemes: how a framework's save directory is read (newest complete checkpoint, tracker repair,
retention), chosen by `CheckpointSpec.scheme` in the plan. One module per scheme, in an open registry
(`register_scheme(name, scheme)`: a backend's module adds its own); the runner only calls `get_scheme(name)`.

    megatron     iter_%07d/mp_rank_TT[_PPP]/model_optim_rng.pt + latest_checkpointed_iteration.txt
    hf_trainer   checkpoint-N/ (complete with trainer_state.json), no tracker
    verl         global_step_N/{actor,critic,data.pt} + latest_checkpointed_iteration.txt
"""

from __future__ import annotations

from typing import Protocol

from ascendfactory.checkpoints import hf_trainer, megatron, verl
from ascendfactory.registry import Registry


class CheckpointScheme(Protocol):
    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        """Point a stale tracker at the newest complete checkpoint: (resume point, what was changed)."""

    def apply_retention(self, root: str, keep: int) -> list[str]:
        """Remove the oldest complete checkpoints beyond the newest `keep`; returns the removed paths."""


SCHEMES: Registry[CheckpointScheme] = Registry(
    "checkpoint scheme",
    key="checkpoints.scheme",
    how="ascendfactory.checkpoints.register_scheme(name, scheme)",
)


def register_scheme(name: str, scheme: CheckpointScheme) -> CheckpointScheme:
    """Add a checkpoint scheme under `name` (a backend's module calls this at import); the name is new."""
    return SCHEMES.register(name, scheme)


def scheme_names() -> list[str]:
    return SCHEMES.names()


def find_scheme(name: str) -> CheckpointScheme | None:
    return SCHEMES.find(name)


def get_scheme(name: str) -> CheckpointScheme:
    return SCHEMES.get(name)


register_scheme("megatron", megatron.SCHEME)
register_scheme("hf_trainer", hf_trainer.SCHEME)
register_scheme("verl", verl.SCHEME)
