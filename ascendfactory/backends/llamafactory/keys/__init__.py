"""LLaMA-Factory's real key lists, as data (generated from the installed package by
`scripts/gen_llamafactory_args.py`; each file's header names the versions and classes it was read from).

    train_<version>.txt       every key `llamafactory-cli train` accepts, its kind, choices and default
    templates_<version>.txt   the chat template names
    mappings_<version>.txt    the fields a mapping key may hold (the dataclass it becomes)
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # int | float | bool | str | other
    choices: tuple[str, ...]
    default: Any = None  # the dataclass's default (COMPUTED where its code computes it)


COMPUTED = "<computed by the dataclass>"


def _lines(name: str) -> list[str]:
    text = (_HERE / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


@lru_cache(maxsize=None)
def train_keys(version: str) -> dict[str, Key]:
    out = {}
    for line in _lines(f"train_{version}.txt"):
        name, kind, choices, default = (line.split("\t") + ["", "", ""])[:4]
        value = ast.literal_eval(default) if default.strip() else COMPUTED
        out[name] = Key(name, kind, tuple(c for c in choices.split("|") if c), value)
    return out


@lru_cache(maxsize=None)
def train_defaults(version: str) -> dict[str, Any]:
    """key -> the value `llamafactory-cli train` holds when the yaml leaves the key out."""
    return {name: key.default for name, key in train_keys(version).items() if key.default != COMPUTED}


@lru_cache(maxsize=None)
def templates(version: str) -> frozenset[str]:
    return frozenset(line.strip() for line in _lines(f"templates_{version}.txt"))


@lru_cache(maxsize=None)
def mapping_fields(version: str) -> dict[str, frozenset[str]]:
    out = {}
    for line in _lines(f"mappings_{version}.txt"):
        key, fields = (line.split("\t") + [""])[:2]
        out[key] = frozenset(f for f in fields.split("|") if f)
    return out
