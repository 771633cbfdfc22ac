"""What any experiment tree must be, before anything reads it: bounded, plain data.

An experiment file (and every override and interpolation result) is checked once, in one walk, for what
would otherwise turn into a traceback, a hang or a silent surprise further down:

- keys are strings (YAML turns `1:`, `on:`, `yes:` into an int or a bool; quote them);
- no NUL character in a key or a value (it cannot reach a file name or an argv);
- numbers are finite (`.inf`, `.nan` are no size, rate or path);
- nesting at most `MAX_DEPTH` levels, at most `MAX_VALUES` values once YAML aliases are expanded (a
  "billion laughs" file is a few lines that expand exponentially), strings at most `MAX_STRING` characters
  (interpolation that doubles at each level), and no value that contains itself (a recursive alias).

Every problem is reported at once, named by its dotted key, in well under a second whatever the input.
"""

from __future__ import annotations

import math
from typing import Any

from ascendfactory.config.yamlio import WrittenNumber
from ascendfactory.errors import ConfigError, Problem

MAX_DEPTH = 64  # no real experiment nests deeper than ~6 levels
MAX_VALUES = 100_000  # values after alias expansion; a large experiment has a few hundred
MAX_STRING = 1 << 20  # characters in one value (1 MiB)
MAX_PROBLEMS = 20  # reported per walk; the rest are counted


def check_tree(tree: Any, *, source: str = "", prefix: str = "") -> None:
    """Raise ConfigError listing what makes `tree` unusable (see the module docstring); silent when fine."""
    problems = tree_problems(tree, source=source, prefix=prefix)
    if problems:
        raise ConfigError(problems)


def tree_problems(tree: Any, *, source: str = "", prefix: str = "") -> list[Problem]:
    walker = _Walker(source)
    walker.walk(tree, prefix, 0)
    problems = walker.problems[:MAX_PROBLEMS]
    if len(walker.problems) > MAX_PROBLEMS:
        problems.append(
            Problem(
                key="(file)", source=source, message=f"... and {len(walker.problems) - MAX_PROBLEMS} more"
            )
        )
    return problems


class _Walker:
    def __init__(self, source: str) -> None:
        self.source = source
        self.problems: list[Problem] = []
        self.sizes: dict[int, int] = {}  # id(container) -> expanded size, for shared (aliased) values
        self.open: set[int] = set()  # containers on the current path (a recursive alias loops back)
        self.total = 0
        self.stopped = False

    def add(self, key: str, message: str, fix: str = "") -> None:
        self.problems.append(Problem(key=key or "(top level)", source=self.source, message=message, fix=fix))

    def walk(self, node: Any, key: str, depth: int) -> int:
        """The expanded size of `node` (1 per value); stops early once a bound is crossed."""
        if self.stopped:
            return 0
        if isinstance(node, (dict, list)):
            return self._container(node, key, depth)
        self._scalar(node, key)
        return self._count(1, key)

    def _count(self, n: int, key: str) -> int:
        self.total += n
        if self.total > MAX_VALUES and not self.stopped:
            self.stopped = True
            self.add(
                key,
                f"the configuration expands to more than {MAX_VALUES:,} values (YAML anchors and aliases "
                f"repeated inside each other?)",
                fix="write the values out, or reference a section with ${...} only where it is needed",
            )
        return n

    def _container(self, node: dict | list, key: str, depth: int) -> int:
        ident = id(node)
        if ident in self.open:
            self.add(key, "the value contains itself (a recursive YAML alias)", fix="remove the alias")
            self.stopped = True
            return 0
        if ident in self.sizes:  # an aliased value seen before: count its expansion, do not walk it again
            return self._count(self.sizes[ident], key)
        if depth >= MAX_DEPTH:
            self.add(key, f"nested deeper than {MAX_DEPTH} levels", fix="flatten the structure")
            self.stopped = True
            return 0
        self.open.add(ident)
        size = 1
        self.total += 1
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, value in items:
            if isinstance(node, dict):
                if not isinstance(k, str):
                    written = k.written if isinstance(k, WrittenNumber) else str(k)
                    kind = "float" if isinstance(k, WrittenNumber) else type(k).__name__
                    self.add(
                        f"{key}.{written}" if key else written,
                        f"key {written} is read as a {kind}, not a name (YAML reads 1, 1e3, on, yes, no "
                        f"as numbers or booleans)",
                        fix=f"quote it: '{written}': ...",
                    )
                    continue
                if "\0" in k:
                    self.add(f"{key}.{k}" if key else k, "key contains a NUL character")
                    continue
                child_key = f"{key}.{k}" if key else k
            else:
                child_key = f"{key}.{k}"
            before = self.total
            self.walk(value, child_key, depth + 1)
            size += self.total - before
            if self.stopped:
                break
        self.open.discard(ident)
        self.sizes[ident] = size
        return size

    def _scalar(self, node: Any, key: str) -> None:
        if isinstance(node, float) and not math.isfinite(node):
            self.add(key, f"{node} is not a finite number", fix="write a finite number (or remove the key)")
        elif isinstance(node, str):
            if "\0" in node:
                self.add(key, "value contains a NUL character", fix="remove the \\0 from the value")
            if len(node) > MAX_STRING:
                self.add(
                    key,
                    f"value is {len(node):,} characters long (more than {MAX_STRING:,})",
                    fix="shorten it (an interpolation that repeats itself?)",
                )
        elif isinstance(node, (bytes, bytearray)):
            self.add(key, "binary value (!!binary) where text or a number belongs", fix="write it as text")
        elif node is not None and not isinstance(node, (bool, int, float)):
            # YAML timestamps and sets (`2024-01-01`, `!!set`) are no configuration values here
            self.add(
                key,
                f"{type(node).__name__} value {str(node)[:40]!r} is not a string, number, boolean or null",
                fix="quote it to make it a string",
            )
