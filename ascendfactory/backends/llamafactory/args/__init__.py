"""LLaMA-Factory's real key lists, as data (generated from the installed package by
`scripts/gen_llamafactory_args.py`; each file's header names the versions and classes it was read from).

    train_<version>.txt       every key `llamafactory-cli train` accepts, its kind and its choices
    templates_<version>.txt   the chat template names
    mappings_<version>.txt    the fields a mapping key may hold (the dataclass it becomes)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # int | float | bool | str | other
    choices: tuple[str, ...]


def _lines(name: str) -> list[str]:
    text = (_HERE / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


@lru_cache(maxsize=None)
def train_keys(version: str) -> dict[str, Key]:
    out = {}
    for line in _lines(f"train_{version}.txt"):
        name, kind, choices = (line.split("\t") + ["", ""])[:3]
        out[name] = Key(name, kind, tuple(c for c in choices.split("|") if c))
    return out


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
