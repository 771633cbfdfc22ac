"""`ascendfactory-cli estimate`: the per-device peak memory of an experiment, before anything queues."""

from __future__ import annotations

from typing import Annotated

import typer

from ascendfactory.cli._options import ConfigArgs, JsonOpt

EXAMPLES = [
    "ascendfactory-cli estimate exp.yaml",
    "ascendfactory-cli estimate exp.yaml --memory_check.device=ascend-910b3 --suggest",
    "ascendfactory-cli estimate exp.yaml --backend_config.training.recompute-granularity=full --json",
]
SuggestOpt = Annotated[
    bool,
    typer.Option("--suggest", help="Also list the Megatron layouts that fit these devices, fastest first."),
]


def register(app: typer.Typer) -> None:
    @app.command(
        "estimate",
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
        epilog="Examples:\n\n" + "\n\n".join(EXAMPLES),
    )
    def estimate(args: ConfigArgs, as_json: JsonOpt = False, suggest: SuggestOpt = False) -> None:
        """Estimate per-device peak memory by pipeline stage (weights, gradients, optimizer, activations,
        logits, buffers) against the device's memory; never refuses (train does)."""
        from ascendfactory.backends.planner import build_context, make_plan
        from ascendfactory.backends.registry import get_backend
        from ascendfactory.cli._experiment_args import load_from_args
        from ascendfactory.cli._output import escape, out
        from ascendfactory.memory.check import estimate_target
        from ascendfactory.memory.devices import resolve_device_memory
        from ascendfactory.memory.fixes import suggest_layouts
        from ascendfactory.memory.report import human, render_lines

        loaded = load_from_args(args, collect=True)
        plan = make_plan(loaded, dry_run=True)
        ctx = build_context(loaded)
        target = get_backend(loaded.config.backend).memory_target(ctx, plan)
        if target is None or plan.memory is None:
            out.error(f"no memory model for backend {loaded.config.backend} with this experiment")
            raise typer.Exit(1)
        mc = loaded.config.memory_check
        device = resolve_device_memory(memory_gb=mc.device_memory_gb, device=mc.device)
        result = estimate_target(target, device)
        suggestions = suggest_layouts(target, result.usable) if suggest else []
        if as_json:
            payload = {"memory": result.to_dict()}
            if suggest:
                payload["suggestions"] = [
                    {
                        "layout": s.describe(),
                        "per_device_peak_bytes": int(s.estimate.peak),
                        "step_s": s.step_s,
                    }
                    for s in suggestions
                ]
            out.json(payload)
            return
        out.markup(f"[bold]memory[/bold]  backend={plan.backend}  model={escape(plan.model_name)}")
        for line in render_lines(result.to_dict()):
            out.markup(f"  {escape(line)}")
        for note in result.assumptions:
            out.markup(f"  [dim]assumes: {escape(note)}[/dim]")
        if suggest:
            out.markup(
                "\n[bold]layouts that fit[/bold] (fastest first; estimated step time, peak per device):"
            )
            if not suggestions:
                out.markup("  none found (a Megatron actor is needed; or no layout fits these devices)")
            for s in suggestions:
                out.markup(f"  {s.describe():<55} {s.step_s:8.2f} s  {human(s.estimate.peak)}")
