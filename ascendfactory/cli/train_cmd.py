"""`ascendfactory-cli train`: validate, plan and run an experiment (or print the plan with --dry-run)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import typer

from ascendfactory.cli._options import ConfigArgs, DryRunOpt, FormatOpt, PlanFormat, VerboseOpt
from ascendfactory.errors import ConfigError

if TYPE_CHECKING:
    from ascendfactory.plan import Plan

EXAMPLES = [
    "ascendfactory-cli train cfgs/quickstart.yaml",
    "ascendfactory-cli train cfgs/quickstart.yaml --dry-run --format shell > plan.sh",
    "ascendfactory-cli train exp.yaml --backend_config.training.lr=2e-5 --env.NODE_RANK=1 --env.NNODES=2",
    "ascendfactory-cli train cfgs/multi_model_cfgs.yaml qwen2.5-7b full-4k --dry-run      # old style",
    "ascendfactory-cli train cfgs/ --dry-run      # every experiment in it: one verdict each",
    "ascendfactory-cli train 'cfgs/*.yaml' cfgs/multi_model_cfgs.yaml --dry-run --format json",
]


def register(app: typer.Typer) -> None:
    @app.command(
        "train",
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
        epilog="Examples:\n\n" + "\n\n".join(EXAMPLES),
    )
    def train(
        ctx: typer.Context,
        args: ConfigArgs,
        dry_run: DryRunOpt = False,
        fmt: FormatOpt = PlanFormat.text,
        verbose: VerboseOpt = False,
    ) -> None:
        """Run an experiment: preprocess, convert, train, convert back, plot. Validates everything first."""
        from ascendfactory.cli._experiment_args import load_from_args, pydantic_plugins_off, split_positional
        from ascendfactory.cli._output import out

        _format_needs_dry_run(ctx, dry_run)
        positional, overrides = split_positional(args)
        if _several(positional):
            return _bulk(positional, overrides, dry_run=dry_run, fmt=fmt, verbose=verbose)
        with pydantic_plugins_off():
            from ascendfactory.backends.planner import make_plan, replanner

            try:
                loaded = load_from_args(args, collect=True)
            except ConfigError as e:
                if dry_run and _old_style_alone(e):  # every model and experiment the old-style file holds
                    return _bulk(positional, overrides, dry_run=dry_run, fmt=fmt, verbose=verbose)
                raise
            if not dry_run and not loaded.problems:
                _stop_a_dead_run(loaded.config.af_output_dir)
            plan = make_plan(loaded, dry_run=dry_run)
        if dry_run:
            from ascendfactory.pipeline.manifest import annotate_plan

            _show_plan(annotate_plan(plan), fmt)
            return
        from ascendfactory.pipeline.runner import run_experiment

        for warning in plan.warnings:
            out.warn(warning)
        code = run_experiment(plan, out=out, replan=replanner(loaded), verbose=verbose)
        if code:
            raise typer.Exit(code)


def _several(positional: list[str]) -> bool:
    """Whether the positionals name several experiments (a folder, a glob, files); one plain file is one
    experiment (an old-style one named without a model and an experiment is expanded when its load says
    so, `_old_style_alone`)."""
    if len(positional) == 1 and os.path.isfile(positional[0]):
        return False
    from ascendfactory.cli._bulk import bulk_targets

    return bulk_targets(positional) is not None


def _old_style_alone(e: ConfigError) -> bool:
    """The error of an old-style file named without its model and experiment."""
    return [p.key for p in e.problems] == ["(command)"] and "old-style" in e.problems[0].message


def _bulk(
    positional: list[str], overrides: list[str], *, dry_run: bool, fmt: PlanFormat, verbose: bool
) -> None:
    """`train --dry-run` over several experiments (`cli._bulk`); one exit status."""
    from ascendfactory.cli._bulk import bulk_targets, dry_run_all
    from ascendfactory.cli._experiment_args import pydantic_plugins_off, split_args
    from ascendfactory.cli._output import out

    targets = bulk_targets(positional, expand_one=True)
    if targets is None:
        split_args([*positional, *overrides])  # its own message for a wrong count of arguments
        return
    if not dry_run or fmt is PlanFormat.shell:
        raise typer.BadParameter(
            f"{len(targets)} experiments are checked together with --dry-run (text or --format json); "
            "a run takes one experiment",
            param_hint="'CONFIG_YAML'",
        )
    out.mode = "human"
    with pydantic_plugins_off():
        code = dry_run_all(targets, overrides, as_json=fmt is PlanFormat.json, verbose=verbose)
    if code:
        raise typer.Exit(code)


def _format_needs_dry_run(ctx: typer.Context, dry_run: bool) -> None:
    """`--format` prints a plan: without `--dry-run` it is a usage error (exit 2), never a real run."""
    source = ctx.get_parameter_source("fmt")  # compared by name: typer may bundle its own click
    if not dry_run and getattr(source, "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP"):
        raise typer.BadParameter(
            "prints the plan of a dry run: add --dry-run (a real run has no --format)",
            param_hint="'--format'",
        )


def _stop_a_dead_run(output_dir: str) -> None:
    """What a killed earlier run left in `output_dir` (its torchrun agent still holding `env.MASTER_PORT`)
    is stopped before planning, so the plan's port check sees the port as this run will find it."""
    from ascendfactory.cli._output import out
    from ascendfactory.pipeline.procgroup import stop_dead_runs

    stale = stop_dead_runs(output_dir)
    if stale:
        out.warn(
            f"stopped {len(stale)} process(es) a killed earlier run left in {output_dir} "
            f"(pids {', '.join(map(str, stale))}) before starting"
        )


def _show_plan(plan: Plan, fmt: PlanFormat) -> None:
    from ascendfactory.cli._output import out

    out.mode = "human"
    if fmt is PlanFormat.json:
        from ascendfactory.secrets import mask_secrets

        out.json(mask_secrets(plan.to_dict()))
        return
    if fmt is PlanFormat.shell:
        from ascendfactory.pipeline.render import plan_to_shell

        out.raw(plan_to_shell(plan))
        return
    from ascendfactory.cli._output import escape

    f = plan.facts
    out.markup(
        f"[bold]plan[/bold]  backend={plan.backend}  model={escape(plan.model_name)}  "
        f"exp={escape(plan.exp_name)}"
    )
    out.markup(f"  output dir: {escape(plan.output_dir)}")
    layout = "  ".join(
        f"{k}={f[k]}"
        for k in ("world_size", "nnodes", "devices_per_node", "tp", "pp", "cp", "dp")
        if f.get(k) is not None
    )
    if layout:
        out.markup(f"  layout: {layout}  [dim](devices: {escape(str(f.get('devices_source')))})[/dim]")
    topology = f.get("topology") or {}
    if f.get("platform") or any(t["source"] != "default" for t in topology.values()):
        where = f" (platform: {f['platform']})" if f.get("platform") else ""
        out.markup(f"  topology{escape(where)}:")
        for key, t in topology.items():
            out.markup(f"    {key}={escape(str(t['value']))}  [dim]<- {escape(t['source'])}[/dim]")
    if plan.memory is not None:
        from ascendfactory.memory.report import render_lines

        out.markup("  memory (estimate per device):")
        for line in render_lines(plan.memory):
            out.markup(f"    {escape(line)}")
    if plan.timing is not None:
        from ascendfactory.speed.report import render_lines as time_lines

        out.markup("  time (estimate, before anything queues):")
        for line in time_lines(plan.timing):
            out.markup(f"    {escape(line)}")
    for w in plan.warnings:
        out.markup(f"  [yellow]warning:[/yellow] {escape(w)}")
    if not plan.steps:
        out.markup("  [yellow]no steps[/yellow]")
    for i, step in enumerate(plan.steps, 1):
        status = (
            f"[yellow]skip[/yellow]: {escape(step.skip_reason or '')}"
            if step.skipped
            else "[green]run[/green]"
        )
        out.markup(f"\n[bold]{i}. {step.name}[/bold] ({step.role.value})  {status}")
        for note in step.notes:
            out.markup(f"   note: {escape(note)}")
        if step.skipped:
            continue
        if step.argv:
            out.markup(f"   command: {escape(step.command_line())}")
        else:
            out.markup("   runs inside ascendfactory-cli")
        if step.cwd:
            out.markup(f"   cwd: {escape(step.cwd)}")
        if step.mkdirs:
            out.markup("   creates first: " + escape(", ".join(step.mkdirs)))
        from ascendfactory.secrets import mask_secrets

        env = mask_secrets({**plan.env, **step.env})
        if env:
            out.markup("   env: " + escape(" ".join(f"{k}={v}" for k, v in env.items())))
        if step.inputs:
            out.markup("   inputs: " + escape(", ".join(step.inputs)))
        if step.outputs:
            out.markup("   outputs: " + escape(", ".join(step.outputs)))
        if step.only_node0:
            out.markup("   runs on NODE_RANK 0 only (shared filesystem); other nodes wait for its outputs")
