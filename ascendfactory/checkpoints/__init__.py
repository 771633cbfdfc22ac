"""Checkpoint schemes: how a framework's save directory is read (newest complete checkpoint, tracker repair,
retention), chosen by `CheckpointSpec.scheme` in the plan. One module per scheme; the runner only calls
`get_scheme(name)`.

    megatron     iter_%07d/mp_rank_TT[_PPP]/model_optim_rng.pt + latest_checkpointed_iteration.txt
    hf_trainer   checkpoint-N/ (complete with trainer_state.json), no tracker
    verl         global_step_N/{actor,critic,data.pt} + latest_checkpointed_iteration.txt
"""

from __future__ import annotations

from typing import Protocol

from ascendfactory.checkpoints import hf_trainer, megatron, verl


class CheckpointScheme(Protocol):
    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        """Point a stale tracker at the newest complete checkpoint: (resume point, what was changed)."""

    def apply_retention(self, root: str, keep: int) -> list[str]:
        """Remove the oldest complete checkpoints beyond the newest `keep`; returns the removed paths."""


SCHEMES: dict[str, CheckpointScheme] = {
    "megatron": megatron.SCHEME,
    "hf_trainer": hf_trainer.SCHEME,
    "verl": verl.SCHEME,
}


def get_scheme(name: str) -> CheckpointScheme:
    if name not in SCHEMES:
        raise KeyError(f"unknown checkpoint scheme '{name}'; known: {', '.join(SCHEMES)}")
    return SCHEMES[name]
