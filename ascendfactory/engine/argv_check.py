"""Parse a program's argv with its own argparse parser without exiting: errors become `Problem`s.

The embedded programs (train, preprocess, convert) define their flags once, in argparse. The torch
backend parses the argv it plans with the same parsers before anything starts, so a bad value
(`--workers -3`, `--lr abc`) is a configuration error naming the flag, not argparse's usage text later.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from ascendfactory.errors import ConfigError, Problem

_ARGUMENT = re.compile(r"^argument ([^:]+): (.*)$", re.S)
_REQUIRED = "the following arguments are required: "


class _ArgvError(Exception):
    pass


def argparse_problems(message: str) -> list[Problem]:
    """argparse's error text -> Problems keyed by the flag (`--lr`), with the parser's own words."""
    m = _ARGUMENT.match(message)
    if m:
        flag = next((f for f in m.group(1).split("/") if f.startswith("--")), m.group(1))
        return [Problem(key=flag, message=m.group(2), source="command line")]
    if message.startswith(_REQUIRED):
        return [
            Problem(key=flag.strip(), message="is required", source="command line")
            for flag in message[len(_REQUIRED) :].split(",")
        ]
    return [Problem(key="(arguments)", message=message, source="command line")]


def parse_known(
    parser: argparse.ArgumentParser, argv: Sequence[str], *, values_only: bool = False
) -> tuple[argparse.Namespace, list[str]]:
    """`parser.parse_known_args(argv)`, raising ConfigError instead of printing usage and exiting;
    `values_only`: required flags may be absent (checking some flags' values on their own)."""

    def error(message: str) -> None:
        raise _ArgvError(message)

    required = [a for a in parser._actions if a.required] if values_only else []
    for action in required:  # restored below: the same parser serves a full parse later
        action.required = False
    parser.error = error  # type: ignore[method-assign]  # argparse reports every usage error through it
    try:
        return parser.parse_known_args(list(argv))
    except _ArgvError as e:
        raise ConfigError(argparse_problems(str(e))) from None
    finally:
        for action in required:
            action.required = True


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)` with every error (an unknown flag included) as a ConfigError."""
    args, unknown = parse_known(parser, argv)
    if unknown:
        raise ConfigError(
            [Problem(key=a, message="not a flag this program knows", source="command line") for a in unknown]
        )
    return args
