"""The plan: the whole contract between a backend and the runner, as data (the ground floor: no other layer).

A backend turns an experiment into a `Plan`; the runner (`ascendfactory.pipeline`) executes it and reads
nothing else. A plan holds:

- `steps`, in order. Each `Step` has a `role` (what it is for) and a typed `launch` (how it starts):
  `Process` (one program), `Torchrun` (a torchrun job on this node), `Ray` (this node's part of a Ray
  cluster: the head plus the driver on NODE_RANK 0, a worker elsewhere), or None (in-process: the plot);
- `logs`: the training log's format, the documented file names, the rank that prints the loss, and the
  throughput formula;
- `checkpoints`: where training saves, its scheme (how the newest complete checkpoint is found and a stale
  tracker repaired), and retention (`save_total_limit`);
- `policy`: this node's place in the job, the multi-node wait, and the auto-resume retry policy;
- `files`: files the runner writes before any step starts (the resolved `exp-config.yaml`, a framework's own
  generated config);
- `tracking`: the experiment trackers (`report_to`) the runner opens a run in (or continues), hands to the
  train step through the trackers' own environment variables, and reports the run's results to;
- `facts`: what `--dry-run` shows about the resolved experiment (display only: the runner, the memory
  estimate and the checks never read it; `tests/unit/test_facts_display_only.py` keeps it so);
- `run`: the backend's typed run the plan was made from (the values its framework will parse), which
  `Backend.memory_target` reads; the runner never reads it and it is not part of `to_dict`.

Backends never start a process; the runner never looks inside a framework's flags.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from ascendfactory.output_tree import OutputTree

PROGRAMS_DIR = str(Path(__file__).resolve().parent / "programs")  # step programs (ascendfactory.programs)
RAY_NODE_PROGRAM = str(Path(PROGRAMS_DIR) / "ray_node.py")


class Role(str, Enum):
    """What a step is for; the runner's behaviour per role is documented in `pipeline/runner.py`."""

    CHECK = "check"  # the framework's own validation of the generated config, before anything trains
    PREPROCESS = "preprocess"  # raw data -> the framework's dataset files
    CONVERT = "convert"  # HF weights -> the framework's checkpoint format
    TRAIN = "train"  # never skipped by a manifest (it resumes); monitored; auto-resumed
    EXPORT = "export"  # trained weights -> HF weights (mg2hf, LoRA merge, model merger)
    PLOT = "plot"  # training_loss.png, in-process


def safe_name(text: str) -> str:
    """A file-name-safe form of a model or experiment name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


# -- launches -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Process:
    """One program run to completion. `rank`: the global rank whose run log it writes (a single-process
    trainer); None: the step writes its own log, `<prefix>-<stamp>-<step name>.txt`."""

    argv: tuple[str, ...]
    rank: int | None = None

    kind = "process"

    def command(self) -> list[str]:
        return list(self.argv)

    @property
    def world_size(self) -> int:
        return 1

    def ranks_here(self) -> list[int]:
        return [self.rank] if self.rank is not None else []


@dataclass(frozen=True)
class Torchrun:
    """A torchrun job's part on this node. Workers' lines are prefixed with their local rank (`--tee 3`)
    and split into one log per global rank by the torchrun launcher."""

    python: str
    entry: tuple[str, ...]  # what follows torchrun's own options: `-m module args...` or `script.py args...`
    nnodes: int
    nproc_per_node: int
    node_rank: int
    master_addr: str
    master_port: int
    torchrun: tuple[str, ...] = ()  # the launcher program; default `<python> -m torch.distributed.run`

    kind = "torchrun"

    def command(self, *, rendezvous_timeout_s: float | None = None) -> list[str]:
        """The full argv; with a timeout, `--rdzv_conf timeout=<s>` (how long nodes wait for each other)."""
        head = list(self.torchrun) or [self.python, "-m", "torch.distributed.run"]
        opts = [
            "--nproc_per_node",
            str(self.nproc_per_node),
            "--nnodes",
            str(self.nnodes),
            "--node_rank",
            str(self.node_rank),
            "--master_addr",
            self.master_addr,
            "--master_port",
            str(self.master_port),
        ]
        if rendezvous_timeout_s is not None:
            opts = ["--rdzv_conf", f"timeout={max(int(rendezvous_timeout_s), 1)}", *opts]
        return [*head, *opts, "--tee", "3", *self.entry]

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank

    def ranks_here(self) -> list[int]:
        return [self.global_rank(i) for i in range(self.nproc_per_node)]


@dataclass(frozen=True)
class Ray:
    """This node's part of a Ray job: NODE_RANK 0 starts the head, waits for `nnodes` nodes and the
    `resources` the driver needs, runs `driver`, then stops the cluster it started; other nodes join the
    head and leave when the head reports the driver's result. `python` is the interpreter of the framework's
    environment (it has ray); the node program is `ascendfactory/programs/ray_node.py`. One log per node:
    its "rank" is the node rank."""

    python: str
    driver: tuple[str, ...]
    nnodes: int
    node_rank: int
    head_address: str
    port: int
    resources: tuple[tuple[str, float], ...] = ()  # cluster-wide need, e.g. (("CPU", 4), ("NPU", 16))
    node_resources: tuple[tuple[str, float], ...] = ()  # what this node offers (ray start --num-cpus ...)
    job_id: str = "af"

    kind = "ray"

    def command(self, *, timeout_s: float = 1800.0) -> list[str]:
        import json

        common = ["--timeout", f"{max(timeout_s, 1.0):g}", "--job-id", self.job_id]
        if self.node_resources:
            common += ["--resources", json.dumps(dict(self.node_resources), sort_keys=True)]
        if self.node_rank == 0:
            need = ["--need", json.dumps(dict(self.resources), sort_keys=True)] if self.resources else []
            return [
                self.python,
                RAY_NODE_PROGRAM,
                "head",
                "--port",
                str(self.port),
                "--node-ip",
                self.head_address,
                "--nodes",
                str(self.nnodes),
                *need,
                *common,
                "--",
                *self.driver,
            ]
        return [
            self.python,
            RAY_NODE_PROGRAM,
            "worker",
            "--address",
            f"{self.head_address}:{self.port}",
            *common,
        ]

    @property
    def world_size(self) -> int:
        return self.nnodes

    def ranks_here(self) -> list[int]:
        return [self.node_rank]


Launch = Process | Torchrun | Ray


# -- steps ----------------------------------------------------------------------------------------------
@dataclass
class Step:
    """One step of the pipeline.

    `skip_reason` is set when the step will not run, with the reason in words. `only_node0`: on multi-node
    runs with a shared filesystem, only NODE_RANK 0 runs it; the others wait for its manifest. `mkdirs`:
    directories the runner creates before starting it (programs that refuse a missing output folder).
    """

    name: str
    role: Role
    launch: Launch | None = None  # None: runs inside ascendfactory-cli (or skipped)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    only_node0: bool = False
    mkdirs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Filled by the runner from the manifest: a content fingerprint of argv, env and inputs.
    fingerprint: str | None = None

    @property
    def skipped(self) -> bool:
        return self.skip_reason is not None

    @property
    def argv(self) -> list[str]:
        """The command this node runs for the step (empty for in-process and skipped steps)."""
        return self.launch.command() if self.launch is not None else []

    def command_line(self) -> str:
        """The argv as a copy-pasteable shell line (quoting only; argv itself is what runs)."""
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role.value,
            "launch": self.launch.kind if self.launch is not None else "in-process",
            "argv": self.argv,
            "command": self.command_line(),
            "env": self.env,
            "cwd": self.cwd,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "skip_reason": self.skip_reason,
            "only_node0": self.only_node0,
            "mkdirs": self.mkdirs,
            "notes": self.notes,
            "fingerprint": self.fingerprint,
        }


# -- what the runner needs besides the steps ------------------------------------------------------------
@dataclass(frozen=True)
class LogNaming:
    """Log file names under `{af_output_dir}/logs/`: `<prefix>-<timestamp>-<tail>.txt`. Tails are format
    strings over `nnodes`, `rank` (global rank), `world_size` and `node_rank`."""

    prefix: str
    run_log: str = "run_log-N{nnodes}-{rank}"
    device_info: str = "npu_info-R{rank}"
    launcher: str = "launcher-node{node_rank}"


@dataclass(frozen=True)
class ThroughputSpec:
    """How throughput is computed from the training log (`ascendfactory.metrics.throughput_for`)."""

    formula: str  # megatron | llamafactory | verl | mindspeed_rl | mindspeed_mm
    seq_length: int | None = None
    devices: int | None = None


@dataclass(frozen=True)
class LogSpec:
    """The training log: its parser format, its file names, who prints the loss, the throughput formula.

    `metrics_file`: a file the framework writes its metrics to (LLaMA-Factory's `trainer_log.jsonl`); the
    loss and throughput are then read from it (parsed as `format`) on the loss rank's node, instead of
    from the run logs. `console_format`: the parser of the loss rank's console lines for the live
    progress line, when it differs from `format`.

    `plot_metrics`: the panels of `training_loss.png`, in order (each raw and smoothed); those the log has
    are drawn, and when it has none of them (or none are named) the first of `loss_keys` it has. An RL
    backend names its reward and response length here (`critic/score/mean`, `response_length/mean`).
    `summary_metrics`: metrics the run summary reports besides the loss and the throughput: the first and
    last value with their steps, and the mean, min and max over the run (resumed segments joined); the
    runner prints them and saves them in `summary.json` under `metrics`. Both are metric names of the
    `format`'s parser; a name the log lacks is left out.
    """

    format: str  # an `ascendfactory.metrics` format name (megatron, llamafactory, verl, ...)
    naming: LogNaming
    loss_rank: Literal["first", "last"]  # global rank 0, or world_size - 1
    throughput: ThroughputSpec
    loss_keys: tuple[str, ...] = ("lm loss", "loss")
    metrics_file: str | None = None
    console_format: str | None = None
    plot_metrics: tuple[str, ...] = ()
    summary_metrics: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrackerSpec:
    """One experiment tracker, resolved (`config.report_to`). `location`: the MLflow tracking URI, else the
    folder the tracker writes to; `mode`: W&B (offline, online, disabled) or SwanLab (local, offline, cloud,
    disabled); `artifacts`: where a new MLflow experiment keeps its artifacts (a local store); `run_id`: the
    id the framework gives its run itself (verl's W&B run is `<project>--<experiment>`), else None;
    `resume_env`: variables the train step also gets when it continues an existing run (the framework's
    integration would otherwise fail on it: transformers re-logs changed parameters, which MLflow refuses)."""

    name: str  # a registered tracker (`ascendfactory.trackers.registry`)
    project: str  # W&B / SwanLab project, MLflow experiment
    run_name: str
    location: str
    mode: str | None = None
    entity: str | None = None
    artifacts: str | None = None
    run_id: str | None = None
    resume_env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Tracking:
    """What the runner reports to trackers: the training run's trackers (`specs`; TensorBoard is written by
    the framework alone), the run's parameters (the resolved experiment, flattened, secrets masked), and the
    file that keeps each tracker's run id so that a resumed run continues the same tracker run."""

    specs: tuple[TrackerSpec, ...]
    params: tuple[tuple[str, str], ...] = ()
    runs_file: str = ""

    def spec(self, name: str) -> TrackerSpec | None:
        return next((s for s in self.specs if s.name == name), None)


@dataclass(frozen=True)
class CheckpointSpec:
    """Where training saves and how the runner reads it (`ascendfactory.checkpoints` schemes)."""

    root: str
    scheme: str  # megatron: iter_%07d/ + latest_checkpointed_iteration.txt
    retain: int = 0  # save_total_limit: keep the newest N complete checkpoints (0 keeps all)
    saved_marker: str | None = None  # a line the trainer prints after each save: retention runs then


@dataclass(frozen=True)
class RunPolicy:
    """This node's part of the job, and what happens when training fails."""

    node_rank: int = 0
    nnodes: int = 1
    node_wait_timeout_s: float = 1800.0  # multi-node waits, rendezvous and collective timeouts
    auto_resume: bool = False  # restart a failed train step from the newest complete checkpoint
    max_attempts: int = 3
    backoff_s: float = 5.0
    # Text in the failing log that means a restart cannot help (a configuration error): not auto-resumed.
    unretryable: tuple[str, ...] = ()
    # af_output_dir is seen by every node: the nodes read each other's train outcome there (the runner's
    # check before a retry); False: a node learns nothing of the others.
    shared_filesystem: bool = True

    @property
    def collective_timeout_s(self) -> int:
        """The collective (process-group) timeout of every torchrun: `node_wait_timeout_s`, so a hung peer
        fails the job within the time the nodes wait for each other. The runner passes it to every torchrun
        as `AF_DISTRIBUTED_TIMEOUT_S` (read by the embedded trainers); a backend whose framework has its own
        knob sets that from `PlanContext.collective_timeout_s`."""
        return int(self.node_wait_timeout_s)


@dataclass
class Plan:
    """The ordered steps of one experiment, and everything the runner needs to run and report them."""

    backend: str
    exp_name: str
    model_name: str
    output_dir: str
    logs: LogSpec
    steps: list[Step] = field(default_factory=list)
    checkpoints: CheckpointSpec | None = None
    policy: RunPolicy = field(default_factory=RunPolicy)
    files: dict[str, str] = field(default_factory=dict)  # path -> text, written before the steps
    source: str | None = None  # the experiment file (never overwritten by `files`)
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # applies to every step
    facts: dict[str, Any] = field(default_factory=dict)  # display only (--dry-run, summary header)
    tracking: Tracking | None = None  # `report_to`: trackers the runner opens, continues and reports to
    # The pre-launch memory estimate (`ascendfactory.memory.report` documents the shape); display only
    memory: dict[str, Any] | None = None
    # The pre-launch time estimate (`ascendfactory.speed.StepPrediction.to_dict` + the workload); display and
    # the run summary (`predicted` in .af/summary.json) only
    timing: dict[str, Any] | None = None
    run: Any = field(default=None, compare=False, repr=False)  # the backend's typed run (see above)

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def step(self, name: str) -> Step | None:
        return next((s for s in self.steps if s.name == name), None)

    def with_role(self, role: Role) -> Step | None:
        return next((s for s in self.steps if s.role is role), None)

    @property
    def tree(self) -> OutputTree:
        """The output tree (`ascendfactory.output_tree`): the one place its names are decided."""
        return OutputTree(self.output_dir)

    @property
    def logs_dir(self) -> str:
        return self.tree.logs_dir

    @property
    def manifest_dir(self) -> str:
        return self.tree.manifest_dir

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "exp_name": self.exp_name,
            "model_name": self.model_name,
            "output_dir": self.output_dir,
            "facts": self.facts,
            "env": self.env,
            "warnings": self.warnings,
            "files": sorted(self.files),
            "policy": {
                **asdict(self.policy),
                "unretryable": list(self.policy.unretryable),
                "collective_timeout_s": self.policy.collective_timeout_s,
            },
            "logs": {
                "format": self.logs.format,
                "naming": asdict(self.logs.naming),
                "loss_rank": self.logs.loss_rank,
                "loss_keys": list(self.logs.loss_keys),
                "throughput": self.logs.throughput.formula,
                **({"console_format": self.logs.console_format} if self.logs.console_format else {}),
                **({"metrics_file": self.logs.metrics_file} if self.logs.metrics_file else {}),
                **({"plot_metrics": list(self.logs.plot_metrics)} if self.logs.plot_metrics else {}),
                **({"summary_metrics": list(self.logs.summary_metrics)} if self.logs.summary_metrics else {}),
            },
            "checkpoints": None
            if self.checkpoints is None
            else {
                "root": self.checkpoints.root,
                "scheme": self.checkpoints.scheme,
                "retain": self.checkpoints.retain,
                "saved_marker": self.checkpoints.saved_marker,
            },
            "steps": [s.to_dict() for s in self.steps],
            **(
                {
                    "trackers": [asdict(t) for t in self.tracking.specs],
                    "tracker_runs": self.tracking.runs_file,
                }
                if self.tracking
                else {}
            ),
            "memory": self.memory,
            "timing": self.timing,
        }
