"""YAML reading (safe loader only) that also types `1e-5` as a float, as users and MindSpeed scripts write it.

PyYAML implements YAML 1.1, where a float needs a dot (`1.0e-5`); `1e-5` would silently become a string.
The libyaml scanner and emitter are used when PyYAML has them (several times faster; same documents).

Stricter than PyYAML where it would silently surprise: a key given twice in one mapping is an error naming
both lines (PyYAML keeps the last); a file that is not UTF-8 is an error naming the line; nesting too deep
for the parser is an error, not a RecursionError. What a loaded tree may contain is `config.bounds`.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml

from ascendfactory.errors import ConfigError, Problem

SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SafeDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class WrittenNumber(float):
    """A mapping key YAML reads as a number (`1e3:`, `0E0:`) that keeps the text the file wrote, so the
    refusal of a key that is not a name (config.bounds) names it as written, not as `1000.0`."""

    written: str

    def __new__(cls, value: float, written: str) -> WrittenNumber:
        key = super().__new__(cls, value)
        key.written = written
        return key

    def __reduce__(self) -> tuple[Any, ...]:  # copies (the loader hands out deep copies) keep the text
        return (WrittenNumber, (float(self), self.written))


class _Loader(SafeLoader):
    def construct_document(self, node: Any) -> Any:
        _refuse_duplicate_keys(node, "", set())
        return super().construct_document(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        mapping = super().construct_mapping(node, deep=deep)
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:float":
                key = self.construct_object(key_node)
                if key in mapping and not isinstance(key, WrittenNumber):
                    mapping[WrittenNumber(key, key_node.value)] = mapping.pop(key)
        return mapping


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: str, first: int, second: int) -> None:
        self.key, self.first, self.second = key, first, second
        super().__init__(f"key {key!r} given twice")


def _refuse_duplicate_keys(node: Any, path: str, seen_nodes: set[int]) -> None:
    """Each mapping's own keys must be distinct (keys merged in with `<<: *anchor` may be overridden).
    Every node is visited once, so aliases repeated inside each other cost nothing here."""
    if id(node) in seen_nodes or isinstance(node, yaml.ScalarNode):
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, child in enumerate(node.value):
            _refuse_duplicate_keys(child, f"{path}.{i}" if path else str(i), seen_nodes)
        return
    seen: dict[Any, int] = {}
    for key_node, value_node in node.value:
        name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            ident = (key_node.tag, key_node.value)
            line = key_node.start_mark.line + 1
            if ident in seen:
                raise DuplicateKeyError(f"{path}.{name}" if path else name, seen[ident], line)
            seen[ident] = line
        _refuse_duplicate_keys(value_node, f"{path}.{name}" if path else name, seen_nodes)


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


_PARSED: dict[str, Any] = {}  # text -> its tree, for the texts of this process (a bulk dry run reads each
_PARSED_MAX = 512  # file several times: its backend, its producers' output dirs, its experiment)


def loads(text: str, *, source: str = "<string>") -> Any:
    """The tree of a YAML text: a fresh copy of it each call (callers may change it), parsed once per text
    (a text's tree depends on nothing else; one that fails is parsed again, for its `source`)."""
    if text not in _PARSED:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = _parse(text, source)
    return copy.deepcopy(_PARSED[text])


def _parse(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader derives from SafeLoader
    except DuplicateKeyError as e:
        raise ConfigError(
            Problem(
                key=e.key,
                source=source,
                message=f"given twice, on line {e.first} and line {e.second} (YAML would silently keep "
                f"the second)",
                fix="keep one of the two",
            )
        ) from None
    except ValueError as e:  # an integer longer than Python reads (4300 digits)
        raise ConfigError(
            Problem(
                key="(file)",
                source=source,
                message=f"a value YAML cannot read: {e}",
                fix="give numbers of a sensible size, or quote them to make them text",
            )
        ) from None
    except RecursionError:
        raise ConfigError(
            Problem(
                key="(file)",
                source=source,
                message="nested too deeply to read",
                fix="flatten the structure (an experiment needs a few levels)",
            )
        ) from None
    except yaml.reader.ReaderError as e:  # a character YAML does not allow (NUL, other control codes)
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        raise ConfigError(
            Problem(
                key=f"line {line}, column {column}",
                source=source,
                message=f"not valid YAML: character {e.character!r} is not allowed in a YAML file",
                fix='remove it (write control characters as escapes inside double quotes, e.g. "\\t")',
            )
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(file)"
        raise ConfigError(
            Problem(
                key=where,
                source=source,
                message=f"not valid YAML: {getattr(e, 'problem', None) or e}",
                fix="fix the syntax at that position (indentation, a missing ':' or quote)",
            )
        ) from None


def load_file(path: str | Path) -> Any:
    p = Path(path)
    if not os.path.isfile(p):
        raise ConfigError(
            Problem(
                key="config file",
                message=f"{p} does not exist",
                fix="pass the path of an experiment yaml; create one with `ascendfactory-cli config`",
            )
        )
    data = p.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(
            Problem(
                key=f"line {line}",
                source=str(p),
                message=f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
                fix="save the file as UTF-8",
            )
        ) from None
    return loads(text, source=str(p))


def dumps(data: Any) -> str:
    return yaml.dump(
        data, Dumper=SafeDumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120
    )
