"""Small tools users expect: `models`, `experiments`, `show`, `doctor`."""

from __future__ import annotations

from typing import Annotated

import typer

from ascendfactory.cli._options import ConfigArgs, JsonOpt

EXAMPLES = {
    "models": ["ascendfactory-cli models", "ascendfactory-cli models --json"],
    "experiments": ["ascendfactory-cli experiments", "ascendfactory-cli experiments --backend verl"],
    "show": ["ascendfactory-cli show cfgs/quickstart.yaml --backend_config.training.lr=1e-4"],
    "doctor": [
        "ascendfactory-cli doctor",
        "ascendfactory-cli doctor --backend mindspeed-llm",
        "ascendfactory-cli doctor cfgs/quickstart.yaml   # its backend and its env.MASTER_PORT",
    ],
}


WIDE = 140  # `models`: below this many columns, the five least used columns are left out


def _epilog(name: str) -> str:
    return "Examples:\n\n" + "\n\n".join(EXAMPLES[name])


FACTS = (
    "layers",
    "hidden",
    "ffn",
    "heads",
    "kv_heads",
    "vocab",
    "max_pos",
    "tied",
    "model_type_hf",
    "family",
)
# mixture of experts / latent attention: every fact in --json; the routed experts and top-k in the table
MOE_FACTS = (
    "experts",
    "topk",
    "moe_ffn",
    "shared_experts",
    "dense_layers",
    "mtp_layers",
    "q_lora",
    "kv_lora",
    "qk_nope",
    "qk_rope",
    "v_head",
)
NARROW_DROPS = ("ffn", "tied", "model_type_hf", "family", "experts")


def _experts(e: dict) -> str:
    """'128 top 8', '64+2 shared top 6' (routed, shared, top-k); '-' for a dense model."""
    if not e.get("experts"):
        return "-"
    shared = f"+{e['shared_experts']}sh" if e.get("shared_experts") else ""
    return f"{e['experts']}{shared} top{e.get('topk')}"


def models(as_json: JsonOpt = False) -> None:
    """List the model catalog (architecture facts used for validation)."""
    from ascendfactory.cli._output import out
    from ascendfactory.config.catalog import load_catalog

    out.mode = "json" if as_json else "human"
    rows = []
    for name, e in load_catalog().items():
        row = {"model": name, **{k: e.get(k) for k in FACTS}}
        if out.mode == "json":
            row |= {k: e.get(k) for k in MOE_FACTS if e.get(k) is not None}
        else:
            row["experts"] = _experts(e)
        rows.append(row)
    columns = list(rows[0]) if rows else []
    title = "model catalog (ascendfactory/config/models.yaml)"
    if out.mode == "human" and out.console.width < WIDE:  # the facts validation uses, never cut
        columns = [c for c in columns if c not in NARROW_DROPS]
        title += f"; a wider terminal (>= {WIDE} columns) or --json shows every column"
    out.table(rows, title=title, columns=columns, whole=tuple(columns))


def experiments(
    backend: Annotated[str | None, typer.Option("--backend", help="Only this backend.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the backends and the experiment templates `config` can write."""
    from ascendfactory.backends.registry import all_backends, get_backend
    from ascendfactory.cli._output import out

    out.mode = "json" if as_json else "human"
    backends = [get_backend(backend, key="--backend")] if backend else all_backends()
    rows = [
        {
            "backend": b.name,
            "experiments": ", ".join(b.experiments()),
            "stages": ", ".join(b.stages),
            "launcher": b.launcher,
            "description": b.description,
        }
        for b in backends
    ]
    out.table(rows, title="backends and experiment templates")


def show(args: ConfigArgs) -> None:
    """Print the resolved experiment (file + overrides + interpolation), validated as --dry-run does."""
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.cli._experiment_args import load_from_args
    from ascendfactory.cli._output import out
    from ascendfactory.config.yamlio import dumps
    from ascendfactory.secrets import mask_secrets

    loaded = load_from_args(args, collect=True)
    make_plan(loaded, dry_run=True)  # the problems `train --dry-run` names, all at once
    out.raw(dumps(mask_secrets(loaded.config.model_dump(mode="json"))))


def doctor(
    experiment: Annotated[
        str | None,
        typer.Argument(
            help="An experiment file (new style): check its backend and its env.MASTER_PORT.",
            show_default=False,
        ),
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="Check what this backend needs (default torch).")
    ] = None,
    install_plan: Annotated[
        str | None,
        typer.Option(
            "--install-plan",
            help="Print (and with --run, run) the installation steps of a backend (or `eval`: the "
            "evaluation environment).",
        ),
    ] = None,
    run: Annotated[bool, typer.Option("--run", help="With --install-plan: run the steps.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check this machine: Python packages, devices, toolkit environment, free port, disk."""
    from ascendfactory.cli._output import out
    from ascendfactory.features.doctor import run_checks
    from ascendfactory.features.install import install_steps, run_install

    out.mode = "json" if as_json else "human"
    if install_plan:
        if install_plan == "eval":  # the evaluation environment (`eval`), not a backend
            import os

            from ascendfactory.evaluation.env import install_steps as eval_steps

            steps = eval_steps(os.environ)
        else:
            steps = install_steps(install_plan)
        if run:
            raise typer.Exit(run_install(steps, say=out.text))
        out.table(
            [{"step": i + 1, "what": s.what, "command": s.display()} for i, s in enumerate(steps)],
            title=f"install plan for {install_plan}",
        )
        return
    port = (6000, "default MASTER_PORT")
    devices, cpu = None, False
    if experiment is not None:
        from ascendfactory.cli._experiment_args import load_from_args
        from ascendfactory.config.devices import resolve_devices_per_node

        cfg = load_from_args([experiment]).config
        backend = backend or cfg.backend
        port = (cfg.env.MASTER_PORT, f"env.MASTER_PORT of {experiment}")
        cpu = cfg.accelerator == "cpu"
        devices = resolve_devices_per_node(cfg.env.NPUS_PER_NODE, cpu=cpu)  # as `train` counts them
    backend = backend or "torch"
    rows = run_checks(backend, port=port, devices=devices, cpu=cpu)
    out.table([r.row() for r in rows], title=f"doctor ({backend})")
    if any(r.status == "missing" and r.required for r in rows):
        raise typer.Exit(1)


NAMES = ("models", "experiments", "show", "doctor")  # the commands `register` adds


def register(app: typer.Typer) -> None:
    app.command("models", epilog=_epilog("models"))(models)
    app.command("experiments", epilog=_epilog("experiments"))(experiments)
    app.command("show", context_settings={"ignore_unknown_options": True}, epilog=_epilog("show"))(show)
    app.command("doctor", epilog=_epilog("doctor"))(doctor)
