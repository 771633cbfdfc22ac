"""Seeded experiments for the differential harness: a base (a shipped template or quickstart) and one or two
mutations of keys the framework reads, each a valid, a boundary or an invalid value, or an unknown key.

A case is a function of (backend, seed, index) only, so a disagreement printed by the harness can be
re-run by its id.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

DELETE = "<deleted>"  # a mutation's value that removes the key


@dataclass(frozen=True)
class KeySpec:
    path: tuple[str, ...]  # where the key sits in the experiment file
    kind: str  # int | float | bool | str | path | list | other
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mutation:
    path: tuple[str, ...]
    value: Any
    label: str  # valid | boundary | invalid | unknown | deleted

    @property
    def key(self) -> str:
        return ".".join(self.path)


@dataclass
class Base:
    name: str
    tree: dict[str, Any]


@dataclass
class Case:
    id: str
    base: str
    tree: dict[str, Any]
    mutations: list[Mutation] = field(default_factory=list)

    def describe(self) -> str:
        return ", ".join(f"{m.key}={m.value!r} ({m.label})" for m in self.mutations) or "(unchanged)"


HUGE = 2**40
WRONG = [("", "invalid"), ("abc", "invalid"), ([1, 2], "invalid"), ({"a": 1}, "invalid")]


def values_for(spec: KeySpec, original: Any) -> list[tuple[Any, str]]:
    """Values worth trying for one key: valid ones, boundaries, and wrong kinds."""
    keep = [] if original is None or original == DELETE else [(original, "valid")]
    if spec.kind == "layout":  # devices per node, node count
        return [(1, "valid"), (2, "valid"), (4, "valid"), (8, "valid"), (3, "valid"), (16, "valid")]
    if spec.kind == "int":
        return [
            *keep,
            (1, "valid"),
            (2, "valid"),
            (8, "valid"),
            (0, "boundary"),
            (-1, "boundary"),
            (HUGE, "boundary"),
            (1.5, "invalid"),
            ("8", "invalid"),
            (True, "invalid"),
            *WRONG,
        ]
    if spec.kind == "float":
        return [
            *keep,
            (0.1, "valid"),
            (1.0e-5, "valid"),
            (3, "valid"),
            (0.0, "boundary"),
            (-1.0, "boundary"),
            (1.0e30, "boundary"),
            (True, "invalid"),
            *WRONG,
        ]
    if spec.kind == "bool":
        return [*keep, (True, "valid"), (False, "valid"), (0, "invalid"), ("yes", "invalid"), *WRONG]
    if spec.choices:
        return [
            *keep,
            *((c, "valid") for c in spec.choices),
            ("not_a_choice", "invalid"),
            (1, "invalid"),
            *WRONG,
        ]
    if spec.kind == "list":
        return [*keep, ([], "boundary"), ("abc", "valid"), (1, "invalid"), ({"a": 1}, "invalid")]
    return [*keep, ("", "boundary"), (1, "invalid"), ([1, 2], "invalid"), ({"a": 1}, "invalid")]


UNKNOWN_NAMES = ("lerning_rate", "batch_size", "zz_unknown_key", "Lr", "num-epochs")


def make_case(
    backend: str, bases: list[Base], keys_of: Any, seed: int, index: int, *, max_mutations: int = 2
) -> Case:
    """Case `index` of `seed`: a base and 1..max_mutations mutations (`keys_of(tree)` -> [KeySpec])."""
    rng = random.Random(f"{backend}/{seed}/{index}")
    base = bases[rng.randrange(len(bases))]
    tree = copy.deepcopy(base.tree)
    case = Case(id=f"{backend}:{seed}:{index}", base=base.name, tree=tree)
    for _ in range(1 if rng.random() < 0.7 else rng.randint(2, max_mutations)):
        specs: list[KeySpec] = keys_of(tree)
        roll = rng.random()
        if roll < 0.06:  # an unknown key beside the framework's own
            parent = rng.choice(sorted({s.path[:-1] for s in specs if s.path[0] == "backend_config"}))
            mutation = Mutation((*parent, rng.choice(UNKNOWN_NAMES)), 1, "unknown")
        else:
            spec = rng.choice(specs)
            original = _get(tree, spec.path)
            if roll < 0.1 and original is not None:
                mutation = Mutation(spec.path, DELETE, "deleted")
            else:
                value, label = rng.choice(values_for(spec, original))
                mutation = Mutation(spec.path, copy.deepcopy(value), label)
        apply(tree, mutation)
        case.mutations.append(mutation)
    return case


def _get(tree: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = tree
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def apply(tree: dict[str, Any], mutation: Mutation) -> None:
    """Set (or delete) the mutated key, creating the mappings above it."""
    node = tree
    for part in mutation.path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    if mutation.value == DELETE:
        node.pop(mutation.path[-1], None)
    else:
        node[mutation.path[-1]] = copy.deepcopy(mutation.value)
