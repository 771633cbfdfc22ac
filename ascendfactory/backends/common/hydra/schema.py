"""A Hydra config's keys and defaults as data, and composing overrides against it without the framework.

A key list (generated from the framework's installed package, e.g. `scripts/gen_verl_keys.py`, with its
provenance in the header) holds every key of the composed config with its default, one `key<TAB>json` a
line; `read_key_list` turns it into a `Schema`. From it:

- `Schema.kind(key)`: `leaf` (a value), `map` (an open map, empty by default: children need `+`),
  `node` (a section with keys of its own), or None (not in the framework's config);
- `Schema.default(key)`: the default (interpolations such as `${oc.select:actor_rollout_ref.rollout.n,1}`
  unresolved);
- `compose(schema, overrides)`: the config Hydra would compose (the defaults with the overrides applied,
  then `${...}` resolved as OmegaConf does for the common resolvers: plain and relative paths, `oc.select`,
  `oc.env`), plus every problem Hydra would raise (an unknown key without `+`). When the framework is
  installed a plan composes with Hydra itself (`compose.py`; verl: `backends/verl/composer.py`); this is
  the fallback for `--dry-run` on a machine without it, and the source of defaults and suggestions.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendfactory.errors import Problem

MISSING = object()
REQUIRED = "???"  # OmegaConf's mandatory value: a default that the user must set


@dataclass(frozen=True)
class Override:
    """One Hydra override: `key=value`, or `+key=value` (add a key the schema lacks)."""

    key: str
    value: Any
    plus: bool = False
    source: str = "backend_config"  # what set it (backend_config, or the plan and the key that decided)


@dataclass
class Schema:
    framework: str  # whose config ("verl"), for messages
    version: str
    variant: str  # which of its configs, for messages ("model_engine=dp")
    defaults: dict[str, Any]  # dotted leaf key -> default (JSON value)
    sections: frozenset[str] = field(default_factory=frozenset)  # every dotted prefix of a leaf

    def kind(self, key: str) -> str | None:
        if key in self.defaults:
            value = self.defaults[key]
            return "map" if isinstance(value, dict) else "leaf"
        return "node" if key in self.sections else None

    def default(self, key: str) -> Any:
        return self.defaults.get(key, MISSING)

    def children(self, key: str) -> list[str]:
        """The names directly under `key` ('' for the top level)."""
        prefix = key + "." if key else ""
        names = {k[len(prefix) :].split(".", 1)[0] for k in self.defaults if k.startswith(prefix)}
        return sorted(names)

    def tree(self) -> dict[str, Any]:
        """The nested default config."""
        root: dict[str, Any] = {}
        for key, value in self.defaults.items():
            set_path(root, key.split("."), json.loads(json.dumps(value)))
        return root

    def open_map_above(self, key: str) -> str | None:
        """The nearest ancestor of `key` that is an open map (its children need `+`), if any."""
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if self.kind(".".join(parts[:i])) == "map":
                return ".".join(parts[:i])
        return None

    def nearest_existing(self, key: str) -> str:
        parts = key.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if self.kind(".".join(parts[:i])) is not None:
                return ".".join(parts[:i])
        return ""


def read_key_list(path: Path, framework: str, version: str, variant: str) -> Schema:
    """A generated key list (`key<TAB>default as JSON` a line, `#` comments) as a `Schema`."""
    defaults: dict[str, Any] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("\t")
        defaults[key] = json.loads(value)
    sections = {".".join(k.split(".")[:i]) for k in defaults for i in range(1, k.count(".") + 1)}
    return Schema(framework, version, variant, defaults, frozenset(sections))


def key_list_header(path: Path) -> list[str]:
    """The provenance lines of a key list."""
    return [line[2:] for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("# ")]


# -- nested dict helpers --------------------------------------------------------------------------------
def get_path(tree: Any, parts: Iterable[str], default: Any = MISSING) -> Any:
    node = tree
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_path(tree: dict[str, Any], parts: list[str], value: Any) -> None:
    node = tree
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = node[part] = {}
        node = nxt
    node[parts[-1]] = value


# -- composing without Hydra ----------------------------------------------------------------------------
@dataclass
class Composed:
    config: dict[str, Any]
    problems: list[Problem]  # keys in the framework's config, as Hydra would refuse the overrides


def compose(schema: Schema, overrides: list[Override], environ: dict[str, str] | None = None) -> Composed:
    """Apply `overrides` to the defaults as Hydra does, then resolve interpolations (see module doc)."""
    config = schema.tree()
    problems: list[Problem] = []
    for o in overrides:
        kind = schema.kind(o.key)
        if kind is None and not o.plus:
            problems.append(unknown_key_problem(schema, o.key))
            continue
        if kind == "node" and not isinstance(o.value, dict):
            problems.append(
                Problem(
                    o.key,
                    f"is a section of {schema.framework}'s config (keys: "
                    f"{', '.join(schema.children(o.key)[:8])}), not a value",
                    f"set keys under it: {o.key}.<key>",
                )
            )
            continue
        value = json.loads(json.dumps(o.value))
        current = get_path(config, o.key.split("."))
        if isinstance(current, dict) and isinstance(value, dict):
            merge(current, value)
        else:
            set_path(config, o.key.split("."), value)
    resolved = Resolver(config, environ if environ is not None else dict(os.environ)).resolve_all()
    return Composed(resolved, problems)


def merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for k, v in other.items():
        if isinstance(into.get(k), dict) and isinstance(v, dict):
            merge(into[k], v)
        else:
            into[k] = v


def unknown_key_problem(schema: Schema, key: str) -> Problem:
    """Hydra's 'Could not override' in our words: the nearest names, or how to add to an open map."""
    import difflib

    open_map = schema.open_map_above(key)
    if open_map:
        rest = key[len(open_map) + 1 :]
        return Problem(
            key,
            f"not in {schema.framework} {schema.version}'s config: {open_map} is an open map (empty by "
            f"default), so Hydra refuses new keys under it without '+'",
            f"write the key as '+{rest.split('.')[0]}' under {open_map} to add it",
        )
    parent = schema.nearest_existing(key)
    name = key[len(parent) + 1 :] if parent else key
    candidates = schema.children(parent)
    close = difflib.get_close_matches(name.split(".")[0], candidates, n=3, cutoff=0.6)
    where = f"under {parent}" if parent else "at the top level"
    fix = (
        "did you mean " + " or ".join(f"{parent + '.' if parent else ''}{c}" for c in close) + "?"
        if close
        else f"keys {where}: {', '.join(candidates[:12])}{', ...' if len(candidates) > 12 else ''}"
    )
    return Problem(
        key,
        f"not in {schema.framework} {schema.version}'s config ({schema.variant}); Hydra would stop with "
        f"\"Could not override '{key}'\"",
        fix + f" (a key {schema.framework}'s schema really lacks: prefix its name with '+')",
    )


class Resolver:
    """OmegaConf-style resolution of `${...}` for the forms Hydra defaults use (verl's among them): `${a.b}`,
    `${.sib}`, `${..x}`, `${oc.select:key,default}` (nested), `${oc.env:VAR,default}`. Anything else stays as
    text."""

    MAX_DEPTH = 32

    def __init__(self, config: dict[str, Any], environ: dict[str, str]) -> None:
        self.config = config
        self.environ = environ

    def resolve_all(self) -> dict[str, Any]:
        return self.resolved(self.config, [], 0)

    def value(self, node: Any, path: list[str], depth: int) -> Any:
        if not isinstance(node, str) or "${" not in node or depth > self.MAX_DEPTH:
            return node
        pieces = list(split_interpolations(node))
        if len(pieces) == 1 and pieces[0][0]:
            return self.expr(pieces[0][1], path, depth)
        out = []
        for is_interp, text in pieces:
            if not is_interp:
                out.append(text)
                continue
            got = self.expr(text, path, depth)
            out.append("${" + text + "}" if got is MISSING else str(got))
        return "".join(out)

    def lookup(self, key: str, path: list[str], depth: int) -> Any:
        if key.startswith("."):
            dots = len(key) - len(key.lstrip("."))
            base = path[: len(path) - dots]
            parts = [*base, *key.lstrip(".").split(".")]
        else:
            parts = key.split(".")
        found = get_path(self.config, parts)
        if found is MISSING:
            return MISSING
        return self.resolved(found, parts, depth + 1)

    def resolved(self, node: Any, path: list[str], depth: int) -> Any:
        if isinstance(node, dict):
            return {k: self.resolved(v, [*path, k], depth) for k, v in node.items()}
        if isinstance(node, list):
            return [self.resolved(v, path, depth) for v in node]
        return self.value(node, path, depth)

    def expr(self, text: str, path: list[str], depth: int) -> Any:
        if text.startswith("oc.select:"):
            args = split_args(text[len("oc.select:") :])
            got = self.lookup(args[0].strip(), path, depth)
            if (
                got is MISSING or got is None or got == REQUIRED
            ):  # OmegaConf: a missing value selects the default
                if len(args) < 2:
                    return None  # oc.select's own default
                return self.literal(args[1], path, depth)
            return got
        if text.startswith("oc.env:"):
            args = split_args(text[len("oc.env:") :])
            name = args[0].strip()
            if name in self.environ:
                return self.environ[name]
            return self.literal(args[1], path, depth) if len(args) > 1 else MISSING
        if ":" in text:  # another resolver: left as text
            return MISSING
        got = self.lookup(text.strip(), path, depth)
        return "${" + text + "}" if got is MISSING else got

    def literal(self, text: str, path: list[str], depth: int) -> Any:
        text = text.strip()
        if "${" in text:
            return self.value(text, path, depth + 1)
        return parse_literal(text)


def parse_literal(text: str) -> Any:
    """A Hydra/OmegaConf primitive as written in an interpolation's default."""
    lowered = text.lower()
    if lowered in ("null", "none", "~"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    if text == "[]":
        return []
    if text == "{}":
        return {}
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


_OPEN = re.compile(r"\$\{")


def split_interpolations(text: str) -> Iterable[tuple[bool, str]]:
    """(is interpolation, text) pieces; an interpolation's text is what is between `${` and its `}`."""
    i = 0
    while i < len(text):
        m = _OPEN.search(text, i)
        if m is None:
            yield False, text[i:]
            return
        if m.start() > i:
            yield False, text[i : m.start()]
        depth, j = 1, m.end()
        while j < len(text) and depth:  # `${` and a literal `{` (a default `{}`) both nest
            depth += (text[j] == "{") - (text[j] == "}")
            j += 1
        if depth:  # unbalanced: the rest is text
            yield False, text[m.start() :]
            return
        yield True, text[m.end() : j - 1]
        i = j


def split_args(text: str) -> list[str]:
    """Split resolver arguments at top-level commas (not inside `${...}` or brackets)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out
