"""Commands that mirror a framework program's own flags forward argv to that program's parser."""

from __future__ import annotations

import importlib

import typer

FORWARD_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def forward(module: str, ctx: typer.Context) -> None:
    """Run `module.main(argv)` in this process (heavy imports happen inside it) and exit with its code."""
    code = importlib.import_module(module).main(list(ctx.args))
    if code:
        raise typer.Exit(code)


def register_forwarding(app: typer.Typer, *, name: str, module: str, help: str, examples: list[str]) -> None:
    """Add command `name` whose argv (including --help) goes to `module.main` unchanged."""

    def command(ctx: typer.Context) -> None:
        forward(module, ctx)

    command.__doc__ = help
    app.command(
        name,
        context_settings=FORWARD_SETTINGS,
        add_help_option=False,
        help=help,
        epilog="Examples:\n\n" + "\n\n".join(examples),
    )(command)
