"""What every scheduler's submission shares: the experiment checked as node 0 of the job would see it, the
`ascendfactory-cli train` command each node runs, and the record of submitted jobs
(`{af_output_dir}/.af/submit.json`)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ascendfactory.config.devices import VISIBLE_DEVICE_VARS
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.config.platforms import platform_variable
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.output_tree import SUBMIT_RECORD as RECORD
from ascendfactory.output_tree import OutputTree

PER_NODE_KEYS = ("env.NODE_RANK",)  # a value every node would share: refused on `submit` when nodes > 1


@dataclass(frozen=True)
class Experiment:
    """The experiment as the command line named it: the file, the old-style names, the overrides."""

    path: str
    names: tuple[str, ...]  # () or (model_name, exp_name)
    overrides: tuple[str, ...]
    loaded: LoadedExperiment

    @property
    def output_dir(self) -> Path:
        return Path(self.loaded.config.af_output_dir).absolute()

    @property
    def tree(self) -> OutputTree:
        return OutputTree(str(self.output_dir))

    def train_argv(self) -> list[str]:
        """`ascendfactory-cli train <file> [names] [overrides]`, with the file made absolute and the console
        script of this installation (its `python -m` form where the script is not installed)."""
        script = Path(sys.executable).with_name("ascendfactory-cli")
        cli = [str(script)] if script.exists() else [sys.executable, "-m", "ascendfactory.cli.app"]
        return [*cli, "train", str(Path(self.path).absolute()), *self.names, *self.overrides]


def check_nodes(
    exp: Experiment, nodes: int, *, platform_env: dict[str, str], devices: int | None = None
) -> None:
    """Plan the experiment as node 0 of `nodes` would (the platform's variables in `platform_env`; the
    accelerators requested per node, `devices`, where the experiment does not set env.NPUS_PER_NODE): every
    configuration problem is reported now, before the job queues."""
    from ascendfactory.backends.planner import make_plan

    problems = [
        Problem(
            key,
            f"is given on the command line, so all {nodes} nodes would run with the same value",
            fix=f"leave {key} out: each node takes its own from the scheduler",
            source="command line",
        )
        for key in PER_NODE_KEYS
        if nodes > 1 and key in exp.loaded.overridden
    ]
    if problems:
        raise ConfigError(problems)
    loaded = exp.loaded
    env_tree = loaded.tree.get("env")
    env_tree = env_tree if isinstance(env_tree, dict) else {}
    if devices and env_tree.get("NPUS_PER_NODE") is None:
        env = loaded.config.env.model_copy(update={"NPUS_PER_NODE": devices})
        loaded = dataclasses.replace(loaded, config=loaded.config.model_copy(update={"env": env}))
    scrubbed = {
        k: v for k, v in os.environ.items() if not platform_variable(k) and k not in VISIBLE_DEVICE_VARS
    }
    make_plan(loaded, dry_run=True, environ={**scrubbed, **platform_env})


def record(exp: Experiment, entry: dict[str, object]) -> Path:
    """Append `entry` (scheduler, job id, script, time) to the output tree's submission record."""
    path = Path(exp.tree.submit_record)
    path.parent.mkdir(parents=True, exist_ok=True)
    jobs = read_record(exp.output_dir)
    jobs.append({**entry, "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"jobs": jobs}, indent=2) + "\n")
    tmp.replace(path)
    return path


def read_record(output_dir: Path) -> list[dict[str, object]]:
    path = Path(OutputTree(str(output_dir)).submit_record)
    if not path.is_file():
        return []
    try:
        return list(json.loads(path.read_text())["jobs"])
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            Problem(str(path), "is not a submission record", fix="remove it (it lists submitted job ids)")
        ) from None


def newest_job(output_dir: Path, scheduler: str | None = None) -> dict[str, object]:
    """The newest job submitted for `output_dir` (of `scheduler`, when given)."""
    jobs = [j for j in read_record(output_dir) if scheduler is None or j.get("scheduler") == scheduler]
    if not jobs:
        which = f"{scheduler} job" if scheduler else "job"
        raise ConfigError(
            Problem(
                "job",
                f"no {which} was submitted for {output_dir} (no {RECORD} entry)",
                fix="submit it first (ascendfactory-cli submit ...), or give the job id",
            )
        )
    return jobs[-1]


def last_job(output_dir: Path, scheduler: str) -> dict[str, object]:
    jobs = [j for j in read_record(output_dir) if j.get("scheduler") == scheduler]
    if not jobs:
        raise ConfigError(
            Problem(
                "job",
                f"no {scheduler} job was submitted for {output_dir} (no {RECORD} entry)",
                fix=f"submit it first (ascendfactory-cli submit {scheduler} ...), or give the job id",
            )
        )
    return jobs[-1]
