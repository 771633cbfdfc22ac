"""`ascendfactory-cli estimate`: the per-device peak memory of an experiment, before anything queues.

It shows the estimate the dry run made (`plan.memory`: planned as `train --dry-run` plans it, the cluster
platform's topology applied), estimated once. Exit status: 0 when the job fits or the device memory is
unknown, 3 when it does not fit (the verdict a script can test; the text and `--json` say the same), 2 for
a configuration problem, 1 when the backend has no memory model for this experiment.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ascendfactory.cli._options import ConfigArgs, JsonOpt

EXAMPLES = [
    "ascendfactory-cli estimate exp.yaml",
    "ascendfactory-cli estimate exp.yaml --memory_check.device=ascend-910b3 --suggest",
    "ascendfactory-cli estimate exp.yaml --backend_config.training.recompute-granularity=full --json",
]
SuggestOpt = Annotated[
    bool,
    typer.Option(
        "--suggest",
        help="Also list the layouts that fit these devices (parallelism, recompute, sharding, offload, "
        "micro-batch: what the backend can change), fastest first by an estimated step time, each with "
        "the keys to set.",
    ),
]
DOES_NOT_FIT = 3  # the exit status of an estimate whose verdict is DOES NOT FIT


def register(app: typer.Typer) -> None:
    @app.command(
        "estimate",
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
        epilog="Examples:\n\n" + "\n\n".join(EXAMPLES),
    )
    def estimate(args: ConfigArgs, as_json: JsonOpt = False, suggest: SuggestOpt = False) -> None:
        """Estimate per-device peak memory by pipeline stage (weights, gradients, optimizer, activations,
        logits, buffers) against the device's memory; never refuses (train does), but exits 3 when the
        job does not fit."""
        import os

        from ascendfactory.backends.planner import make_plan, train_environ
        from ascendfactory.backends.registry import get_backend
        from ascendfactory.cli._experiment_args import load_from_args
        from ascendfactory.cli._output import escape, out
        from ascendfactory.memory.devices import DeviceMemory
        from ascendfactory.memory.fixes import describe_settings, human_time, overrides, suggest_layouts
        from ascendfactory.memory.report import human, render_lines

        loaded = load_from_args(args, collect=True)
        plan = make_plan(loaded, dry_run=True)
        memory = plan.memory
        if memory is None:
            out.error(f"no memory model for backend {loaded.config.backend} with this experiment")
            raise typer.Exit(1)
        suggestions = []
        if suggest:
            target = get_backend(loaded.config.backend).memory_target(plan.run)
            usable = None
            if memory["device_memory_bytes"] is not None:
                usable = memory["device_memory_bytes"] - memory["reserve_bytes"]
            device = DeviceMemory(
                memory["device_memory_bytes"],
                memory["device"],
                memory["device_source"],
                memory["device_kind"],
            )
            if target is not None:
                environ = train_environ(plan, os.environ)
                suggestions = suggest_layouts(target, usable, device=device, environ=environ)
        verdict = DOES_NOT_FIT if memory["fits"] is False else 0
        if as_json:
            payload: dict[str, Any] = {"memory": memory, "timing": plan.timing}
            if suggest:
                payload["suggestions"] = [s.to_dict() for s in suggestions]
            out.json(payload)
            raise typer.Exit(verdict)
        out.markup(f"[bold]memory[/bold]  backend={plan.backend}  model={escape(plan.model_name)}")
        for line in render_lines(memory):
            out.markup(f"  {escape(line)}")
        for note in memory["assumptions"]:
            out.markup(f"  [dim]assumes: {escape(note)}[/dim]")
        if plan.timing is not None:
            from ascendfactory.speed.report import render_lines as time_lines

            out.markup("[bold]time[/bold] (a model of the layout, calibrated on measured runs)")
            for line in time_lines(plan.timing):
                out.markup(f"  {escape(line)}")
            for note in plan.timing.get("assumptions", []):
                out.markup(f"  [dim]assumes: {escape(note)}[/dim]")
        if suggest:
            where = "these devices" if usable is not None else "(device memory unknown: all shown)"
            out.markup(
                f"\n[bold]layouts that fit {where}[/bold] (fastest first by an estimated step time; "
                "peak per device; the keys to set):"
            )
            if not suggestions:
                out.markup("  none found: no layout searched fits; use more devices or a smaller model")
            for s in suggestions:
                note = f"  [dim]({escape(s.note)})[/dim]" if s.note else ""
                figures = f"{human_time(s.step_s):>10}  {human(s.estimate.peak):>10}"
                out.markup(f"  {escape(s.describe()):<58} {figures}{note}")
                out.markup(f"      [dim]{escape(describe_settings(s.settings))}[/dim]")
                if s.settings:
                    out.markup(f"      [dim]{escape(' '.join(overrides(s.settings)))}[/dim]")
        raise typer.Exit(verdict)
