"""`report_to` -> each framework's own tracker keys, and the plan's `Tracking`.

A backend declares, per tracker it can reach, the `backend_config` keys in its framework's own spelling
(`Backend.tracker_keys`, data). The planner fills those keys in before the backend plans, so the framework's
own key checks see them and the generated config or argv carries them; a key the user already wrote wins and
is not duplicated, an item already in a list key is not added twice. The trackers' own environment variables
(`ascendfactory.trackers.tracker_env`) go to every step, under the experiment's own `env` keys.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.config.load import LoadedExperiment
from ascendfactory.config.report_to import tracker_specs
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.plan import Plan, TrackerSpec, Tracking
from ascendfactory.secrets import mask_secrets
from ascendfactory.trackers import flatten, tracker_env

RUNS_FILE = "trackers/runs.json"  # under af_output_dir: each tracker's run id, continued on resume


@dataclass(frozen=True)
class TrackerKeys:
    """How a framework reaches one tracker. `set`: dotted `backend_config` key -> value, a text formatted
    with the tracker's `{project}`, `{run_name}`, `{location}`, `{mode}` (or any other value, as is);
    `append`: dotted list key -> the item added to it (LLaMA-Factory's `report_to`, verl's `trainer.logger`);
    `run_id`: the id the framework gives the tracker's run itself (a template), when it does; `resume_env`:
    variables for a train step that continues an existing run (`TrackerSpec.resume_env`)."""

    set: Mapping[str, Any] = field(default_factory=dict)
    append: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None
    resume_env: Mapping[str, str] = field(default_factory=dict)


def _value(template: Any, spec: TrackerSpec) -> Any:
    if not isinstance(template, str):
        return template
    return template.format(
        project=spec.project, run_name=spec.run_name, location=spec.location, mode=spec.mode
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
        for dotted, item in mapping.append.items():
            node, last = _parent(tree, dotted)
            if node is None:
                continue
            given = node.get(last)
            items = [] if given is None else [given] if isinstance(given, str) else list(given)
            if "none" in items:  # the user turned the framework's reporting off in its own spelling
                continue
            if item not in items:
                node[last] = [*items, item]
    return tree


def unreachable(
    loaded: LoadedExperiment, backend: str, specs: tuple[TrackerSpec, ...], keys: Mapping[str, TrackerKeys]
) -> list[Problem]:
    reachable = ", ".join(keys) or "none"
    return [
        Problem(
            key=f"report_to.{s.name}",
            message=f"backend {backend} cannot report to {s.name}: its framework has no {s.name} integration",
            fix=f"remove {s.name} from report_to; {backend} reaches: {reachable}",
            source=loaded.source_of("report_to"),
        )
        for s in specs
        if s.name not in keys
    ]


def with_tracker_keys(
    loaded: LoadedExperiment, backend: str, keys: Mapping[str, TrackerKeys]
) -> tuple[LoadedExperiment, tuple[TrackerSpec, ...]]:
    """The experiment with its trackers' framework keys filled in, and the resolved trackers."""
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
    problems = unreachable(loaded, backend, specs, keys)
    if problems:
        raise ConfigError(problems)
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
    import os

    # under `experiment.`: a framework logs its own arguments as parameters too (transformers:
    # save_total_limit)
    params = flatten(
        mask_secrets(loaded.config.model_dump(mode="json", exclude={"report_to"})), "experiment."
    )
    plan.tracking = Tracking(
        specs=specs,
        params=tuple(params.items()),
        runs_file=os.path.join(os.path.abspath(plan.output_dir), RUNS_FILE),
    )
    for spec in specs:
        for name, value in tracker_env(spec).items():
            plan.env.setdefault(name, value)
