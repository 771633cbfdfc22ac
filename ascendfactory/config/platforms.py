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

The platforms are records (`Platform`) in an open registry (`PLATFORMS`); where node 0's address is read,
how the variable lists hosts is a function of the record (`addr`). The built-ins below are recognised by
their own variables; a platform a plugin brings (its scheduler's nodes) is named by `AF_PLATFORM` in the
job's environment, which its scheduler sets. A value the experiment sets itself is never read from the
platform (`--env.MASTER_ADDR=<host>` needs no node list).

The built-in platforms, with the variables each one documents:

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
  list `SLURM_STEP_NODELIST` / `SLURM_JOB_NODELIST` (only its first host is needed, node 0's address: read
  from Slurm's hostlist syntax, https://slurm.schedmd.com/scontrol.html#OPT_hostnames, without expanding the
  list, so neither `scontrol` nor python-hostlist is needed), `SLURM_GPUS_ON_NODE`,
  `SLURM_STEP_TASKS_PER_NODE` (one task per node is required: our launcher starts the node's processes
  itself).
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.registry import Registry

TOPOLOGY_KEYS = ("NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPUS_PER_NODE")
TASK = "{TASK}"  # in a variable name: the Volcano task's name, found from its VC_<TASK>_HOSTS variable
NAMED = "AF_PLATFORM"  # names the platform of a plugin's scheduler (its nodes' environment)


def value(text: str) -> str:
    """The variable holds node 0's address itself."""
    return text.strip()


def first_of_list(text: str) -> str:
    """A comma-separated host list (ModelArts' and Volcano's `*_HOSTS`): its first host."""
    return next((h.strip() for h in text.split(",") if h.strip()), "")


def first_line(text: str) -> str:
    """One host per line, the head first (SkyPilot's `SKYPILOT_NODE_IPS`)."""
    return next((h.strip() for h in text.splitlines() if h.strip()), "")


_RANGE = re.compile(r"^\s*([0-9]+)(?:-[0-9]+)?\s*$")


def slurm_first_host(nodelist: str) -> str:
    """The first host of a Slurm node list in its hostlist syntax: comma-separated host ranges, each a name
    with bracketed ranges (`gpu[07-09,12],login1`, `rack[1-2]-n[01-04]`); the first host takes each bracket's
    first number as written (zero padding kept): `gpu07`, `rack1-n01`. Slurm numbers a job's nodes in this
    order (SLURM_NODEID 0 is its first host). A ConfigError for a list that is not in that syntax."""
    text, i = nodelist.strip(), 0
    host: list[str] = []
    while i < len(text) and text[i] != ",":
        if text[i] == "[":
            close = text.find("]", i)
            inner = text[i + 1 : close] if close > i else "["
            m = _RANGE.match(inner.split(",")[0])
            if m is None or "[" in inner:
                host = []
                break
            host.append(m.group(1))
            i = close + 1
        elif text[i] == "]":
            host = []
            break
        else:
            host.append(text[i])
            i += 1
    if not host:
        raise ConfigError(
            Problem(
                "SLURM_JOB_NODELIST",
                f"{nodelist!r} is not a Slurm node list (hosts like n[01-04],gpu07)",
                fix="set --env.MASTER_ADDR=<the job's first node> (then no node list is read)",
            )
        )
    return "".join(host)


@dataclass(frozen=True)
class Platform:
    """One platform: the variables that say a process runs there, and where each topology value is read
    (the first variable set wins); `addr` reads node 0's address from the value of `master_addr`'s
    variable; `prefixes`: what its variables start with (a `submit` dry run leaves this machine's own out)."""

    name: str
    present: tuple[tuple[str, ...], ...]  # any one group fully set: this platform
    absent: tuple[str, ...] = ()  # ... unless one of these is set (a more specific platform's marks)
    nnodes: tuple[str, ...] = ()
    node_rank: tuple[str, ...] = ()
    master_addr: tuple[str, ...] = ()
    addr: Callable[[str], str] = value
    master_port: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    one_task_per_node: tuple[str, ...] = ()  # variables holding the tasks per node (Slurm: "1", "2(x3)")
    prefixes: tuple[str, ...] = ()


PLATFORMS: Registry[Platform] = Registry(
    "platform",
    key=NAMED,
    how="ascendfactory.config.platforms.register_platform(Platform(...))",
)


def register_platform(platform: Platform) -> Platform:
    """Add a platform (a plugin's scheduler module calls this at import). Its name must be new."""
    return PLATFORMS.register(platform.name, platform)


for _builtin in (
    Platform(
        name="ModelArts",
        present=(("MA_NUM_HOSTS", "VC_TASK_INDEX"),),
        nnodes=("MA_NUM_HOSTS", "VC_WORKER_NUM"),
        node_rank=("VC_TASK_INDEX",),
        master_addr=("VC_WORKER_HOSTS",),
        addr=first_of_list,
        devices=("MA_NUM_GPUS",),
        prefixes=("MA_", "VC_"),
    ),
    Platform(
        name="Volcano",
        present=(("VC_TASK_INDEX", f"VC_{TASK}_HOSTS"),),
        absent=("MA_NUM_HOSTS",),
        nnodes=(f"VC_{TASK}_NUM",),
        node_rank=("VC_TASK_INDEX",),
        master_addr=(f"VC_{TASK}_HOSTS",),
        addr=first_of_list,
        prefixes=("VC_",),
    ),
    Platform(
        name="Slurm",
        present=(("SLURM_JOB_ID", "SLURM_NODEID"),),
        nnodes=("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"),
        node_rank=("SLURM_NODEID",),
        master_addr=("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
        addr=slurm_first_host,
        devices=("SLURM_GPUS_ON_NODE",),
        one_task_per_node=("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        prefixes=("SLURM_",),
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
        prefixes=("PET_",),
    ),
    Platform(
        name="SkyPilot",
        present=(("SKYPILOT_NODE_RANK", "SKYPILOT_NODE_IPS"),),
        nnodes=("SKYPILOT_NUM_NODES",),
        node_rank=("SKYPILOT_NODE_RANK",),
        master_addr=("SKYPILOT_NODE_IPS",),
        addr=first_line,
        devices=("SKYPILOT_NUM_GPUS_PER_NODE",),
        prefixes=("SKYPILOT_",),
    ),
):
    register_platform(_builtin)


@dataclass(frozen=True)
class Detected:
    """What a platform says about this node: env key -> value, and env key -> the variable it came from."""

    platform: str
    values: dict[str, int | str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    # Raised when NODE_RANK comes from the platform: several tasks on one node would share it.
    rank_problem: list[Problem] = field(default_factory=list)


def platform_variable(name: str) -> bool:
    """Whether `name` is a variable a platform sets (or `AF_PLATFORM`)."""
    registered = PLATFORMS.registered().values()
    marks = {v for p in registered for group in p.present for v in group}
    return name == NAMED or name in marks or name.startswith(tuple(x for p in registered for x in p.prefixes))


def detect(environ: Mapping[str, str], *, given: frozenset[str] | set[str] = frozenset()) -> Detected | None:
    """The platform this process runs on and what it says, or None; two platforms at once, a value that is
    no number or a rank outside the node count raise ConfigError. `given`: the topology keys the experiment
    sets itself (never read from the platform)."""
    named = environ.get(NAMED, "").strip()
    if named:
        found = [PLATFORMS.get(named)]
    else:
        found = [p for p in PLATFORMS.registered().values() if _present(p, environ)]
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
    if "MASTER_ADDR" not in given:
        _read_addr(detected, platform, environ, task)
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


def _read_addr(d: Detected, p: Platform, environ: Mapping[str, str], task: str | None) -> None:
    hit = _first(p.master_addr, environ, task)
    if not hit:
        return
    name, text = hit
    host = p.addr(text)
    if host:
        d.values["MASTER_ADDR"] = host
        d.sources["MASTER_ADDR"] = f"{'first of ' if host != text else ''}{name}={text} ({p.name})"


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
