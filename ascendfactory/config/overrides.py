"""Command-line overrides: `--a.b.c=value` and `--a.b.c value`, values typed as YAML scalars.

`--backend_config.training.lr=1e-5`, `--env.NODE_RANK 1`, `--backend_config.training.lora-target-modules
"[linear_qkv, linear_proj]"` (a YAML flow list). Dashes inside keys are kept: the first `--` is the only
prefix removed.
"""

from __future__ import annotations

import re
from typing import Any

from ascendfactory.config.bounds import MAX_DEPTH
from ascendfactory.config.yamlio import loads
from ascendfactory.errors import ConfigError, Problem

MAX_KEY = 500  # characters in one dotted key; the longest real one has about 80
MAX_DIGITS = 1000  # digits in one number; Python refuses to read more than 4300
_NUMBER = re.compile(r"[-+]?[\d_]+(\.[\d_]*)?([eE][-+]?\d+)?")


def parse_value(text: str) -> Any:
    """A command-line value typed as YAML (scalar or flow list/map): 8 -> int, 1e-5 -> float."""
    try:
        return loads(text)
    except ConfigError:
        return text


def parse_overrides(args: list[str]) -> list[tuple[str, Any]]:
    """['--a.b=1', '--c.d', 'x'] -> [('a.b', 1), ('c.d', 'x')]. Anything else is a ConfigError."""
    problems: list[Problem] = []
    out = parse_overrides_collecting(args, problems)
    if problems:
        raise ConfigError(problems)
    return out


def parse_overrides_collecting(args: list[str], problems: list[Problem]) -> list[tuple[str, Any]]:
    """The well-formed overrides; a Problem appended to `problems` for each malformed argument."""
    out: list[tuple[str, Any]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            problems.append(
                Problem(
                    key=arg,
                    source="command line",
                    message="unexpected argument",
                    fix="overrides are --dotted.key=value or --dotted.key value, "
                    "e.g. --env.NODE_RANK=1 --backend_config.training.lr=1e-5",
                )
            )
            i += 1
            continue
        body = arg[2:]
        if "=" in body:
            key, raw = body.split("=", 1)
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            key, raw = body, args[i + 1]
            i += 2
        else:
            problems.append(
                Problem(
                    key=body,
                    source="command line",
                    message="override has no value",
                    fix=f"write --{body}=VALUE (or --{body} VALUE)",
                )
            )
            i += 1
            continue
        if not key or key.startswith(".") or key.endswith(".") or ".." in key:
            problems.append(
                Problem(
                    key=key or arg,
                    source="command line",
                    message="malformed key",
                    fix="use a dotted path such as backend_config.training.lr",
                )
            )
            continue
        too_big = _too_big(key, raw)
        if too_big:
            problems.append(
                Problem(key=key[:80] + ("..." if len(key) > 80 else ""), source="command line", **too_big)
            )
            continue
        out.append((key, parse_value(raw)))
    return out


def _too_big(key: str, raw: str) -> dict[str, str] | None:
    """A key or number no experiment has (message, fix), before anything walks or converts it."""
    if len(key) > MAX_KEY or key.count(".") >= MAX_DEPTH:
        return {
            "message": f"a key of {len(key)} characters and {key.count('.') + 1} levels (at most {MAX_KEY} "
            f"and {MAX_DEPTH})",
            "fix": "use a dotted path such as backend_config.training.lr",
        }
    text = raw.strip()
    if _NUMBER.fullmatch(text) and sum(c.isdigit() for c in text) > MAX_DIGITS:
        return {
            "message": f"a number of {sum(c.isdigit() for c in text)} digits (at most {MAX_DIGITS})",
            "fix": "give a number of a sensible size, or quote it to make it a text",
        }
    return None
