"""`report_to` -> each framework's own tracker keys, the plan's `Tracking`, and the clients it needs.

How a framework reaches a tracker is data (`TrackerKeys`), from one of three places, first found wins:
the backend's own `tracker_keys` row for the tracker (the framework's spelling), the tracker record's row
for the backend (`Tracker.keys`: a tracker brought by a plugin reaches a backend without touching it), or the
backend's `*` row (`ANY_TRACKER`) for a tracker its embedded trainer opens itself (`Tracker.from_env`).
The planner fills those keys in before the backend plans, so the framework's own key checks see them and
the generated config or argv carries them; a key the user already wrote wins and is not duplicated, an
item already in a list key is not added twice. The trackers' own environment variables
(`Tracker.env`) go to every step, under the experiment's own `env` keys.

A tracker's client (`Tracker.client`: the module the framework's integration imports) must be in the
environment that runs the training: checked when planning (a dry run too), naming the install command
(`AF_TRACKERS=... sh install.sh <backend>` for a framework in an environment of its own).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from ascendfactory.config.load import LoadedExperiment
from ascendfactory.config.report_to import tracker_specs
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.output_tree import OutputTree
from ascendfactory.plan import Plan, Process, Role, TrackerSpec, Tracking
from ascendfactory.secrets import mask_secrets
from ascendfactory.trackers.keys import ANY_TRACKER, TrackerKeys

__all__ = ["ANY_TRACKER", "TrackerKeys", "add_tracking", "missing_clients", "with_tracker_keys"]

CLIENT_PROBE_TIMEOUT_S = 60


def _value(template: Any, spec: TrackerSpec) -> Any:
    if not isinstance(template, str):
        return template
    return template.format(
        name=spec.name, project=spec.project, run_name=spec.run_name, location=spec.location, mode=spec.mode
    )


def _parent(tree: dict[str, Any], dotted: str) -> tuple[dict[str, Any] | None, str]:
    """The mapping that holds `dotted`'s last part (created when missing); None when a part is no mapping."""
    *path, last = dotted.split(".")
    node = tree
    for part in path:
        child = node.setdefault(part, {})
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            return None, last
        node = child
    return node, last


def fill_keys(
    backend_config: dict[str, Any], specs: tuple[TrackerSpec, ...], keys: Mapping[str, TrackerKeys]
) -> dict[str, Any]:
    """A copy of `backend_config` with each tracker's keys filled in where the user left them out."""
    tree = copy.deepcopy(backend_config)
    for spec in specs:
        mapping = keys[spec.name]
        for dotted, template in mapping.set.items():
            node, last = _parent(tree, dotted)
            if node is not None and node.get(last) is None:
                node[last] = _value(template, spec)
        for dotted, template in mapping.append.items():
            node, last = _parent(tree, dotted)
            if node is None:
                continue
            item = _value(template, spec)
            given = node.get(last)
            items = [] if given is None else [given] if isinstance(given, str) else list(given)
            if "none" in items:  # the user turned the framework's reporting off in its own spelling
                continue
            if item not in items:
                node[last] = [*items, item]
    return tree


def row_for(own: Mapping[str, TrackerKeys], backend: str, tracker: str) -> TrackerKeys | None:
    """How `backend` reaches `tracker` (module docstring: its own row, the tracker's, its `*` row)."""
    from ascendfactory.trackers.registry import get_tracker

    record = get_tracker(tracker)
    if tracker in own:
        return own[tracker]
    if backend in record.keys:
        return record.keys[backend]
    if ANY_TRACKER in own and record.from_env is not None and record.open is not None:
        return own[ANY_TRACKER]
    return None


def reachable(own: Mapping[str, TrackerKeys], backend: str) -> list[str]:
    from ascendfactory.trackers.registry import tracker_names

    return [name for name in tracker_names() if row_for(own, backend, name) is not None]


def unreachable(
    loaded: LoadedExperiment, backend: str, specs: tuple[TrackerSpec, ...], own: Mapping[str, TrackerKeys]
) -> list[Problem]:
    missing = [s for s in specs if row_for(own, backend, s.name) is None]
    if not missing:
        return []
    reaches = ", ".join(reachable(own, backend)) or "none"
    return [
        Problem(
            key=f"report_to.{s.name}",
            message=f"backend {backend} cannot report to {s.name}: its framework has no {s.name} integration",
            fix=f"remove {s.name} from report_to; {backend} reaches: {reaches}",
            source=loaded.source_of("report_to"),
        )
        for s in missing
    ]


def with_tracker_keys(
    loaded: LoadedExperiment, backend: str, own: Mapping[str, TrackerKeys]
) -> tuple[LoadedExperiment, tuple[TrackerSpec, ...]]:
    """The experiment with its trackers' framework keys filled in, and the resolved trackers. `own`: the
    backend's `trackers_for(stage)`."""
    cfg = loaded.config
    tb_dir = cfg.tensorboard.tensorboard_dir if cfg.tensorboard else None
    specs = tracker_specs(
        cfg.report_to,
        output_dir=cfg.af_output_dir,
        model_name=cfg.af_model_name,
        exp_name=cfg.exp_name,
        tensorboard_dir=tb_dir,
    )
    if not specs:
        return loaded, specs
    problems = unreachable(loaded, backend, specs, own)
    if problems:
        raise ConfigError(problems)
    keys: dict[str, TrackerKeys] = {}
    for s in specs:
        row = row_for(own, backend, s.name)
        assert row is not None  # unreachable() above
        keys[s.name] = row
    filled = fill_keys(cfg.backend_config, specs, keys)
    specs = tuple(
        dataclasses.replace(
            s,
            run_id=_value(keys[s.name].run_id, s) if keys[s.name].run_id else None,
            resume_env=tuple(keys[s.name].resume_env.items()),
        )
        for s in specs
    )
    return dataclasses.replace(loaded, config=cfg.model_copy(update={"backend_config": filled})), specs


def add_tracking(plan: Plan, loaded: LoadedExperiment, specs: tuple[TrackerSpec, ...]) -> None:
    """The plan's `tracking` (the run's parameters: the resolved experiment, masked, its keys under
    `experiment.`) and the trackers' environment variables in `plan.env`, under any the experiment's `env`
    sets itself."""
    if not specs:
        return
    from ascendfactory.trackers.base import flatten

    # under `experiment.`: a framework logs its own arguments as parameters too (transformers:
    # save_total_limit)
    params = flatten(
        mask_secrets(loaded.config.model_dump(mode="json", exclude={"report_to"})), "experiment."
    )
    plan.tracking = Tracking(
        specs=specs,
        params=tuple(params.items()),
        runs_file=OutputTree(os.path.abspath(plan.output_dir)).runs_file,
    )
    from ascendfactory.trackers.registry import tracker_env

    for spec in specs:
        for name, value in tracker_env(spec).items():
            plan.env.setdefault(name, value)


# -- the clients, in the environment that trains --------------------------------------------------------
def training_python(plan: Plan) -> str | None:
    """The interpreter the train step runs (a Torchrun's or Ray's `python`; a program beside its
    environment's `python`), or None when the plan does not say."""
    train = plan.with_role(Role.TRAIN)
    launch = train.launch if train is not None else None
    if launch is None:
        return None
    if not isinstance(launch, Process):
        return launch.python
    program = launch.argv[0]
    if os.path.basename(program).startswith("python"):
        return program
    beside = os.path.join(os.path.dirname(program), "python")
    return beside if os.path.dirname(program) and os.path.exists(beside) else None


def _this_python(python: str) -> bool:
    """Whether `python` is this process's interpreter (a venv's `bin/python` is a link to its base
    interpreter, with other packages: compared by path, not by where the link points)."""
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def absent_modules(python: str, modules: list[str]) -> list[str] | None:
    """The `modules` `python` cannot import (found, not imported); None when that interpreter cannot be run
    here (a dry run on a machine without the framework's environment: its own check reports that)."""
    if _this_python(python):
        return [m for m in modules if importlib.util.find_spec(m) is None]
    if not os.path.isfile(python):
        return None
    probe = (
        "import importlib.util, sys; "
        "print(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))"
    )
    try:
        done = subprocess.run(
            [python, "-c", probe, *modules],
            capture_output=True,
            text=True,
            timeout=CLIENT_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.split() if done.returncode == 0 else None


def install_fix(backend: str, trackers: list[str]) -> str:
    """How a framework's own environment gets tracker clients: install.sh's AF_TRACKERS."""
    return f"AF_TRACKERS={','.join(trackers)} sh install.sh {backend}"


def client_modules(specs: tuple[TrackerSpec, ...]) -> dict[str, tuple[str, ...]]:
    """Tracker -> the modules its framework integration imports, for the trackers that have a client."""
    from ascendfactory.trackers.registry import get_tracker

    return {s.name: get_tracker(s.name).client for s in specs if get_tracker(s.name).client}


def client_check_args(report: Any, backend: str) -> list[str]:
    """The arguments a backend's check program (run in its framework's environment) takes to look for the
    clients of the trackers `report` (the experiment's `report_to`) names: `--clients=a,b` and the fix."""
    from ascendfactory.trackers.registry import get_tracker

    names = [n for n in (report.names() if report is not None else []) if get_tracker(n).client]
    modules = sorted({m for n in names for m in get_tracker(n).client})
    if not modules:
        return []
    return [f"--clients={','.join(modules)}", f"--clients-fix={install_fix(backend, names)}"]


def missing_clients(plan: Plan, specs: tuple[TrackerSpec, ...], *, source: str = "") -> list[Problem]:
    """A problem per tracker whose client the environment that runs the training lacks: a run would fail
    after launch (LLaMA-Factory's MLflow callback raises at trainer construction) or not report."""
    needed = client_modules(specs) if specs else {}
    python = training_python(plan) if needed else None
    if python is None:
        return []
    absent = absent_modules(python, sorted({m for modules in needed.values() for m in modules}))
    if not absent:
        return []
    lacking = [name for name, modules in needed.items() if set(modules) & set(absent)]
    own_env = not _this_python(python)
    from ascendfactory.trackers.registry import get_tracker

    problems = []
    for name in lacking:
        tracker = get_tracker(name)
        modules = ", ".join(m for m in tracker.client if m in absent)
        if own_env:
            pip = shlex.join([python, "-m", "pip", "install", *tracker.packages])
            fix = f"{install_fix(plan.backend, lacking)} (or {pip}), or remove {name} from report_to"
        else:
            fix = f"{tracker.install_hint()}, or remove {name} from report_to"
        problems.append(
            Problem(
                key=f"report_to.{name}",
                message=f"the {name} client ({modules}) is not installed in the environment that runs "
                f"the training ({python}), so {plan.backend} could not report to it",
                fix=fix,
                source=source,
            )
        )
    return problems
