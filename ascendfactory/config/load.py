"""Load an experiment: file (new or old style) + command-line overrides -> a validated `ExperimentConfig`.

Precedence is stated once, in `config.tree.compose`:

    schema defaults < experiment file < --dotted.key=value overrides            (new style)
    schema defaults < base < model block < experiment block < overrides          (old style)

Problems are collected across the phases, so one run reports them all: override syntax, interpolation,
schema. With `collect=True` the experiment is returned with its `problems` and, where the schema problems
leave the rest readable (no `backend` or `env` problem), a stand-in config in which each invalid value is
replaced by its default, so that the backend's own checks can run and add theirs (`backends.planner`).

What loading needs to know of the backends (their names; the old-style flat keys each one maps) is given by
the caller as a `Backends` record (`ascendfactory.backends.registry.directory()`), so this layer imports no
backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ascendfactory.config import interpolate
from ascendfactory.config.bounds import check_tree, tree_problems
from ascendfactory.config.known_backends import Backends
from ascendfactory.config.oldstyle import flatten_old_style, is_old_style, map_flat_overrides
from ascendfactory.config.overrides import parse_overrides_collecting
from ascendfactory.config.problems import from_validation_error
from ascendfactory.config.schema import ExperimentConfig
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.config.tree import compose
from ascendfactory.config.yamlio import load_file
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.secrets import remember as remember_secrets


@dataclass
class LoadedExperiment:
    """A validated experiment plus where its values came from (for messages)."""

    config: ExperimentConfig
    tree: dict[str, Any]  # merged and interpolated, as validated
    source: str  # the file
    style: str  # "new" or "old"
    overridden: set[str] = field(default_factory=set)  # dotted keys set on the command line
    # Problems found while loading (collect=True). With problems, `config` is a stand-in: invalid values
    # replaced by their defaults; `plannable` says whether the backend's checks can run on it.
    problems: list[Problem] = field(default_factory=list)
    plannable: bool = True
    # Old style: where the file wrote each new-style key (`save_total_limit` <- `base.save-total-limit`).
    origins: dict[str, str] = field(default_factory=dict)
    # Where each topology value (NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, NPUS_PER_NODE) came from, and
    # the cluster platform that supplied some (`config.topology.with_platform`; empty before it ran).
    topology: dict[str, str] = field(default_factory=dict)
    platform: str | None = None
    platform_sources: dict[str, str] = field(
        default_factory=dict
    )  # `env.NODE_RANK` -> "SLURM_NODEID=1 (Slurm)"

    def source_of(self, key: str) -> str:
        """'command line' when `key`, a parent or a child of it was overridden; the platform variable for a
        topology key a cluster platform supplied; else the file."""
        if key in self.platform_sources:
            return self.platform_sources[key]
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in self.overridden:
                return "command line"
        if any(o.startswith(key + ".") for o in self.overridden):
            return "command line"
        return self.source

    def locate(self, problems: list[Problem]) -> list[Problem]:
        """Problems named as the file wrote them: `base.save-total-limit (save_total_limit)` in old style."""
        out = []
        for p in problems:
            key = next((k for k in self.origins if p.key == k or p.key.startswith(k + ".")), None)
            if key is not None and p.source != "command line":
                p = Problem(f"{self.origins[key]}{p.key[len(key) :]} ({p.key})", p.message, p.fix, p.source)
            out.append(p)
        return out


def load_experiment(
    path: str | Path,
    override_args: list[str] | None = None,
    *,
    model_name: str | None = None,
    exp_name: str | None = None,
    backends: Backends | None = None,
    collect: bool = False,
) -> LoadedExperiment:
    """Read, merge, interpolate and validate. Every problem is reported at once as a ConfigError (with
    `collect`, returned in `problems` when a stand-in config can be built; see the module docstring).

    `backends`: the registry's view; without it the backend name is not checked here (the planner checks
    it) and old-style files map only the generic flat keys.
    """
    source = str(path)
    data = load_file(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            Problem(
                key="(top level)",
                source=source,
                message=f"expected a mapping of keys, got {type(data).__name__}",
                fix="an experiment file is a YAML mapping: backend: ..., af_model_name: ...",
            )
        )
    check_tree(data, source=source)  # before anything copies it: alias bombs, keys, NUL, inf/nan
    problems: list[Problem] = []
    overrides = []
    for key, value in parse_overrides_collecting(override_args or [], problems):
        bad = tree_problems(value, source="command line", prefix=key)
        problems += bad
        if not bad:
            overrides.append((key, value))

    if model_name is not None or exp_name is not None or is_old_style(data):
        if model_name is None or exp_name is None:
            raise ConfigError(
                Problem(
                    key="(command)",
                    source=source,
                    message="this is an old-style file (base / model / experiment blocks)",
                    fix=f"run: ascendfactory-cli train {source} <model_name> <exp_name>",
                )
            )
        origins: dict[str, str] = {}
        try:
            layers = flatten_old_style(
                data, model_name, exp_name, source=source, backends=backends, origins=origins
            )
        except ConfigError as e:
            raise ConfigError(problems + e.problems) from None
        style = "old"
    else:
        layers = [data]
        style = "new"
        origins = {}

    overrides = map_flat_overrides(overrides, _backend_of(layers, overrides), backends, problems)
    composed = compose(layers, overrides, problems=problems)
    remember_secrets(composed)  # any text the tool prints from here on masks these values
    overridden = {k for k, _ in overrides}
    found: list[Problem] = []
    resolved = interpolate.resolve(composed, source=source, problems=found)
    problems += [_from_command_line(p, overridden) for p in found]
    try:
        check_tree(resolved, source=source)  # what interpolation made of it
    except ConfigError as e:
        raise ConfigError(problems + e.problems) from None
    loaded = LoadedExperiment(
        config=None,  # type: ignore[arg-type]  # set below
        tree=resolved,
        source=source,
        style=style,
        overridden=overridden,
        problems=problems,
        origins=origins,
    )
    try:
        loaded.config = validate_tree(resolved, source=source, overridden=overridden, backends=backends)
    except ConfigError as e:
        named = {p.key for p in problems}
        problems += [p for p in e.problems if p.key not in named]  # e.g. an empty value a bad ${...} left
        stand_in = _stand_in(resolved, e.problems) if collect else None
        if stand_in is None:
            raise ConfigError(loaded.locate(problems)) from None
        loaded.config = stand_in
        loaded.plannable = not any(p.key == "backend" or p.key.split(".")[0] == "env" for p in e.problems)
    if problems and not collect:
        raise ConfigError(loaded.locate(problems))
    return loaded


def _backend_of(layers: list[dict[str, Any]], overrides: list[tuple[str, Any]]) -> str:
    """The backend the file and the command line name (the last word wins), for mapping flat keys."""
    named = [v for k, v in overrides if k == "backend"] + [
        layer.get("backend") for layer in reversed(layers) if isinstance(layer, dict)
    ]
    return next((b for b in named if isinstance(b, str)), "torch")


def _from_command_line(p: Problem, overridden: set[str]) -> Problem:
    if any(p.key == o or p.key.startswith(o + ".") for o in overridden):
        return Problem(p.key, p.message, p.fix, "command line")
    return p


def _stand_in(tree: dict[str, Any], problems: list[Problem]) -> ExperimentConfig | None:
    """The experiment with each value a schema problem names removed (so its default applies) and missing
    required names filled with a placeholder; None when even that does not validate."""
    trimmed = dict(tree)
    for p in problems:
        top = p.key.split(".")[0]
        if top in ExperimentConfig.model_fields or top in trimmed:
            trimmed.pop(top, None)
    for name, f in ExperimentConfig.model_fields.items():
        if f.is_required() and name not in trimmed:
            trimmed[name] = f"<{name} missing>"
    try:
        return ExperimentConfig.model_validate(trimmed)
    except ValidationError:
        return None


def validate_tree(
    tree: dict[str, Any],
    *,
    source: str,
    overridden: set[str] | None = None,
    backends: Backends | None = None,
) -> ExperimentConfig:
    """pydantic validation, with every error turned into a Problem that names the key and a fix; with
    `backends`, an unknown `backend` is one more problem of the same report."""
    overridden = overridden or set()
    problems: list[Problem] = []
    backend = tree.get("backend", "torch")
    if backends is not None and isinstance(backend, str) and backends.known(backend):
        tree = {**tree, "backend": backends.canonical(backend) or backend}  # `MindSpeed_LLM` -> its name
    elif backends is not None and isinstance(backend, str):
        backend_names = backends.names()
        src = "command line" if "backend" in overridden else source
        problems.append(
            Problem(
                key="backend",
                source=src,
                message=f"unknown backend {backend!r}{did_you_mean(backend, backend_names)}",
                fix="use one of: " + ", ".join(backend_names),
            )
        )
    try:
        config = ExperimentConfig.model_validate(tree)
    except ValidationError as e:
        problems += from_validation_error(
            e,
            source_of=lambda key: _source_of(key, source, overridden),
            model=ExperimentConfig,
            elsewhere=TOP_LEVEL_ELSEWHERE,
            bound_notes=BOUND_NOTES,
        )
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    return config


def _source_of(key: str, source: str, overridden: set[str]) -> str:
    """'command line' when `key`, a parent or a child of it was overridden, else the file."""
    if any(key == o or key.startswith(o + ".") or o.startswith(key + ".") for o in overridden):
        return "command line"
    return source


# Top-level keys of AscendFactory's documents that this file format keeps elsewhere or refuses:
# (message, fix), instead of a bare "unknown key".
TOP_LEVEL_ELSEWHERE = {
    "callbacks": (
        "MindSpore Transformers' training callbacks (its MFLossMonitor prints the loss every "
        "per_print_times steps) are not configurable here: the trainers print the loss themselves",
        "remove it; the loss interval is backend_config.training.log-interval (Megatron backends) or "
        "logging_steps (llamafactory)",
    ),
    "seed": ("a training flag, not a top-level key", "set backend_config.training.seed"),
    "mount_type": ("ModelArts' storage switch (OBS): this tool reads and writes local paths", "remove it"),
    "output_dir": ("the 6.5.90x spelling of af_output_dir", "rename it to af_output_dir"),
}
BOUND_NOTES = {
    "save_total_limit": " (0 keeps every checkpoint)",
    "memory_check.device_memory_gb": " (the memory of one device in GiB, e.g. 64 for an Ascend 910B, or "
    "remove it to probe the device / use memory_check.device)",
}
