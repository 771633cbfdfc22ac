"""`ascendfactory-cli`: assembles the command groups and owns the one error boundary."""

from __future__ import annotations

import importlib
import inspect
import sys

import typer

# Every top-level command, by name: the module whose `register(app)` adds it (`info_cmd` adds four).
COMMANDS = {
    "config": "config_cmd",
    "train": "train_cmd",
    "estimate": "estimate_cmd",
    "convert": "convert_cmd",
    "preprocess": "preprocess_cmd",
    **dict.fromkeys(("models", "experiments", "show", "doctor"), "info_cmd"),
    "logs": "logs_cmd",
    "submit": "submit_cmd",
    "performance": "performance_cmd",
    "eval": "eval_cmd",
}


def build_app(command: str | None = None, *, listing: bool = False) -> typer.Typer:
    """The CLI with every command, or with `command` alone. Typer turns each registered command into a
    click command (signature, type hints, pydantic adapters) on every start, so the console script imports
    and builds only the one it runs; its `--help`, usage and errors are the same as in the full app. A group
    whose commands plugins add (`submit`) reads the installed plugins only when it runs alone (`alone`);
    `listing`: the app only lists the commands (`--help`, a misspelt command), so such a group adds its help
    line, not its commands (they import the schedulers' models)."""
    cli = typer.Typer(
        name="ascendfactory-cli",
        help="One experiment YAML in; validated, resumable LLM training out (MindSpeed-LLM, LLaMA-Factory, "
        "VeRL, MindSpeed-RL, MindSpeed-MM, or the embedded PyTorch backend).",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # plain help: rich's markdown/pygments stack would double start-up time
    )
    for module in dict.fromkeys([COMMANDS[command]] if command else COMMANDS.values()):
        register = importlib.import_module(f"ascendfactory.cli.{module}").register
        if "alone" in inspect.signature(register).parameters:  # a group whose commands plugins extend
            register(cli, alone=command is not None, listing=listing)
        else:
            register(cli)
    if command:
        cli.callback()(_group)  # a lone command would otherwise become the root command and lose its name
    return cli


def _group() -> None:
    """Typer's group callback for an app built with one command: no options of its own."""


app: typer.Typer  # the full CLI, built on first use by the module `__getattr__` below


def __getattr__(name: str) -> typer.Typer:
    """`app`, the full CLI (tests, docs), built on first use: the console script builds one command."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    global app
    app = build_app()
    return app


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app; every error ends in a few lines, never a traceback (unless
    AF_DEBUG=1): ours by the table in `cli._errors`, usage errors as click shows them (exit 2), anything else
    as an internal error (exit 1)."""
    from ascendfactory.errors import AscendFactoryError

    try:
        rv = _app_for(sys.argv[1:] if argv is None else argv)(
            args=argv, prog_name="ascendfactory-cli", standalone_mode=False
        )
    except AscendFactoryError as e:
        from ascendfactory.cli._errors import debug_enabled, format_error
        from ascendfactory.cli._output import out

        if debug_enabled():
            raise
        out.error(format_error(e))
        return e.exit_code
    except SystemExit as e:  # typer/click exit paths (help, typer.Exit)
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        usage = _usage_error_code(e)  # typer raises its bundled click's exceptions (typer._click)
        if usage is not None:
            return usage
        from ascendfactory.cli._errors import debug_enabled, format_internal

        if debug_enabled():
            raise
        from ascendfactory.cli._output import out

        out.error(format_internal(e))
        return 1
    return rv if isinstance(rv, int) else 0


def _app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command `argv` names; the full app for anything else (no command, `--help`,
    completion, a misspelt command, which click answers with the names it knows)."""
    if argv and argv[0] in COMMANDS:
        return build_app(argv[0])
    return build_app(listing=True)


def _usage_error_code(e: Exception) -> int | None:
    """Show a click usage error the way click does and return its exit code; None for other errors."""
    import importlib

    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            errors = importlib.import_module(name)
        except ImportError:
            continue
        if isinstance(e, errors.ClickException):
            e.show()
            return 2 if isinstance(e, errors.UsageError) else e.exit_code
        abort = getattr(errors, "Abort", None)  # not in every bundled copy
        if abort is not None and isinstance(e, abort):
            return 130
    return None


if __name__ == "__main__":
    sys.exit(main())
