"""`submit background`: a scheduler record and its platform, registered when the entry point loads.

The job's nodes are background processes on this machine (a workstation's queue of one): each runs the same
`ascendfactory-cli train` the scheduler is handed, under `af_background.node`, with its rank in the
variables of a platform of its own (`BG_NODE_RANK`, `BG_NNODES`, `BG_HOSTS`, named by `AF_PLATFORM`), its
console in `logs/background-<job>-node<N>.out`; `submit status` reads the nodes' exit codes and
`submit cancel` sends them SIGTERM. No file of ascendfactory names it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ascendfactory.config.platforms import Platform, first_of_list, register_platform
from ascendfactory.errors import SchedulerError
from ascendfactory.submit.job import record
from ascendfactory.submit.registry import register_scheduler
from ascendfactory.submit.scheduler import JobState, Scheduler, SchedulerOptions, Submitted

PLATFORM = register_platform(
    Platform(
        name="Background",
        present=(("BG_NODE_RANK", "BG_NNODES"),),
        nnodes=("BG_NNODES",),
        node_rank=("BG_NODE_RANK",),
        master_addr=("BG_HOSTS",),
        addr=first_of_list,
        prefixes=("BG_",),
    )
)


class BackgroundOptions(SchedulerOptions):
    """Nodes on this machine: the node count and devices, nothing else."""


def node_env(exp, opts, rank: int = 0) -> dict[str, str]:
    return {
        "AF_PLATFORM": PLATFORM.name,
        "BG_NODE_RANK": str(rank),
        "BG_NNODES": str(opts.nodes),
        "BG_HOSTS": ",".join(["127.0.0.1"] * opts.nodes),
    }


def render(exp, opts) -> str:
    """The job: each node's command and environment (what `submit` starts)."""
    nodes = [{"env": node_env(exp, opts, r), "argv": exp.train_argv()} for r in range(opts.nodes)]
    return json.dumps({"scheduler": "background", "nodes": nodes}, indent=2) + "\n"


def submit(exp, opts, text: str) -> Submitted:
    job = time.strftime("%Y%m%d-%H%M%S")
    job_dir = Path(exp.tree.submitted(f"background-{job}"))
    job_dir.mkdir(parents=True, exist_ok=False)
    (job_dir / "job.json").write_text(text)
    logs = Path(exp.tree.logs_dir)
    logs.mkdir(parents=True, exist_ok=True)
    for node in json.loads(text)["nodes"]:
        rank = node["env"]["BG_NODE_RANK"]
        with open(logs / f"background-{job}-node{rank}.out", "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "af_background.node", str(job_dir), rank, "--", *node["argv"]],
                env={**os.environ, **node["env"]},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=os.getcwd(),
            )
        (job_dir / f"node{rank}.pid").write_text(f"{proc.pid}\n")
    record(exp, {"scheduler": "background", "job_id": job, "dir": str(job_dir), "nodes": opts.nodes})
    return Submitted(job, (f"submitted background job {job} ({opts.nodes} node(s))", f"job: {job_dir}"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a finished child nobody reaped is no running node
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True


def _job_dir(job) -> Path:
    if not job.get("dir"):
        raise SchedulerError("a background job is found by its experiment: submit status <exp.yaml>")
    return Path(str(job["dir"]))


def status(job, logs_dir) -> JobState:
    job_dir = _job_dir(job)
    pids = {p.stem.removeprefix("node"): int(p.read_text()) for p in job_dir.glob("node*.pid")}
    codes = {p.stem.removeprefix("node"): int(p.read_text()) for p in job_dir.glob("node*.exit")}
    running = [r for r, pid in pids.items() if r not in codes and _alive(pid)]
    cancelled = (job_dir / "cancelled").exists()
    if running:
        state = "RUNNING"
    elif cancelled:
        state = "CANCELLED"
    elif codes and all(c == 0 for c in codes.values()) and len(codes) == len(pids):
        state = "COMPLETED"
    else:
        state = "FAILED"
    errors = ()
    if state == "FAILED" and logs_dir is not None:
        errors = tuple(
            f"node{r}: {line}"
            for r in sorted(codes)
            if codes[r] != 0
            for line in (Path(logs_dir) / f"background-{job['job_id']}-node{r}.out")
            .read_text(errors="replace")
            .splitlines()
            if line.startswith(("error:", "  - "))
        )
    exit_codes = ",".join(f"{r}:{c}" for r, c in sorted(codes.items()))
    return JobState(
        job_id=str(job["job_id"]),
        state=state,
        active=state == "RUNNING",
        succeeded=state == "COMPLETED",
        exit_code=exit_codes,
        errors=errors,
    )


def cancel(job) -> None:
    job_dir = _job_dir(job)
    (job_dir / "cancelled").touch()
    for pid_file in job_dir.glob("node*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)  # the node passes it on to its command
        except ProcessLookupError:
            pass


SCHEDULER = register_scheduler(
    Scheduler(
        name="background",
        description="the job's nodes as background processes on this machine",
        help="Run the job's nodes in the background on this machine; submit status / cancel follow them.",
        options=BackgroundOptions,
        platform=PLATFORM.name,
        node_env=node_env,
        render=render,
        submit=submit,
        status=status,
        cancel=cancel,
        examples=("ascendfactory-cli submit background exp.yaml --nodes 1",),
    )
)
