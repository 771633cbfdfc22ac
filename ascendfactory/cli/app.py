"""`ascendfactory-cli`: assembles the command groups and owns the one error boundary."""

from __future__ import annotations

import sys

import typer

from ascendfactory.cli import (
    config_cmd,
    convert_cmd,
    estimate_cmd,
    info_cmd,
    logs_cmd,
    preprocess_cmd,
    submit_cmd,
    train_cmd,
)

app = typer.Typer(
    name="ascendfactory-cli",
    help="One experiment YAML in; validated, resumable LLM training out (MindSpeed-LLM, LLaMA-Factory, "
    "VeRL, MindSpeed-RL, MindSpeed-MM, or the embedded PyTorch backend).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich's markdown/pygments stack would double start-up time
)
config_cmd.register(app)
train_cmd.register(app)
estimate_cmd.register(app)
convert_cmd.register(app)
preprocess_cmd.register(app)
info_cmd.register(app)
app.add_typer(logs_cmd.app, name="logs")
app.add_typer(submit_cmd.app, name="submit")


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app; every error ends in a few lines, never a traceback (unless
    AF_DEBUG=1): ours by the table in `cli._errors`, usage errors as click shows them (exit 2), anything else
    as an internal error (exit 1)."""
    from ascendfactory.cli._errors import debug_enabled, format_error, format_internal
    from ascendfactory.errors import AscendFactoryError

    try:
        rv = app(args=argv, prog_name="ascendfactory-cli", standalone_mode=False)
    except AscendFactoryError as e:
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
        if debug_enabled():
            raise
        from ascendfactory.cli._output import out

        out.error(format_internal(e))
        return 1
    return rv if isinstance(rv, int) else 0


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
