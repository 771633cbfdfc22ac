"""One scheduler interface: every scheduler is a `Scheduler` record in an open registry (`SCHEDULERS`), the
built-ins Slurm (`submit/slurm.py`) and the Kubernetes kinds Volcano and PyTorchJob (`submit/k8s.py`), a
plugin's from its entry point (`ascendfactory.registry`).

A record says, as functions of the experiment and its options (`SchedulerOptions`, one pydantic model per
scheduler, which `submit <command>` turns into its flags):

    platform                        the `config.platforms` record its nodes detect (how each learns its rank)
    node_env(exp, opts)             the platform variables node 0 of the job will have (the pre-queue check)
    render(exp, opts) -> text       the job script or manifest (`--dry-run` prints it)
    submit(exp, opts, text)         queue it (or write it where it is applied): a `Submitted`
    status(job, logs_dir)           a `JobState`, for `submit status` (`job`: its entry in submit.json)
    cancel(job)                     `submit cancel`

`command` is the `submit` sub-command it is under and `kind` its `--kind` there (the Kubernetes kinds share
`submit k8s`); a scheduler alone under its command has no kind. The experiment is planned as node 0 of the
job would plan it, and the devices each node requests checked against the processes the experiment runs on
it (`resolve_devices`), before anything is queued.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.registry import Registry
from ascendfactory.submit.job import Experiment, check_nodes


class SchedulerOptions(BaseModel):
    """What every scheduler takes: the node count and the accelerators each node requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: int = Field(1, ge=1, le=100_000, description="Nodes (one task each).")
    gpus_per_node: int | None = Field(
        None,
        ge=1,
        description="Accelerators to request on each node (default: env.NPUS_PER_NODE where "
        "the request needs a count).",
    )

    @property
    def names_a_device(self) -> bool:
        """Whether the options name a device to request without its count (Kubernetes' resource name)."""
        return False


@dataclass(frozen=True)
class Submitted:
    """What `submit` queued or wrote: the job id (or name) and what to tell the user."""

    job_id: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class JobState:
    """A job as its scheduler reports it. `active`: queued or running; `succeeded`: done without error."""

    job_id: str
    state: str
    active: bool
    succeeded: bool
    exit_code: str = ""
    reason: str = ""
    nodes: str = ""
    log: str = ""
    errors: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _no_status(job: Mapping[str, Any], logs_dir: Path | None) -> JobState:
    raise NotImplementedError


@dataclass(frozen=True)
class Scheduler:
    """One scheduler (module docstring)."""

    name: str
    description: str
    options: type[SchedulerOptions]
    platform: str
    node_env: Callable[[Experiment, Any], dict[str, str]]
    render: Callable[[Experiment, Any], str]
    submit: Callable[[Experiment, Any, str], Submitted]
    status: Callable[[Mapping[str, Any], Path | None], JobState] = _no_status
    cancel: Callable[[Mapping[str, Any]], None] = lambda job: None
    command: str = ""  # the `submit` sub-command (default: its name)
    kind: str | None = None  # its `--kind` under a command several schedulers share
    examples: tuple[str, ...] = ()
    help: str = ""  # the command's help line (the first record of a command gives it)
    id_is_number: bool = False  # its job ids are numbers: `submit status 4242` means this scheduler

    @property
    def command_name(self) -> str:
        return self.command or self.name


SCHEDULERS: Registry[Scheduler] = Registry(
    "scheduler",
    key="submit",
    how="ascendfactory.submit.registry.register_scheduler(Scheduler(...))",
)


def experiment_devices(exp: Experiment) -> tuple[int | None, str]:
    """(env.NPUS_PER_NODE as the experiment sets it, where from), (None, "") when it leaves it to the node."""
    loaded = exp.loaded
    env_tree = loaded.tree.get("env")
    env_tree = env_tree if isinstance(env_tree, dict) else {}
    if env_tree.get("NPUS_PER_NODE") is None:
        return None, ""
    return loaded.config.env.NPUS_PER_NODE, loaded.source_of("env.NPUS_PER_NODE")


def resolve_devices(exp: Experiment, opts: SchedulerOptions) -> SchedulerOptions:
    """The options with the devices each node requests settled: `--gpus-per-node` must be the experiment's
    env.NPUS_PER_NODE when it sets one (a job that reserves 8 devices and trains on 2, or the reverse, is a
    mistake caught here); a device named without a count (`--device-resource`) requests
    env.NPUS_PER_NODE of it, and without that count is refused."""
    asked, source = experiment_devices(exp)
    gpus = opts.gpus_per_node
    if gpus is not None and asked is not None and gpus != asked:
        raise ConfigError(
            Problem(
                "--gpus-per-node",
                f"requests {gpus} devices per node, but the experiment runs {asked} processes per node "
                f"(env.NPUS_PER_NODE: {asked}, from {source})",
                fix=f"--gpus-per-node {asked}, or env.NPUS_PER_NODE: {gpus} (--env.NPUS_PER_NODE={gpus})",
                source="command line",
            )
        )
    if gpus is None and opts.names_a_device:
        if asked is None:
            raise ConfigError(
                Problem(
                    "--device-resource",
                    "names the device each node requests, but not how many: the experiment leaves "
                    "env.NPUS_PER_NODE to the node",
                    fix="add --gpus-per-node N, or set env.NPUS_PER_NODE in the experiment",
                    source="command line",
                )
            )
        return opts.model_copy(update={"gpus_per_node": asked})
    return opts


def validate(scheduler: Scheduler, exp: Experiment, opts: SchedulerOptions) -> None:
    """The experiment planned as node 0 of the job will plan it (every problem now, before it queues)."""
    check_nodes(exp, opts.nodes, platform_env=scheduler.node_env(exp, opts), devices=opts.gpus_per_node)
