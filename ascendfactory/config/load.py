"""Load an experiment: file (new or old style) + command-line overrides -> a validated `ExperimentConfig`.

Precedence, stated once (later wins), in `merge_layers`:

    schema defaults < experiment file < --dotted.key=value overrides            (new style)
    schema defaults < base < model block < experiment block < overrides          (old style)

Worked example: the file has `backend_config.training.lr: 1e-5` and the command line says
`--backend_config.training.lr=2e-5`: the run uses 2e-5, and `exp-config.yaml` records 2e-5.
Interpolation (`${...}`) runs after the merge, so references see overridden values.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ascendfactory.config import interpolate
from ascendfactory.config.oldstyle import flatten_old_style, is_old_style
from ascendfactory.config.overrides import parse_overrides, set_dotted
from ascendfactory.config.schema import EnvConfig, ExperimentConfig
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.config.yamlio import load_file
from ascendfactory.errors import ConfigError, Problem


@dataclass
class LoadedExperiment:
    """A validated experiment plus where its values came from (for messages)."""

    config: ExperimentConfig
    tree: dict[str, Any]  # merged and interpolated, as validated
    source: str  # the file
    style: str  # "new" or "old"
    overridden: set[str] = field(default_factory=set)  # dotted keys set on the command line

    def source_of(self, key: str) -> str:
        """'command line' when `key` (or a parent of it) was overridden, else the file."""
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in self.overridden:
                return "command line"
        return self.source


def merge_layers(*layers: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; later layers win key by key, sections merge recursively."""
    result: dict[str, Any] = {}
    for layer in layers:
        _merge_into(result, layer)
    return result


def _merge_into(dst: dict[str, Any], src: dict[str, Any]) -> None:
    for key, value in src.items():
        if isinstance(value, dict) and isinstance(dst.get(key), dict):
            _merge_into(dst[key], value)
        else:
            dst[key] = copy.deepcopy(value)


def load_experiment(
    path: str | Path,
    override_args: list[str] | None = None,
    *,
    model_name: str | None = None,
    exp_name: str | None = None,
) -> LoadedExperiment:
    """Read, merge, interpolate and validate. Every problem is reported at once as a ConfigError."""
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
    overrides = parse_overrides(override_args or [])

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
        tree = flatten_old_style(data, model_name, exp_name, source=source)
        style = "old"
    else:
        tree = data
        style = "new"

    merged = merge_layers(tree)
    for key, value in overrides:
        set_dotted(merged, key, value)
    resolved = interpolate.resolve(merged)
    overridden = {k for k, _ in overrides}
    config = validate_tree(resolved, source=source, overridden=overridden)
    return LoadedExperiment(config=config, tree=resolved, source=source, style=style, overridden=overridden)


def validate_tree(
    tree: dict[str, Any], *, source: str, overridden: set[str] | None = None
) -> ExperimentConfig:
    """pydantic validation, with every error turned into a Problem that names the key and a fix."""
    overridden = overridden or set()
    try:
        return ExperimentConfig.model_validate(tree)
    except ValidationError as e:
        problems = [_problem_from(err, source, overridden) for err in e.errors()]
        raise ConfigError(problems) from None


def _problem_from(err: dict[str, Any], source: str, overridden: set[str]) -> Problem:
    loc = [str(p) for p in err.get("loc", ())]
    key = ".".join(loc) or "(top level)"
    src = "command line" if any(key == o or key.startswith(o + ".") for o in overridden) else source
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        parent = loc[:-1]
        known = _known_keys(parent)
        hint = did_you_mean(loc[-1], known)
        return Problem(
            key=key,
            source=src,
            message=f"unknown key{hint}",
            fix="remove it, or use one of: " + ", ".join(sorted(known)),
        )
    if kind == "missing":
        return Problem(
            key=key,
            source=src,
            message="required key is missing",
            fix=f"add `{loc[-1]}: ...` (see `ascendfactory-cli config` for a commented template)",
        )
    value = err.get("input")
    msg = err.get("msg", "invalid value").removeprefix("Value error, ")
    shown = f" (got {value!r})" if not isinstance(value, dict) and value is not None else ""
    fix = ""
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        fix = f"use one of {ctx['expected']}"
    return Problem(key=key, source=src, message=f"{msg}{shown}", fix=fix)


def _known_keys(parent: list[str]) -> list[str]:
    if not parent:
        return list(ExperimentConfig.model_fields)
    if parent == ["env"]:
        return list(EnvConfig.model_fields)
    if parent == ["auto_resume"]:
        from ascendfactory.config.schema import AutoResumeConfig

        return list(AutoResumeConfig.model_fields)
    return []
