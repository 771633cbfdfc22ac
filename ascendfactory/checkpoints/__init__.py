"""Checkpoint schemes: how a framework's save directory is read (newest complete checkpoint, tracker repair,
retention), chosen by `CheckpointSpec.scheme` in the plan. One module per scheme, in an open registry
(`register_scheme(name, scheme)`: a backend's module adds its own); the runner only calls `get_scheme(name)`.

    megatron     iter_%07d/ (mp_rank_TT[_PPP]/model_optim_rng.pt, or torch_dist's files)
                 + latest_checkpointed_iteration.txt
    hf_trainer   checkpoint-N/ (complete with trainer_state.json), no tracker
    verl         global_step_N/{actor,critic,data.pt} + latest_checkpointed_iteration.txt
    mindspeed_fsdp2  checkpoints/global_step_N/ (torch.distributed.checkpoint, complete with .metadata),
                 no tracker
"""

from __future__ import annotations

import importlib
from typing import Protocol

from ascendfactory.registry import Registry, fold

# scheme name -> the module of this package holding its `SCHEME`
BUILTIN = {"megatron": "megatron", "hf_trainer": "hf_trainer", "verl": "verl", "mindspeed_fsdp2": "fsdp2"}


class CheckpointScheme(Protocol):
    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        """Point a stale tracker at the newest complete checkpoint: (resume point, what was changed)."""

    def apply_retention(self, root: str, keep: int) -> list[str]:
        """Remove the oldest complete checkpoints beyond the newest `keep`; returns the removed paths."""


def _locate(name: str) -> None:
    """A built-in scheme's module, imported when its name is first asked for (a plan needs one)."""
    if fold(name) in BUILTIN and fold(name) not in SCHEMES.registered():
        module = importlib.import_module(f"ascendfactory.checkpoints.{BUILTIN[fold(name)]}")
        register_scheme(fold(name), module.SCHEME)


def _import_all() -> None:
    for name in BUILTIN:
        _locate(name)


SCHEMES: Registry[CheckpointScheme] = Registry(
    "checkpoint scheme",
    key="checkpoints.scheme",
    how="ascendfactory.checkpoints.register_scheme(name, scheme)",
    locate=_locate,
    everything=_import_all,
)


def register_scheme(name: str, scheme: CheckpointScheme) -> CheckpointScheme:
    """Add a checkpoint scheme under `name` (a backend's module calls this at import); the name is new."""
    return SCHEMES.register(name, scheme)


def get_scheme(name: str) -> CheckpointScheme:
    return SCHEMES.get(name)
