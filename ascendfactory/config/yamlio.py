"""YAML reading (safe loader only) that also types `1e-5` as a float, as users and MindSpeed scripts write it.

PyYAML implements YAML 1.1, where a float needs a dot (`1.0e-5`); `1e-5` would silently become a string.
The libyaml scanner and emitter are used when PyYAML has them (several times faster; same documents).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ascendfactory.errors import ConfigError, Problem

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Loader(SafeLoader):
    pass


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def loads(text: str, *, source: str = "<string>") -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader derives from SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise ConfigError(
            Problem(
                key=where,
                source=source,
                message=f"not valid YAML: {getattr(e, 'problem', None) or e}",
                fix="fix the syntax at that position (indentation, a missing ':' or quote)",
            )
        )


def load_file(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            Problem(
                key="config file",
                message=f"{p} does not exist",
                fix="pass the path of an experiment yaml; create one with `ascendfactory-cli config`",
            )
        )
    return loads(p.read_text(encoding="utf-8"), source=str(p))


def dumps(data: Any) -> str:
    return yaml.dump(
        data, Dumper=SafeDumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120
    )
