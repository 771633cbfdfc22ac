"""Experiment -> Plan: gather the machine facts, then let the experiment's backend plan (nothing started)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ascendfactory.backends import device_fit, ports
from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.device_fit import ACCELERATOR_ENV, device_problems
from ascendfactory.backends.registry import get_backend
from ascendfactory.backends.report_to import add_tracking, missing_clients, with_tracker_keys
from ascendfactory.backends.timing import attach_timing
from ascendfactory.checkpoints import SCHEMES
from ascendfactory.config.devices import resolve_devices_per_node
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.config.topology import with_platform
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.memory.check import MemoryPolicy, check_memory
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.metrics.builtin import FORMAT_NAMES, FORMULA_NAMES
from ascendfactory.plan import Plan, Role
from ascendfactory.registry import Registry, fold


def build_context(loaded: LoadedExperiment, environ: Mapping[str, str] | None = None) -> PlanContext:
    """The machine's facts; `loaded` should have been through `config.topology.with_platform`."""
    environ = dict(os.environ if environ is None else environ)
    devices = resolve_devices_per_node(
        loaded.config.env.NPUS_PER_NODE,
        environ,
        configured_from=loaded.platform_sources.get("env.NPUS_PER_NODE", ""),
        cpu=loaded.config.accelerator == "cpu",
    )
    return PlanContext(loaded=loaded, devices=devices, python=sys.executable, environ=environ)


def make_plan(loaded: LoadedExperiment, *, dry_run: bool, environ: Mapping[str, str] | None = None) -> Plan:
    """Validate and plan. On a dry run, input paths that do not exist here are warnings, not errors.

    Problems found while loading (`loaded.problems`) are reported together with the backend's own, which
    run on the stand-in config unless the backend or the topology itself is in question; a key already
    named by an earlier phase is not named again by a later one."""
    if loaded.problems and not loaded.plannable:
        raise ConfigError(loaded.locate(loaded.problems))
    environ = dict(os.environ if environ is None else environ)
    loaded = with_platform(loaded, environ)  # topology the experiment leaves unset, from the cluster platform
    backend = get_backend(loaded.config.backend, source=loaded.source_of("backend"))
    if loaded.config.backend != backend.name:  # names fold: `MindSpeed_LLM` is mindspeed-llm
        config = loaded.config.model_copy(update={"backend": backend.name})
        loaded = dataclasses.replace(loaded, config=config)
    try:
        keys = backend.trackers_for(loaded.config.stage)
        loaded, trackers = with_tracker_keys(loaded, backend.name, keys)
        ctx = build_context(loaded, environ)
        refused, of_node = device_problems(ctx, backend)
        refused += [] if dry_run else of_node  # a dry run may plan for another machine: it warns
        try:
            plan = backend.plan(ctx, strict_paths=not dry_run)
        except ConfigError as e:
            raise ConfigError(merge_problems(refused, e.problems)) from None
        if refused:
            raise ConfigError(refused)
    except ConfigError as e:
        found = with_sources(loaded, e.problems)
        raise ConfigError(loaded.locate(merge_problems(loaded.problems, found))) from None
    add_tracking(plan, loaded, trackers)
    if loaded.problems:
        raise ConfigError(loaded.locate(loaded.problems))
    clients = missing_clients(plan, trackers, source=loaded.source_of("report_to"))
    if clients:
        raise ConfigError(clients)
    unknown = unregistered_names(plan, backend.name)
    if unknown:
        raise ConfigError(unknown)
    if dry_run:
        plan.warnings += [f"{p.key}: {p.message} (a real run stops here; fix: {p.fix})" for p in of_node]
    if loaded.config.accelerator == "cpu":
        plan.env[ACCELERATOR_ENV] = "cpu"  # the embedded trainers' device choice (engine/train/parallel.py)
    unretryable = (
        *(plan.policy.unretryable or backend.unretryable),
        *ports.UNRETRYABLE,
        *device_fit.UNRETRYABLE,
    )
    plan.policy = dataclasses.replace(plan.policy, unretryable=tuple(dict.fromkeys(unretryable)))
    _check_port(loaded, plan, dry_run=dry_run)
    env = loaded.config.env
    topology = {k: {"value": getattr(env, k), "source": loaded.topology[k]} for k in loaded.topology}
    topology["NPUS_PER_NODE"] = {"value": ctx.devices.count, "source": ctx.devices.source}
    plan.facts["topology"] = topology
    if loaded.platform:
        plan.facts["platform"] = loaded.platform
    target = backend.memory_target(plan.run)
    attach_memory(plan, target, loaded, dry_run=dry_run, environ=environ)
    attach_timing(plan, target, loaded, per_node=ctx.devices.count)
    return plan


def _check_port(loaded: LoadedExperiment, plan: Plan, *, dry_run: bool) -> None:
    """The port this node binds (`ports.bound_port`) in use: a real run stops, a dry run warns."""
    port = ports.bound_port(plan)
    if port is None or not ports.in_use(port):
        return
    message, fix = ports.busy_message(port)
    if dry_run:
        plan.warnings.append(f"{ports.KEY}: {message} (a real run stops here; fix: {fix})")
        return
    raise ConfigError(Problem(key=ports.KEY, message=message, fix=fix, source=loaded.source_of(ports.KEY)))


def attach_memory(
    plan: Plan,
    target: MemoryTarget | None,
    loaded: LoadedExperiment,
    *,
    dry_run: bool,
    environ: Mapping[str, str] | None = None,
) -> None:
    """The pre-launch memory estimate into `plan.memory`; a real run that will not fit is refused here
    (`memory_check.on_exceed: error`), before anything starts. `environ`: this machine's, under the plan's
    own variables (the train step's environment: CUBLAS_WORKSPACE_CONFIG, HCCL_BUFFSIZE, ...)."""
    if target is None:
        return
    mc = loaded.config.memory_check
    policy = MemoryPolicy(
        on_exceed=mc.on_exceed,
        device_memory_gb=mc.device_memory_gb,
        device=mc.device,
        environ=train_environ(plan, environ or {}),
        probe=loaded.config.accelerator != "cpu",  # CPU processes are not held against this node's GPUs
    )
    try:
        estimate, warnings = check_memory(target, policy, dry_run=dry_run)
    except ConfigError as e:
        raise ConfigError(loaded.locate(e.problems)) from None
    plan.memory = estimate.to_dict()
    plan.warnings += warnings


def train_environ(plan: Plan, environ: Mapping[str, str]) -> dict[str, str]:
    """The train step's environment as its processes will see it: this machine's, the plan's own
    variables over it, the step's over those."""
    train = plan.with_role(Role.TRAIN)
    return {**environ, **plan.env, **(train.env if train else {})}


def unregistered_names(plan: Plan, backend: str) -> list[Problem]:
    """The log formats, throughput formula and checkpoint scheme a plan names that no module registered:
    found here, at plan time, instead of when the run starts, saves or ends. A built-in format or formula
    (`metrics.builtin`) is registered without importing the log parsers."""
    logs = plan.logs
    named: list[tuple[str, str | None]] = [
        ("format", logs.format),
        ("format", logs.console_format),
        ("formula", logs.throughput.formula),
        ("scheme", plan.checkpoints.scheme if plan.checkpoints is not None else None),
    ]
    problems = []
    for which, name in named:
        if name is None or (isinstance(name, str) and fold(name) in _BUILTIN.get(which, ())):
            continue
        registry = _registry(which)
        if registry.find(name) is None:
            problems.append(
                Problem(
                    key="backend",
                    message=f"backend '{backend}' plans {registry.kind} '{name}', which no module registered",
                    fix=f"register it with {registry.how} in the backend's package, or use one of: "
                    + ", ".join(registry.names()),
                )
            )
    return problems


_BUILTIN = {
    "format": frozenset(fold(n) for n in FORMAT_NAMES),
    "formula": frozenset(fold(n) for n in FORMULA_NAMES),
}


def _registry(which: str) -> Registry[Any]:
    if which == "format":
        from ascendfactory.metrics.formats import FORMATS

        return FORMATS
    if which == "formula":
        from ascendfactory.metrics.throughput import FORMULAS

        return FORMULAS
    return SCHEMES


def with_sources(loaded: LoadedExperiment, problems: list[Problem]) -> list[Problem]:
    """A backend's problems as the user reads them: one whose source is empty gets its key's
    (`loaded.source_of`: the file, `command line` or a platform variable) when the key is the experiment's;
    a problem about the machine (`(environment)`, an environment variable) keeps none."""
    fields = type(loaded.config).model_fields
    return [
        dataclasses.replace(p, source=loaded.source_of(p.key))
        if not p.source and p.key.split(".")[0] in fields
        else p
        for p in problems
    ]


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
