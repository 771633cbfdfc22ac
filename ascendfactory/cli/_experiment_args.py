"""Split `CONFIG [MODEL EXP] [--overrides...]` and load the experiment."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ascendfactory.errors import ConfigError, Problem

if TYPE_CHECKING:
    from ascendfactory.config.load import LoadedExperiment


def split_positional(args: list[str]) -> tuple[list[str], list[str]]:
    """(positionals, overrides): positionals come first; everything from the first `--x` on overrides."""
    i = 0
    while i < len(args) and not args[i].startswith("--"):
        i += 1
    return args[:i], args[i:]


def split_args(args: list[str]) -> tuple[str, str | None, str | None, list[str]]:
    """Positionals come first; everything from the first `--x` on is an override."""
    positional, overrides = split_positional(args)
    if not positional:
        raise ConfigError(
            Problem(
                "CONFIG_YAML",
                "no experiment file given",
                fix="ascendfactory-cli train cfgs/quickstart.yaml  (create one with "
                "`ascendfactory-cli config`)",
            )
        )
    if len(positional) == 2 or len(positional) > 3:
        raise ConfigError(
            Problem(
                "arguments",
                f"expected CONFIG_YAML or CONFIG_YAML MODEL_NAME EXP_NAME, got "
                f"{len(positional)} positional arguments: {' '.join(positional)}",
                fix="overrides need the --dotted.key=value form",
            )
        )
    model, exp = (positional[1], positional[2]) if len(positional) == 3 else (None, None)
    return positional[0], model, exp, overrides


@contextmanager
def pydantic_plugins_off() -> Iterator[None]:
    """While the experiment's models are built and validated, pydantic loads no plugins (the validation
    observers, such as logfire's, that it finds by reading every installed package's entry points: a tenth of
    a dry run's start-up). Typer does the same for its own parameter adapters. Nothing is observed in a
    config check; the variable is restored afterwards, so the steps a run starts inherit the user's own."""
    previous = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = previous


def load_from_args(args: list[str], *, collect: bool = False) -> LoadedExperiment:
    """Load the experiment the arguments name, checked against the registered backends (`collect`: keep
    going after problems, see `config.load`)."""
    from ascendfactory.backends.registry import directory
    from ascendfactory.config.load import load_experiment

    path, model, exp, overrides = split_args(args)
    return load_experiment(
        path, overrides, model_name=model, exp_name=exp, backends=directory(), collect=collect
    )
