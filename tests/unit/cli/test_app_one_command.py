"""The console script builds only the command it runs: the full app's help and usage, fewer imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from ascendfactory.cli.app import COMMANDS, app, build_app

RUNNER = CliRunner()


def _invoke(cli, args: list[str]) -> tuple[int, str]:
    result = RUNNER.invoke(cli, args, prog_name="ascendfactory-cli", env={"COLUMNS": "100"})
    return result.exit_code, result.output


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_one_command_app_gives_the_same_help(name: str) -> None:
    assert _invoke(build_app(name), [name, "--help"]) == _invoke(app, [name, "--help"])


@pytest.mark.parametrize("args", [["train"], ["logs"], ["submit", "nope"], ["config", "--nope"]])
def test_one_command_app_gives_the_same_usage_errors(args: list[str]) -> None:
    one = _invoke(build_app(args[0]), args)
    assert one == _invoke(app, args)
    assert one[0] == 2


def test_every_command_of_the_full_app_is_in_the_table() -> None:
    import typer.main

    group = typer.main.get_command(app)
    assert sorted(group.commands) == sorted(COMMANDS)  # type: ignore[attr-defined]


def test_the_console_script_imports_only_the_command_it_runs() -> None:
    code = (
        "import sys; from ascendfactory.cli.app import main; rc = main(['train', '--help']); "
        "print(sorted(m for m in sys.modules if m.startswith('ascendfactory.cli.') and m.endswith('_cmd')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "['ascendfactory.cli.train_cmd']"
