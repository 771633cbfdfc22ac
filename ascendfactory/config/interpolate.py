"""`${dotted.path}` interpolation between keys (keys may contain dashes), and `${env:VAR[,default]}`.

A value that is exactly `${a.b}` keeps the referenced value's type; inside a longer string it is formatted.
References resolve against the merged tree (after overrides), recursively; cycles are errors.
OmegaConf was considered, but its grammar does not accept the dash keys MindSpeed-LLM uses.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ascendfactory.config.bounds import MAX_STRING
from ascendfactory.errors import ConfigError, Problem

_REF = re.compile(r"\$\{([^${}]+)\}")
_MISSING = object()


def _lookup(tree: dict[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def resolve(
    tree: dict[str, Any], *, source: str = "", problems: list[Problem] | None = None
) -> dict[str, Any]:
    """A copy of `tree` with every `${...}` resolved; a ConfigError lists every bad reference (`source`:
    the file, for the messages). With `problems`, they are appended there instead and each bad reference
    resolves to an empty text."""
    resolver = _Resolver(tree)
    result = resolver.walk(tree, "", ())
    if resolver.problems:
        unique = {
            (p.key, p.message): p for p in resolver.problems
        }  # a key reached through several references
        found = [Problem(p.key, p.message, p.fix, source) for p in unique.values()]
        if problems is None:
            raise ConfigError(found)
        problems += found
    return result


class _Resolver:
    """One resolution of `tree`: each reference resolved once (`cache`), the problems collected."""

    def __init__(self, tree: dict[str, Any]) -> None:
        self.tree = tree
        self.problems: list[Problem] = []
        self.cache: dict[str, Any] = {}

    def problem(self, where: str, message: str, fix: str) -> str:
        """Record a problem at `where`; the reference resolves to an empty text."""
        self.problems.append(Problem(key=where, message=message, fix=fix))
        return ""

    def walk(self, node: Any, where: str, stack: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            return {k: self.walk(v, f"{where}.{k}" if where else k, stack) for k, v in node.items()}
        if isinstance(node, list):
            return [self.walk(v, f"{where}.{i}", stack) for i, v in enumerate(node)]
        if isinstance(node, str) and "${" in node:
            whole = _REF.fullmatch(node.strip())
            if whole:
                return self.resolve_ref(whole.group(1), where, stack)
            text = _REF.sub(lambda m: self.embed(m.group(1), where, stack), node)
            if len(text) > MAX_STRING:
                return self.problem(
                    where,
                    f"interpolation makes a value of {len(text):,} characters (more than "
                    f"{MAX_STRING:,}): references that repeat each other?",
                    "make one of the referenced keys a literal value",
                )
            return text
        return node

    def resolve_ref(self, ref: str, where: str, stack: tuple[str, ...]) -> Any:
        ref = ref.strip()
        if ref.startswith(("env:", "oc.env:")):
            name, _, default = ref.split(":", 1)[1].partition(",")
            value = os.environ.get(name.strip())
            if value is not None:
                return value
            if default:
                return default.strip()
            return self.problem(
                where,
                f"${{{ref}}}: environment variable {name.strip()} is not set",
                f"export {name.strip()}=... or write ${{env:{name.strip()},default}}",
            )
        if ref in stack:
            return self.problem(
                where,
                "circular interpolation: " + " -> ".join((*stack, ref)),
                "make one of these keys a literal value",
            )
        if ref in self.cache:
            return self.cache[ref]
        target = _lookup(self.tree, ref)
        if target is _MISSING:
            return self.problem(
                where,
                f"${{{ref}}} refers to a key that does not exist",
                "check the dotted path (sections.and.keys, dashes kept as written)",
            )
        value = self.walk(target, ref, (*stack, ref))
        self.cache[ref] = value
        return value

    def embed(self, ref: str, where: str, stack: tuple[str, ...]) -> str:
        value = self.resolve_ref(ref, where, stack)
        if isinstance(value, (dict, list)):
            return self.problem(
                where,
                f"${{{ref.strip()}}} is a {'section' if isinstance(value, dict) else 'list'}; "
                f"it can only be a whole value, not part of a text",
                f"write `{where.rsplit('.', 1)[-1]}: ${{{ref.strip()}}}` alone, or refer to one key "
                "inside it",
            )
        text = _fmt(value)
        return text if len(text) <= MAX_STRING else text[: MAX_STRING + 1]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
