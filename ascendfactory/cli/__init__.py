"""Typer commands only: parse, call into the package, render through `_output.out`.

Importing the package first routes `dataclasses`' compiling through the code objects earlier runs kept
(`_dataclass_code`), before any module of the CLI defines its dataclasses."""

from ascendfactory.cli import _dataclass_code

_dataclass_code.install()
