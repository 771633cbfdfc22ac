"""Experiment -> Plan: gather the machine facts, then let the experiment's backend plan (nothing started)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.registry import get_backend
from ascendfactory.checkpoints import scheme_names
from ascendfactory.config.devices import resolve_devices_per_node
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.metrics.formats import find_format, format_names
from ascendfactory.metrics.throughput import formula_names
from ascendfactory.plan import Plan


def build_context(loaded: LoadedExperiment, environ: Mapping[str, str] | None = None) -> PlanContext:
    environ = dict(os.environ if environ is None else environ)
    devices = resolve_devices_per_node(loaded.config.env.NPUS_PER_NODE, environ)
    return PlanContext(loaded=loaded, devices=devices, python=sys.executable, environ=environ)


def make_plan(loaded: LoadedExperiment, *, dry_run: bool, environ: Mapping[str, str] | None = None) -> Plan:
    """Validate and plan. On a dry run, input paths that do not exist here are warnings, not errors.

    Problems found while loading (`loaded.problems`) are reported together with the backend's own, which
    run on the stand-in config unless the backend or the topology itself is in question; a key already
    named by an earlier phase is not named again by a later one."""
    if loaded.problems and not loaded.plannable:
        raise ConfigError(loaded.locate(loaded.problems))
    ctx = build_context(loaded, environ)
    backend = get_backend(loaded.config.backend, source=loaded.source_of("backend"))
    try:
        plan = backend.plan(ctx, strict_paths=not dry_run)
    except ConfigError as e:
        raise ConfigError(loaded.locate(merge_problems(loaded.problems, e.problems))) from None
    if loaded.problems:
        raise ConfigError(loaded.locate(loaded.problems))
    unknown = unregistered_names(plan, backend.name)
    if unknown:
        raise ConfigError(unknown)
    if backend.unretryable and not plan.policy.unretryable:
        import dataclasses

        plan.policy = dataclasses.replace(plan.policy, unretryable=backend.unretryable)
    plan.facts.setdefault("devices_source", ctx.devices.source)
    return plan


def unregistered_names(plan: Plan, backend: str) -> list[Problem]:
    """The log formats, throughput formula and checkpoint scheme a plan names that no module registered:
    found here, at plan time, instead of when the run starts, saves or ends."""
    logs, problems = plan.logs, []

    def refuse(what: str, name: str, register: str, known: list[str]) -> None:
        problems.append(
            Problem(
                key="backend",
                message=f"backend '{backend}' plans {what} '{name}', which no module registered",
                fix=f"register it with {register} in the backend's package, or use one of: "
                + ", ".join(known),
            )
        )

    for fmt in (logs.format, logs.console_format):
        if fmt is not None and find_format(fmt) is None:
            refuse("log format", fmt, "ascendfactory.metrics.formats.register_format", format_names())
    if logs.throughput.formula not in formula_names():
        refuse(
            "throughput formula",
            logs.throughput.formula,
            "ascendfactory.metrics.throughput.register_formula",
            formula_names(),
        )
    if plan.checkpoints is not None and plan.checkpoints.scheme not in scheme_names():
        refuse(
            "checkpoint scheme",
            plan.checkpoints.scheme,
            "ascendfactory.checkpoints.register_scheme",
            scheme_names(),
        )
    return problems


def merge_problems(first: list[Problem], later: list[Problem]) -> list[Problem]:
    """`first`, then each of `later` whose key is not (inside) a key `first` names already."""
    named = {p.key for p in first}
    return [
        *first,
        *(p for p in later if not any(p.key == k or p.key.startswith(k + ".") for k in named)),
    ]


def replanner(loaded: LoadedExperiment) -> Callable[[], Plan]:
    """What the runner calls to re-plan after a failure (auto-resume): the same experiment, planned again
    against the files as they are now (the newest checkpoint)."""
    return lambda: make_plan(loaded, dry_run=False)
