"""Nested config mappings: deep merge, dotted get/set, and the one precedence rule (`compose`).

Precedence, stated once (later wins, key by key; sections merge recursively):

    schema defaults < layers[0] < layers[1] < ... < --dotted.key=value overrides

New style passes one layer (the experiment file); old style passes its four (base, model block, shared
experiment, the model's experiment), each already mapped from flat keys. Worked example: the file has
`backend_config.training.lr: 1e-5` and the command line says `--backend_config.training.lr=2e-5`: the run
uses 2e-5, and `exp-config.yaml` records 2e-5. Interpolation (`${...}`) runs after `compose`, so
references see overridden values.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from ascendfactory.errors import ConfigError, Problem


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


def compose(
    layers: Iterable[dict[str, Any]],
    overrides: Iterable[tuple[str, Any]] = (),
    *,
    problems: list[Problem] | None = None,
) -> dict[str, Any]:
    """The merged tree: `layers` in order, then each `(dotted.key, value)` override (see the docstring).
    An override that cannot apply is a ConfigError, or appended to `problems` when given (and skipped)."""
    tree = merge_layers(*layers)
    for key, value in overrides:
        try:
            set_dotted(tree, key, value)
        except ConfigError as e:
            if problems is None:
                raise
            problems += e.problems
    return tree


def set_dotted(tree: dict[str, Any], key: str, value: Any, *, source: str = "command line") -> None:
    """Set tree[a][b][c] = value for key 'a.b.c', creating mappings on the way."""
    parts = key.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(
                Problem(
                    key=key,
                    source=source,
                    message=f"'{part}' holds a value ({child!r}), not a section",
                    fix=f"override '{'.'.join(parts[: i + 1])}' itself",
                )
            )
        node = child
    node[parts[-1]] = value
