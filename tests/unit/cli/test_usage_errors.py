"""Command-line usage errors: one `Error:` line and exit 2, never a traceback (typer's bundled click)."""

from __future__ import annotations

import pytest

from ascendfactory.cli.app import main


@pytest.mark.parametrize(
    "argv,words",
    [
        (["frobnicate"], "No such command 'frobnicate'"),
        (["train"], "Missing argument"),
        (["train", "cfgs/quickstart.yaml", "--format=xml", "--dry-run"], "'xml' is not one of"),
        (["train", "cfgs/quickstart.yaml", "--dry-run=maybe"], "does not take a value"),
        (["train", "cfgs/quickstart.yaml", "--format", "json"], "add --dry-run"),  # never a real run
        (["train", "cfgs/quickstart.yaml", "--format=text"], "add --dry-run"),
    ],
)
def test_usage_errors_exit_2_with_one_error_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
