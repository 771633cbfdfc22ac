"""The CLI's single error boundary: a table from exception type to how it is shown."""

from __future__ import annotations

import os
from collections.abc import Callable

from ascendfactory.errors import (
    AscendFactoryError,
    BackendNotFoundError,
    ConfigError,
    ConversionKeyError,
    InterruptedRunError,
    StageFailedError,
)


def _config(e: ConfigError) -> str:
    return e.render() + "\n(nothing was run; fix the keys above and run the same command again)"


def _plain(e: AscendFactoryError) -> str:
    return str(e)


# Most specific first; the first isinstance match wins.
CLI_ERROR_MAPPINGS: list[tuple[type[AscendFactoryError], Callable[..., str]]] = [
    (ConfigError, _config),
    (BackendNotFoundError, _plain),
    (ConversionKeyError, _plain),
    (StageFailedError, _plain),
    (InterruptedRunError, _plain),
    (AscendFactoryError, _plain),
]


def format_error(e: AscendFactoryError) -> str:
    for kind, formatter in CLI_ERROR_MAPPINGS:
        if isinstance(e, kind):
            return formatter(e)
    return str(e)


def format_internal(e: BaseException) -> str:
    """An exception nobody expected: one line, and how to see more (a bug to report, not a usage error)."""
    text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    return (
        f"internal error: {type(e).__name__}{': ' + text if text else ''}\n"
        "(a bug in ascendfactory-cli; run again with AF_DEBUG=1 for the traceback and report it)"
    )


def debug_enabled() -> bool:
    return os.environ.get("AF_DEBUG", "") not in ("", "0", "false", "False")
