"""Cluster platforms: where a node's topology comes from when the experiment does not say.

Every node of a multi-node job runs the same `ascendfactory-cli train exp.yaml`; only its rank differs. On a
cluster platform the scheduler already tells each container or task its rank and its peers through
environment variables. The precedence of every topology value (`env.NNODES`, `env.NODE_RANK`,
`env.MASTER_ADDR`, `env.MASTER_PORT`, devices per node) is stated here and only here:

    command line (--env.X=...)  >  experiment file  >  platform variables  >  schema defaults

(devices per node: `ASCEND_RT_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES` still come first, see
`config.devices`). Two platforms at once, a rank outside the node count, a number that is no number, or an
experiment file that pins a topology the platform contradicts (every node would read the same
`NODE_RANK`) is a `ConfigError`.

The platforms, one record each, with the variables each one documents:

- **ModelArts** training jobs (Huawei Cloud, "Environment variables of a training container",
  https://support.huaweicloud.com/usermanual-standard-modelarts/develop-modelarts-0104.html):
  `MA_NUM_HOSTS` (instances), `VC_TASK_INDEX` (this container, from 0), `VC_WORKER_HOSTS` (comma-separated
  domain names; the page's own example is `MASTER_ADDR="${VC_WORKER_HOSTS%%,*}"`), `MA_NUM_GPUS` (cards per
  container), `VC_WORKER_NUM`, `MA_CURRENT_IP` (this container's IP).
- **Volcano** jobs (volcano-sh/volcano `pkg/controllers/job/plugins/env/env.go`: the `env` plugin sets
  `VC_TASK_INDEX`; `pkg/controllers/job/plugins/svc/svc.go`: the `svc` plugin sets `VC_<TASK>_HOSTS`, the
  task's pod domain names joined by commas, and `VC_<TASK>_NUM`, with the task name upper-cased and `-`
  written `_`). One task only: several tasks number their pods separately.
- **Slurm** (https://slurm.schedmd.com/srun.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES): `SLURM_NODEID`
  (the node's index in the step), `SLURM_STEP_NUM_NODES` / `SLURM_NNODES` / `SLURM_JOB_NUM_NODES`, the node
  list `SLURM_STEP_NODELIST` / `SLURM_JOB_NODELIST` expanded by `scontrol show hostnames`
  (https://slurm.schedmd.com/scontrol.html) or, where `scontrol` is absent, by the python-hostlist library,
  `SLURM_GPUS_ON_NODE`, `SLURM_STEP_TASKS_PER_NODE` (one task per node is required: our launcher starts the
  node's processes itself).
- **Kubeflow** PyTorchJob (kubeflow/training-operator `pkg/controller.v1/pytorch/envvar.go`): the operator
  sets `MASTER_ADDR`, `MASTER_PORT`, `RANK` (the pod's index, master 0), `WORLD_SIZE` (pods before v1.8;
  pods x nproc-per-node at v1.9.0, so it is read only where `PET_NNODES` is absent) and, at v1.9.0,
  `PET_NNODES` (pods), `PET_NODE_RANK`, `PET_NPROC_PER_NODE`; Trainer v2 also `PET_MASTER_ADDR` /
  `PET_MASTER_PORT` (torchrun reads `PET_<FLAG>`, https://pytorch.org/docs/stable/elastic/run.html). The
  `PET_*` variables win. A process under `torchrun` (`TORCHELASTIC_RUN_ID`) or in a Volcano job with its
  `pytorch` plugin (`VC_TASK_INDEX`) is not taken for Kubeflow.
- **SkyPilot** (https://docs.skypilot.co/en/stable/running-jobs/environment-variables.html):
  `SKYPILOT_NODE_RANK`, `SKYPILOT_NUM_NODES`, `SKYPILOT_NODE_IPS` (one IP per line, the head first),
  `SKYPILOT_NUM_GPUS_PER_NODE`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from ascendfactory.errors import ConfigError, Problem

AddrForm = Literal["value", "first_of_list", "first_line", "slurm_nodelist"]
TOPOLOGY_KEYS = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPUS_PER_NODE")
TASK = "{TASK}"  # in a variable name: the Volcano task's name, found from its VC_<TASK>_HOSTS variable


@dataclass(frozen=True)
class Platform:
    """One platform: the variables that say a process runs there, and where each topology value is read
    (the first variable set wins)."""

    name: str
    present: tuple[tuple[str, ...], ...]  # any one group fully set: this platform
    absent: tuple[str, ...] = ()  # ... unless one of these is set (a more specific platform's marks)
    nnodes: tuple[str, ...] = ()
    node_rank: tuple[str, ...] = ()
    master_addr: tuple[str, ...] = ()
    addr_form: AddrForm = "value"
    master_port: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    one_task_per_node: tuple[str, ...] = ()  # variables holding the tasks per node (Slurm: "1", "2(x3)")


PLATFORMS: tuple[Platform, ...] = (
    Platform(
        name="ModelArts",
        present=(("MA_NUM_HOSTS", "VC_TASK_INDEX"),),
        nnodes=("MA_NUM_HOSTS", "VC_WORKER_NUM"),
        node_rank=("VC_TASK_INDEX",),
        master_addr=("VC_WORKER_HOSTS",),
        addr_form="first_of_list",
        devices=("MA_NUM_GPUS",),
    ),
    Platform(
        name="Volcano",
        present=(("VC_TASK_INDEX", f"VC_{TASK}_HOSTS"),),
        absent=("MA_NUM_HOSTS",),
        nnodes=(f"VC_{TASK}_NUM",),
        node_rank=("VC_TASK_INDEX",),
        master_addr=(f"VC_{TASK}_HOSTS",),
        addr_form="first_of_list",
    ),
    Platform(
        name="Slurm",
        present=(("SLURM_JOB_ID", "SLURM_NODEID"),),
        nnodes=("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
        node_rank=("SLURM_NODEID",),
        master_addr=("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
        addr_form="slurm_nodelist",
        devices=("SLURM_GPUS_ON_NODE",),
        one_task_per_node=("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
    ),
    Platform(
        name="Kubeflow",
        present=(
            ("PET_NNODES", "PET_NODE_RANK"),
            ("MASTER_ADDR", "WORLD_SIZE", "RANK", "KUBERNETES_SERVICE_HOST"),
        ),
        absent=("VC_TASK_INDEX", "TORCHELASTIC_RUN_ID"),
        nnodes=("PET_NNODES", "WORLD_SIZE"),
        node_rank=("PET_NODE_RANK", "RANK"),
        master_addr=("PET_MASTER_ADDR", "MASTER_ADDR"),
        master_port=("PET_MASTER_PORT", "MASTER_PORT"),
        devices=("PET_NPROC_PER_NODE",),
    ),
    Platform(
        name="SkyPilot",
        present=(("SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS"),),
        nnodes=("SKYPILOT_NUM_NODES",),
        node_rank=("SKYPILOT_NODE_RANK",),
        master_addr=("SKYPILOT_NODE_IPS",),
        addr_form="first_line",
        devices=("SKYPILOT_NUM_GPUS_PER_NODE",),
    ),
)


@dataclass(frozen=True)
class Detected:
    """What a platform says about this node: env key -> value, and env key -> the variable it came from."""

    platform: str
    values: dict[str, int | str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    # Raised when NODE_RANK comes from the platform: several tasks on one node would share it.
    rank_problem: list[Problem] = field(default_factory=list)


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed node list (`n[1-3],gpu07`) as host names, expanded by Slurm itself
    (`scontrol show hostnames`) or, without scontrol, by python-hostlist."""
    scontrol = shutil.which("scontrol")
    if scontrol:
        proc = subprocess.run(
            [scontrol, "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30, check=False
        )
        if proc.returncode == 0 and proc.stdout.split():
            return proc.stdout.split()
    try:
        import hostlist  # python-hostlist
    except ImportError:
        raise ConfigError(
            Problem(
                "SLURM_JOB_NODELIST",
                f"cannot expand the node list {nodelist!r}: no scontrol on PATH and no python-hostlist",
                fix="pip install python-hostlist, or set --env.MASTER_ADDR=<first node>",
            )
        ) from None
    try:
        return list(hostlist.expand_hostlist(nodelist))
    except hostlist.BadHostlist as e:
        raise ConfigError(Problem("SLURM_JOB_NODELIST", f"bad node list {nodelist!r}: {e}")) from None


def detect(
    environ: Mapping[str, str], *, expand: Callable[[str], list[str]] = expand_nodelist
) -> Detected | None:
    """The platform this process runs on and what it says, or None; two platforms at once, a value that is
    no number or a rank outside the node count raise ConfigError."""
    found = [p for p in PLATFORMS if _present(p, environ)]
    if len(found) > 1:
        marks = "; ".join(f"{p.name} ({', '.join(_marks(p, environ))})" for p in found)
        raise ConfigError(
            Problem(
                "environment",
                f"two cluster platforms at once: {marks}",
                fix="unset the other platform's variables, or set env.NNODES, env.NODE_RANK and "
                "env.MASTER_ADDR explicitly",
            )
        )
    if not found:
        return None
    platform = found[0]
    task = _volcano_task(environ) if any(TASK in v for g in platform.present for v in g) else None
    detected = Detected(platform.name)
    _read_ints(detected, platform, environ, task)
    _read_addr(detected, platform, environ, task, expand)
    _check(detected, platform, environ)
    return detected


def _present(p: Platform, environ: Mapping[str, str]) -> bool:
    if any(environ.get(v) for v in p.absent):
        return False
    task = _volcano_task(environ)
    return any(all(environ.get(_name(v, task)) for v in group) for group in p.present)


def _marks(p: Platform, environ: Mapping[str, str]) -> list[str]:
    task = _volcano_task(environ)
    return [_name(v, task) for g in p.present for v in g if environ.get(_name(v, task))]


def _volcano_task(environ: Mapping[str, str]) -> str | None:
    tasks = sorted(m.group(1) for k in environ if (m := re.fullmatch(r"VC_(\w+)_HOSTS", k)))
    if len(tasks) > 1 and environ.get("VC_TASK_INDEX") and not environ.get("MA_NUM_HOSTS"):
        raise ConfigError(
            Problem(
                "environment",
                f"a Volcano job with several tasks ({', '.join(tasks)}): each task numbers its pods from 0, "
                "so VC_TASK_INDEX is no node rank",
                fix="use one task with N replicas (`submit k8s --kind volcano` writes one), "
                "or set env.NNODES, env.NODE_RANK and env.MASTER_ADDR explicitly",
            )
        )
    return tasks[0] if tasks else None


def _name(var: str, task: str | None) -> str:
    return var.replace(TASK, task or "<TASK>")


def _first(names: tuple[str, ...], environ: Mapping[str, str], task: str | None) -> tuple[str, str] | None:
    for var in names:
        name = _name(var, task)
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _read_ints(d: Detected, p: Platform, environ: Mapping[str, str], task: str | None) -> None:
    for key, names in (("NNODES", p.nnodes), ("NODE_RANK", p.node_rank), ("MASTER_PORT", p.master_port)):
        hit = _first(names, environ, task)
        if hit:
            d.values[key] = _int(p, *hit)
            d.sources[key] = f"{hit[0]}={hit[1]} ({p.name})"
    hit = _first(p.devices, environ, task)
    if hit and hit[1].isdigit() and int(hit[1]) > 0:  # PET_NPROC_PER_NODE may be `auto`: torchrun's choice
        d.values["NPUS_PER_NODE"] = int(hit[1])
        d.sources["NPUS_PER_NODE"] = f"{hit[0]}={hit[1]} ({p.name})"


def _int(p: Platform, name: str, value: str) -> int:
    if not re.fullmatch(r"\d+", value):
        raise ConfigError(
            Problem(
                name,
                f"{p.name} set {name}={value!r}, which is not a whole number",
                fix="set the matching env.* key explicitly (elastic ranges such as 1:4 are not supported)",
            )
        )
    return int(value)


def _read_addr(
    d: Detected, p: Platform, environ: Mapping[str, str], task: str | None, expand: Callable[[str], list[str]]
) -> None:
    hit = _first(p.master_addr, environ, task)
    if not hit:
        return
    name, value = hit
    if p.addr_form == "first_of_list":
        hosts = [h.strip() for h in value.split(",") if h.strip()]
    elif p.addr_form == "first_line":
        hosts = [h.strip() for h in value.splitlines() if h.strip()]
    elif p.addr_form == "slurm_nodelist":
        hosts = expand(value)
    else:
        hosts = [value]
    if hosts:
        d.values["MASTER_ADDR"] = hosts[0]
        shown = "first of " if len(hosts) > 1 or p.addr_form != "value" else ""
        d.sources["MASTER_ADDR"] = f"{shown}{name}={value} ({p.name})"


def _check(d: Detected, p: Platform, environ: Mapping[str, str]) -> None:
    nnodes, rank = d.values.get("NNODES"), d.values.get("NODE_RANK")
    if isinstance(nnodes, int) and nnodes < 1:
        raise ConfigError(Problem("NNODES", f"{d.sources['NNODES']}: a job has at least one node"))
    if isinstance(nnodes, int) and isinstance(rank, int) and rank >= nnodes:
        raise ConfigError(
            Problem(
                "NODE_RANK",
                f"{d.sources['NODE_RANK']} is outside the node count {d.sources['NNODES']}: ranks are "
                f"0..{nnodes - 1}",
                fix=f"check the {p.name} job's node count, or set env.NODE_RANK and env.NNODES explicitly",
            )
        )
    hit = _first(p.one_task_per_node, environ, None)
    if hit and not re.fullmatch(r"1(\(x\d+\))?", hit[1]):
        d.rank_problem.append(
            Problem(
                hit[0],
                f"{p.name} started {hit[1]} tasks per node ({hit[0]}={hit[1]}), but each node runs one "
                "ascendfactory-cli that starts the node's processes itself; every task would claim the "
                f"same NODE_RANK {rank}",
                fix="run one task per node (srun --ntasks-per-node=1; `submit slurm` does), or set "
                "--env.NODE_RANK and --env.NNODES per task",
            )
        )
