"""The scheduler registry: the built-in records (Slurm, the Kubernetes kinds) in listing order, a plugin's
from its entry point (`ascendfactory.registry`); `submit` builds one command per `Scheduler.command`."""

from __future__ import annotations

from ascendfactory.submit import k8s, slurm
from ascendfactory.submit.scheduler import SCHEDULERS, Scheduler

__all__ = ["SCHEDULERS", "commands", "get_scheduler", "register_scheduler"]


def register_scheduler(scheduler: Scheduler) -> Scheduler:
    """Add a scheduler (a plugin's module calls this at import). Its name must be new."""
    return SCHEDULERS.register(scheduler.name, scheduler)


for _builtin in (slurm.SCHEDULER, k8s.VOLCANO, k8s.PYTORCHJOB):
    register_scheduler(_builtin)


def get_scheduler(name: str, *, key: str = "--scheduler") -> Scheduler:
    return SCHEDULERS.get(name, key=key)


def commands() -> dict[str, list[Scheduler]]:
    """`submit` sub-command -> its schedulers (several: they are its `--kind`s), every plugin's included."""
    out: dict[str, list[Scheduler]] = {}
    for scheduler in SCHEDULERS.entries():
        out.setdefault(scheduler.command_name, []).append(scheduler)
    return out
