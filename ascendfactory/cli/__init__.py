"""Typer commands only: parse, call into the package, render through `_output.out`."""
