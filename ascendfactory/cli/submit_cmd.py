"""`ascendfactory-cli submit <scheduler>|status|cancel`: hand an experiment to a cluster scheduler.

One command per scheduler command of the registry (`submit.registry`: `slurm`, `k8s` with its kinds
`volcano` and `pytorchjob`, and any a plugin adds), its flags those of the scheduler's options model. The
scheduler runs the same `ascendfactory-cli train <yaml>` on every node; each node's rank, the node count and
node 0's address come from its platform's variables (`config.platforms`). The experiment is validated as
node 0 of the job would plan it before anything is queued. `status` and `cancel` ask the scheduler that
queued the job (its entry in the output tree's `.af/submit.json`).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ascendfactory.cli._options import ConfigArgs, DryRunOpt, JsonOpt

STATUS_EXAMPLES = [
    "ascendfactory-cli submit status exp.yaml      # the newest job submitted for its output tree",
    "ascendfactory-cli submit status 4242          # a Slurm job id",
    "ascendfactory-cli submit status af-job-name --scheduler volcano --json",
]
CANCEL_EXAMPLES = ["ascendfactory-cli submit cancel 4242", "ascendfactory-cli submit cancel exp.yaml"]

HELP = "Submit an experiment to a cluster scheduler (Slurm, Kubernetes, or a plugin's); status and cancel."
_CTX = {"ignore_unknown_options": True, "allow_interspersed_args": True}

TargetArgs = Annotated[
    list[str],
    typer.Argument(
        help="A job id, or the experiment (CONFIG_YAML [MODEL EXP] [--overrides]) whose newest job to use.",
        show_default=False,
    ),
]
SchedulerOpt = Annotated[
    Optional[str],
    typer.Option(
        "--scheduler",
        help="The scheduler of a job given by its id (default: the one whose ids are numbers, slurm).",
    ),
]


def _experiment(args: list[str]) -> Any:
    from ascendfactory.cli._experiment_args import load_from_args, split_args
    from ascendfactory.submit.job import Experiment

    path, model, exp, overrides = split_args(args)
    names = (model, exp) if model and exp else ()
    return Experiment(path, names, tuple(overrides), load_from_args(args))


def _options(model: Any, values: dict[str, Any]) -> Any:
    """The scheduler's options model from the flags; a refused value names its flag."""
    from pydantic import ValidationError

    from ascendfactory.errors import ConfigError, Problem

    try:
        return model.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as e:
        raise ConfigError(
            [
                Problem(
                    "--" + str(err["loc"][0]).replace("_", "-") if err["loc"] else "options",
                    str(err["msg"]),
                    source="command line",
                )
                for err in e.errors()
            ]
        ) from None


def _flag(name: str, field: Any) -> inspect.Parameter:
    """One option of a scheduler's options model as a typer parameter (`--gpus-per-node`): an int or a
    text, checked by the model afterwards; required where the model requires it."""
    import typing

    types = typing.get_args(field.annotation) or (field.annotation,)
    base: Any = int if int in types else bool if bool in types else str
    option = typer.Option(f"--{name.replace('_', '-')}", help=field.description or "")
    if field.is_required():
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[base, option])
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[Optional[base], option]
    )


def _command(app: typer.Typer, name: str, schedulers: list[Any]) -> Any:
    """The `submit <name>` command: the experiment, `--kind` when several schedulers share it, the options
    model's flags, `--dry-run`."""
    first = schedulers[0]
    kinds = [s.kind for s in schedulers if s.kind]
    fields = first.options.model_fields

    def run(**values: Any) -> None:
        from ascendfactory.cli._output import out
        from ascendfactory.submit.scheduler import resolve_devices, validate

        args, dry_run = values.pop("args"), values.pop("dry_run")
        kind = values.pop("kind", None)
        scheduler = _pick(name, schedulers, kind)
        exp = _experiment(args)
        opts = resolve_devices(exp, _options(scheduler.options, values))
        validate(scheduler, exp, opts)
        text = scheduler.render(exp, opts)
        if dry_run:
            out.raw(text)
            return
        for line in scheduler.submit(exp, opts, text).lines:
            out.text(line)

    params = [
        inspect.Parameter("args", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ConfigArgs),
    ]
    if kinds:
        help_kind = "; ".join(f"{s.kind} ({s.description})" for s in schedulers if s.kind)
        params.append(
            inspect.Parameter(
                "kind",
                inspect.Parameter.KEYWORD_ONLY,
                annotation=Annotated[str, typer.Option("--kind", help=help_kind)],
            )
        )
    params += [_flag(n, f) for n, f in fields.items()]
    params.append(
        inspect.Parameter("dry_run", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=DryRunOpt)
    )
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__doc__ = first.help or first.description
    examples = [e for s in schedulers for e in s.examples]
    epilog = "Examples:\n\n" + "\n\n".join(examples) if examples else None
    return app.command(name, context_settings=_CTX, epilog=epilog)(run)


def _pick(name: str, schedulers: list[Any], kind: str | None) -> Any:
    if len(schedulers) == 1 and not schedulers[0].kind:
        return schedulers[0]
    from ascendfactory.errors import ConfigError, Problem

    chosen = next((s for s in schedulers if s.kind == kind), None)
    if chosen is None:
        raise ConfigError(
            Problem(
                "--kind",
                f"unknown {name} kind {kind!r}",
                fix="use one of: " + ", ".join(str(s.kind) for s in schedulers),
                source="command line",
            )
        )
    return chosen


def _job(target: list[str], scheduler: str | None) -> tuple[Any, dict[str, Any], Any]:
    """(the scheduler, the job's entry, its logs dir or None) for a job id or an experiment's newest job."""
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.submit.job import newest_job
    from ascendfactory.submit.registry import SCHEDULERS, get_scheduler

    if len(target) == 1 and not target[0].endswith((".yaml", ".yml")):
        if scheduler is None:
            numbered = [s for s in SCHEDULERS.entries() if s.id_is_number]
            if not target[0].isdigit() or not numbered:
                raise ConfigError(
                    Problem(
                        "--scheduler",
                        f"which scheduler holds the job {target[0]!r}?",
                        fix="add --scheduler <name>, or give the experiment file instead of the job id",
                        source="command line",
                    )
                )
            return numbered[0], {"job_id": target[0]}, None
        return get_scheduler(scheduler), {"job_id": target[0]}, None
    exp = _experiment(target)
    job = newest_job(exp.output_dir, scheduler)
    return get_scheduler(str(job["scheduler"])), job, Path(exp.tree.logs_dir)


def status(target: TargetArgs, scheduler: SchedulerOpt = None, json_out: JsonOpt = False) -> None:
    """State of a submitted job, from the scheduler that holds it; a failed job's error lines."""
    from ascendfactory.cli._output import out

    chosen, job, logs_dir = _job(target, scheduler)
    state = chosen.status(job, logs_dir)
    if json_out:
        out.json({"scheduler": chosen.name, **state.to_dict()})
    else:
        extra = ", ".join(f"{k} {v}" for k, v in (("exit", state.exit_code), ("reason", state.reason)) if v)
        out.text(f"{chosen.name} job {state.job_id}: {state.state}" + (f" ({extra})" if extra else ""))
        for line in state.errors:
            out.text(f"  {line}")
    if not state.active and not state.succeeded:
        raise typer.Exit(1)


def cancel(target: TargetArgs, scheduler: SchedulerOpt = None) -> None:
    """Cancel a submitted job; every node's runner stops its processes (SIGTERM)."""
    from ascendfactory.cli._output import out

    chosen, job, _ = _job(target, scheduler)
    chosen.cancel(job)
    out.text(f"cancelled {chosen.name} job {job['job_id']}")


def register(cli: typer.Typer, *, alone: bool = True, listing: bool = False) -> None:
    """Add the `submit` command group to `cli`: one command per scheduler command; the plugins' too when
    the group runs alone (the full app's `--help` reads no distribution's metadata); `listing`: its help
    line only (the top-level `--help` imports no scheduler)."""
    app = typer.Typer(help=HELP, no_args_is_help=True)
    if listing:
        app.callback()(_listed)
        cli.add_typer(app, name="submit")
        return
    from ascendfactory.submit.registry import SCHEDULERS, commands

    if alone:
        SCHEDULERS.complete()
    for name, schedulers in commands().items() if alone else _registered_commands(SCHEDULERS).items():
        _command(app, name, schedulers)
    app.command("status", context_settings=_CTX, epilog="Examples:\n\n" + "\n\n".join(STATUS_EXAMPLES))(
        status
    )
    app.command("cancel", context_settings=_CTX, epilog="Examples:\n\n" + "\n\n".join(CANCEL_EXAMPLES))(
        cancel
    )
    cli.add_typer(app, name="submit")


def _listed() -> None:
    """Submit an experiment to a cluster scheduler (Slurm, Kubernetes, or a plugin's); status and cancel."""


def _registered_commands(registry: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for scheduler in registry.registered().values():
        out.setdefault(scheduler.command_name, []).append(scheduler)
    return out
