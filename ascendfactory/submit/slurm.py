"""Slurm, a scheduler record (`submit.scheduler`): an sbatch script in the output tree, submitted with
`sbatch --parsable`; status from `scontrol show job` and `sacct` (where accounting answers); cancel with
`scancel`.

The script asks for `--nodes N --ntasks-per-node=1` and runs one `srun --kill-on-bad-exit=1 ascendfactory-cli
train ...` task per node. No `--wait`: with a shared filesystem node 0 converts the weights back after the
others are done, and srun's `--wait` would kill it. Each node takes its rank from `SLURM_NODEID` and the
first host of the node list as MASTER_ADDR (`config.platforms`); torchrun and the Ray launcher start the
node's processes. `--requeue` goes with `train_auto_resume: true`: a requeued job resumes from the newest
checkpoint.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from ascendfactory.errors import ConfigError, Problem, SchedulerError
from ascendfactory.submit.job import Experiment, last_job, record
from ascendfactory.submit.scheduler import JobState, Scheduler, SchedulerOptions, Submitted

SCRIPT = "slurm.sbatch"
TIMEOUT_S = 60
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")
ERROR_LINE = re.compile(r"^(error|  - |    fix:|step \S+ failed|.*Error:)", re.IGNORECASE)


class SlurmOptions(SchedulerOptions):
    """The sbatch resources `submit slurm` takes; everything else is the experiment's."""

    partition: str | None = Field(None, description="sbatch --partition.")
    time: str | None = Field(None, description="sbatch --time, e.g. 04:00:00.")
    account: str | None = Field(None, description="sbatch --account.")
    cpus_per_task: int | None = Field(None, ge=1, description="sbatch --cpus-per-task.")

    def sbatch_flags(self, exp: Experiment, *, requeue: bool) -> list[str]:
        logs = Path(exp.tree.logs_dir)
        flags = [
            f"--job-name={_job_name(exp)}",
            f"--nodes={self.nodes}",
            "--ntasks-per-node=1",
            f"--output={logs / 'slurm-%j.out'}",
            "--open-mode=append",  # a requeued job adds to its log
            "--requeue" if requeue else "--no-requeue",
        ]
        for name, value in (
            ("partition", self.partition),
            ("time", self.time),
            ("account", self.account),
            ("gpus-per-node", self.gpus_per_node),
            ("cpus-per-task", self.cpus_per_task),
        ):
            if value is not None:
                flags.append(f"--{name}={value}")
        return flags


def _job_name(exp: Experiment) -> str:
    cfg = exp.loaded.config
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"af-{cfg.af_model_name}-{cfg.exp_name}")[:64]


def render(exp: Experiment, opts: SlurmOptions) -> str:
    """The sbatch script (`slurm.sbatch.j2`)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
        keep_trailing_newline=True,
        autoescape=False,  # a shell script; every value is quoted by `q`
        undefined=jinja2.StrictUndefined,
    )
    env.filters["q"] = lambda v: shlex.quote(str(v))
    logs = Path(exp.tree.logs_dir)
    return env.get_template(SCRIPT + ".j2").render(
        experiment=exp.path,
        sbatch=opts.sbatch_flags(exp, requeue=exp.loaded.config.train_auto_resume),
        requeue=exp.loaded.config.train_auto_resume,
        cwd=str(Path.cwd()),
        logs=str(logs),
        node_log=str(logs / "slurm-%j-node%n.out"),
        train=exp.train_argv(),
    )


def node_env(exp: Experiment, opts: SlurmOptions) -> dict[str, str]:
    """What node 0 of `opts.nodes` Slurm nodes sees (its node list: one host, which needs no expanding)."""
    env = {
        "SLURM_JOB_ID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NNODES": str(opts.nodes),
        "SLURM_JOB_NODELIST": "slurm-node-0",
        "SLURM_STEP_TASKS_PER_NODE": "1",
    }
    if opts.gpus_per_node:
        env["SLURM_GPUS_ON_NODE"] = str(opts.gpus_per_node)
    return env


def submit(exp: Experiment, opts: SlurmOptions, script_text: str) -> Submitted:
    """Write the script into the output tree, `sbatch --parsable` it, record the job id."""
    job_id, script = queue(exp, opts, script_text)
    return Submitted(
        job_id,
        (
            f"submitted slurm job {job_id} ({opts.nodes} node{'s' if opts.nodes > 1 else ''})",
            f"script: {script}",
            f"logs: {exp.tree.logs_dir}/slurm-{job_id}*.out",
            f"status: ascendfactory-cli submit status {job_id}",
        ),
    )


def queue(exp: Experiment, opts: SlurmOptions, script_text: str) -> tuple[str, Path]:
    """`sbatch --parsable` the script written into the output tree; (job id, script)."""
    _refuse_if_running(exp)
    Path(exp.tree.logs_dir).mkdir(parents=True, exist_ok=True)
    script = Path(exp.tree.submitted(SCRIPT))
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(script_text)
    proc = run_slurm(["sbatch", "--parsable", str(script)])
    job_id = proc.stdout.strip().split(";")[0]  # `jobid[;cluster]`
    if not job_id.isdigit():
        raise SchedulerError(f"sbatch printed no job id: {proc.stdout.strip()!r}")
    record(exp, {"scheduler": "slurm", "job_id": job_id, "script": str(script), "nodes": opts.nodes})
    return job_id, script


def _refuse_if_running(exp: Experiment) -> None:
    try:
        job = last_job(exp.output_dir, "slurm")
    except ConfigError:
        return
    state = job_state(str(job["job_id"])).get("JobState", "")
    if state in ACTIVE:
        raise ConfigError(
            Problem(
                "af_output_dir",
                f"slurm job {job['job_id']} for {exp.output_dir} is still {state}: two jobs would write the "
                "same output tree",
                fix=f"ascendfactory-cli submit cancel {job['job_id']}, or wait for it",
            )
        )


def run_slurm(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    exe = shutil.which(argv[0])
    if exe is None:
        raise SchedulerError(
            f"{argv[0]} not found on PATH: run this on a Slurm login node (or install slurm-client)"
        )
    try:
        proc = subprocess.run(
            [exe, *argv[1:]], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"{argv[0]} did not answer within {TIMEOUT_S} s (is slurmctld up?)") from None
    if check and proc.returncode != 0:
        raise SchedulerError(f"{shlex.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc


def job_state(job_id: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict (JobState, ExitCode, Reason, StdOut, ...); from `sacct` when
    slurmctld has forgotten the job and accounting answers; {} when neither knows it."""
    proc = run_slurm(["scontrol", "show", "job", "-o", job_id], check=False)
    if proc.returncode == 0 and proc.stdout.strip():
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))
    if "invalid job id" not in proc.stderr.lower():  # no controller, no configuration: say so
        raise SchedulerError(f"scontrol show job {job_id} failed: {proc.stderr.strip()[-500:]}")
    if shutil.which("sacct"):
        acct = run_slurm(
            ["sacct", "-j", job_id, "-X", "--parsable2", "--noheader", "-o", "JobID,State,ExitCode,Reason"],
            check=False,
        )
        line = acct.stdout.strip().splitlines()[:1] if acct.returncode == 0 else []
        if line:
            _, state, code, reason = (line[0].split("|") + ["", "", "", ""])[:4]
            return {"JobId": job_id, "JobState": state.split()[0], "ExitCode": code, "Reason": reason}
    return {}


def status(job: Mapping[str, Any], logs_dir: Path | None = None) -> JobState:
    """State, exit code and reason of the job, and for a failed job the error lines its nodes printed
    (from `logs_dir`, default the directory of the job's output file)."""
    job_id = str(job["job_id"])
    state = job_state(job_id)
    if not state:
        raise SchedulerError(
            f"slurm knows no job {job_id} (finished jobs are kept MinJobAge seconds; sacct needs accounting)"
        )
    name = state.get("JobState", "?")
    if logs_dir is None and state.get("StdOut"):
        logs_dir = Path(state["StdOut"]).parent
    failed = name not in ACTIVE and name != "COMPLETED"
    return JobState(
        job_id=job_id,
        state=name,
        active=name in ACTIVE,
        succeeded=name == "COMPLETED",
        exit_code=state.get("ExitCode", ""),
        reason=state.get("Reason", ""),
        nodes=state.get("NodeList", ""),
        log=state.get("StdOut", ""),
        errors=tuple(node_errors(logs_dir, job_id)) if failed and logs_dir is not None else (),
    )


def node_errors(logs_dir: Path, job_id: str) -> list[str]:
    """The error lines each node printed (`ascendfactory-cli`'s `error:` block), prefixed by the node."""
    lines: list[str] = []
    for path in sorted(logs_dir.glob(f"slurm-{job_id}-node*.out")):
        node = path.stem.rsplit("-", 1)[-1]
        text = path.read_text(errors="replace").splitlines()
        start = max((i for i, line in enumerate(text) if line.startswith("error:")), default=None)
        if start is None:
            picked = [line for line in text if ERROR_LINE.match(line)][-5:]
        else:
            picked = text[start : start + 12]
        lines += [f"{node}: {line}" for line in picked]
    return lines


def cancel(job: Mapping[str, Any]) -> None:
    """`scancel`: every node's runner stops its processes (SIGTERM) and marks its tracker runs killed."""
    run_slurm(["scancel", str(job["job_id"])])


SCHEDULER = Scheduler(
    name="slurm",
    description="Slurm: an sbatch script in the output tree, one `ascendfactory-cli train` per node",
    help="Submit to Slurm: an sbatch script in the output tree, one `ascendfactory-cli train` per node.",
    options=SlurmOptions,
    platform="Slurm",
    node_env=node_env,
    render=render,
    submit=submit,
    status=status,
    cancel=cancel,
    id_is_number=True,
    examples=(
        "ascendfactory-cli submit slurm exp.yaml --nodes 2 --partition gpu --time 04:00:00 --gpus-per-node 8",
        "ascendfactory-cli submit slurm cfgs/quickstart.yaml --nodes 1 --dry-run",
    ),
)
