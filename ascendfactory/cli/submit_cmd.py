"""`ascendfactory-cli submit slurm|k8s|status|cancel`: hand an experiment to a cluster scheduler.

The scheduler runs the same `ascendfactory-cli train <yaml>` on every node; each node's rank, the node count
and node 0's address come from the platform's variables (`config.platforms`). The experiment is validated
as node 0 of the job would plan it before anything is queued.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from ascendfactory.cli._options import ConfigArgs, DryRunOpt, JsonOpt

SLURM_EXAMPLES = [
    "ascendfactory-cli submit slurm exp.yaml --nodes 2 --partition gpu --time 04:00:00 --gpus-per-node 8",
    "ascendfactory-cli submit slurm cfgs/quickstart.yaml --nodes 1 --dry-run",
    "ascendfactory-cli submit status exp.yaml      # the newest job submitted for its output tree",
    "ascendfactory-cli submit cancel 4242",
]
K8S_EXAMPLES = [
    "ascendfactory-cli submit k8s --kind volcano exp.yaml --nodes 2 --image registry/af:latest",
    "kubectl apply -f outputs/<model>-<exp>/.af/submit/volcano-job.yaml",
    "ascendfactory-cli submit k8s --kind pytorchjob exp.yaml --nodes 4 --image registry/af:latest "
    "--gpus-per-node 8 --dry-run",
]

app = typer.Typer(
    help="Submit an experiment to Slurm or write a Kubernetes job manifest; status and cancel of Slurm jobs.",
    no_args_is_help=True,
)
_CTX = {"ignore_unknown_options": True, "allow_interspersed_args": True}

NodesOpt = Annotated[int, typer.Option("--nodes", min=1, max=100_000, help="Nodes (one task each).")]
GpusOpt = Annotated[
    Optional[int], typer.Option("--gpus-per-node", min=1, help="Accelerators to request on each node.")
]
TargetArgs = Annotated[
    list[str],
    typer.Argument(
        help="A job id, or the experiment (CONFIG_YAML [MODEL EXP] [--overrides]) whose newest job to use.",
        show_default=False,
    ),
]


class Kind(str, Enum):
    volcano = "volcano"
    pytorchjob = "pytorchjob"


def _experiment(args: list[str]):
    from ascendfactory.cli._experiment_args import load_from_args, split_args
    from ascendfactory.submit.job import Experiment

    path, model, exp, overrides = split_args(args)
    names = (model, exp) if model and exp else ()
    return Experiment(path, names, tuple(overrides), load_from_args(args))


@app.command("slurm", context_settings=_CTX, epilog="Examples:\n\n" + "\n\n".join(SLURM_EXAMPLES))
def slurm(
    args: ConfigArgs,
    nodes: NodesOpt = 1,
    partition: Annotated[Optional[str], typer.Option("--partition", help="sbatch --partition.")] = None,
    time: Annotated[Optional[str], typer.Option("--time", help="sbatch --time, e.g. 04:00:00.")] = None,
    account: Annotated[Optional[str], typer.Option("--account", help="sbatch --account.")] = None,
    gpus_per_node: GpusOpt = None,
    cpus_per_task: Annotated[
        Optional[int], typer.Option("--cpus-per-task", min=1, help="sbatch --cpus-per-task.")
    ] = None,
    dry_run: DryRunOpt = False,
) -> None:
    """Submit to Slurm: an sbatch script in the output tree, one `ascendfactory-cli train` per node."""
    from ascendfactory.cli._output import out
    from ascendfactory.submit import slurm as s

    exp = _experiment(args)
    opts = s.SlurmOptions(
        nodes=nodes,
        partition=partition,
        time=time,
        account=account,
        gpus_per_node=gpus_per_node,
        cpus_per_task=cpus_per_task,
    )
    s.validate(exp, opts)
    text = s.render(exp, opts)
    if dry_run:
        out.raw(text)
        return
    job_id, script = s.submit(exp, opts, text)
    out.text(f"submitted slurm job {job_id} ({nodes} node{'s' if nodes > 1 else ''})")
    out.text(f"script: {script}")
    out.text(f"logs: {exp.output_dir / 'logs'}/slurm-{job_id}*.out")
    out.text(f"status: ascendfactory-cli submit status {job_id}")


@app.command("k8s", context_settings=_CTX, epilog="Examples:\n\n" + "\n\n".join(K8S_EXAMPLES))
def k8s(
    args: ConfigArgs,
    kind: Annotated[Kind, typer.Option("--kind", help="volcano (a Volcano Job) or pytorchjob (Kubeflow).")],
    image: Annotated[str, typer.Option("--image", help="Container image with ascendfactory-cli installed.")],
    nodes: NodesOpt = 1,
    gpus_per_node: GpusOpt = None,
    device_resource: Annotated[
        str,
        typer.Option(
            "--device-resource", help="Resource name of one accelerator (huawei.com/Ascend910 ...)."
        ),
    ] = "nvidia.com/gpu",
    dry_run: DryRunOpt = False,
) -> None:
    """Write a Kubernetes job manifest (kubectl apply -f it); its pods run `ascendfactory-cli train`."""
    from ascendfactory.cli._output import out
    from ascendfactory.submit import k8s as k

    exp = _experiment(args)
    opts = k.PodOptions(
        image=image, nodes=nodes, gpus_per_node=gpus_per_node, device_resource=device_resource
    )
    k.validate(exp, kind.value, opts)
    text = k.render(exp, kind.value, opts)
    if dry_run:
        out.raw(text)
        return
    path = k.write(exp, kind.value, text)
    out.text(f"wrote {path}")
    out.text(f"apply it: kubectl apply -f {path}")


def _job_id(target: list[str]) -> tuple[str, object]:
    """(job id, logs dir or None) for a job id or an experiment's newest job."""
    if len(target) == 1 and target[0].isdigit():
        return target[0], None
    from ascendfactory.submit.slurm import job_of

    exp = _experiment(target)
    return job_of(exp.output_dir), exp.output_dir / "logs"


@app.command("status", context_settings=_CTX, epilog="Examples:\n\n" + "\n\n".join(SLURM_EXAMPLES[2:]))
def status(target: TargetArgs, json_out: JsonOpt = False) -> None:
    """State of a Slurm job (squeue / scontrol / sacct); a failed job's error lines from its nodes."""
    from ascendfactory.cli._output import out
    from ascendfactory.submit import slurm as s

    job_id, logs_dir = _job_id(target)
    result = s.status(job_id, logs_dir)  # type: ignore[arg-type]
    if json_out:
        out.json(result)
    else:
        out.text(
            f"slurm job {job_id}: {result['state']} (exit {result['exit_code']}, reason {result['reason']})"
        )
        errors = result.get("errors")
        for line in errors if isinstance(errors, list) else []:
            out.text(f"  {line}")
    if result["state"] not in s.ACTIVE and result["state"] != "COMPLETED":
        raise typer.Exit(1)


@app.command("cancel", context_settings=_CTX, epilog="Examples:\n\n" + SLURM_EXAMPLES[3])
def cancel(target: TargetArgs) -> None:
    """Cancel a Slurm job (scancel); every node's runner stops its processes (SIGTERM)."""
    from ascendfactory.cli._output import out
    from ascendfactory.submit import slurm as s

    job_id, _ = _job_id(target)
    s.cancel(job_id)
    out.text(f"cancelled slurm job {job_id}")


def register(cli: typer.Typer) -> None:
    """Add the `submit` command group to `cli`."""
    cli.add_typer(app, name="submit")
