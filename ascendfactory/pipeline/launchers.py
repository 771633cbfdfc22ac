"""One launcher per launch kind of the plan: `Process`, `Torchrun`, `Ray`.

A launcher turns a step's launch into what the runner needs: the argv to start (with the runner's timeouts
applied), extra environment, the log files and how lines are routed to them, which rank explains a
failure, and which ranks the device monitor follows. Everything specific to one launch kind is here:

- `ProcessLauncher`: the argv as planned; one log (the step's own, or the run log of `Process.rank`).
- `TorchrunLauncher`: `--rdzv_conf timeout=<node_wait_timeout_s>` (static rendezvous: how long nodes wait
  for each other) and `AF_DISTRIBUTED_TIMEOUT_S` (the embedded trainer's collective timeout); workers'
  lines arrive as `[<role><local_rank>]:text` (`--tee 3`) and go to one run log per global rank, torchrun's
  own lines to `launcher-node<N>`; the failing rank is the first that printed a traceback, else torchrun's
  "Root Cause" summary; the monitor finds ranks by their `LOCAL_RANK`.
- `RayLauncher`: `ray_node.py head|worker` with `node_wait_timeout_s` as its wait for nodes and resources;
  everything the node prints (Ray's lines, the driver's on NODE_RANK 0) goes to this node's run log; the
  monitor follows the node's whole process tree (Ray's workers are the raylet's children, not the driver's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ascendfactory.pipeline.launch import LineHook, LogNames, StepProcess, Tee
from ascendfactory.plan import Launch, Process, Ray, RunPolicy, Step, Torchrun

RANK_PREFIX = re.compile(r"^\[([A-Za-z_]*?)(\d+)\]:")
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?\brank\s*:\s*(\d+)", re.S)
DIST_TIMEOUT_ENV = "AF_DISTRIBUTED_TIMEOUT_S"  # collective timeout for the embedded trainer's process group


@dataclass(frozen=True)
class MonitorTargets:
    """What the device monitor samples: global ranks of this node in local order, and how a rank's
    processes are found (`local_rank_env`: workers carry LOCAL_RANK; else the whole tree is one rank)."""

    ranks: tuple[int, ...]
    local_rank_env: bool


class ProcessLauncher:
    def __init__(self, launch: Process, policy: RunPolicy) -> None:
        self.launch, self.policy = launch, policy

    def argv(self) -> list[str]:
        return self.launch.command()

    def env(self) -> dict[str, str]:
        return {}

    def log_paths(self, step: Step, names: LogNames) -> dict[int | None, str]:
        if self.launch.rank is None:
            return {None: names.step(step.name)}
        return {
            self.launch.rank: names.run_log(
                self.policy.nnodes,
                self.launch.rank,
                world_size=self.launch.world_size,
                node_rank=self.policy.node_rank,
            )
        }

    def split(self, line: str) -> tuple[int | None, str]:
        return self.launch.rank, line

    def failing_rank(self, tee: Tee) -> int | None:
        return None

    def monitor(self) -> MonitorTargets | None:
        return (
            MonitorTargets((self.launch.rank,), local_rank_env=False)
            if self.launch.rank is not None
            else None
        )


class TorchrunLauncher:
    def __init__(self, launch: Torchrun, policy: RunPolicy) -> None:
        self.launch, self.policy = launch, policy

    def argv(self) -> list[str]:
        return self.launch.command(rendezvous_timeout_s=self.policy.node_wait_timeout_s)

    def env(self) -> dict[str, str]:
        return {DIST_TIMEOUT_ENV: str(self.policy.collective_timeout_s)}

    def log_paths(self, step: Step, names: LogNames) -> dict[int | None, str]:
        t = self.launch
        paths: dict[int | None, str] = {
            rank: names.run_log(t.nnodes, rank, world_size=t.world_size, node_rank=t.node_rank)
            for rank in t.ranks_here()
        }
        paths[None] = names.launcher(t.node_rank)
        return paths

    def split(self, line: str) -> tuple[int | None, str]:
        m = RANK_PREFIX.match(line)
        if not m:
            return None, line
        return self.launch.global_rank(int(m.group(2))), line[m.end() :]

    def failing_rank(self, tee: Tee) -> int | None:
        if tee.first_traceback is not None:
            return tee.first_traceback
        m = ROOT_CAUSE.search("\n".join(tee.launcher_tail))
        return int(m.group(1)) if m else None

    def monitor(self) -> MonitorTargets:
        return MonitorTargets(tuple(self.launch.ranks_here()), local_rank_env=True)


class RayLauncher:
    def __init__(self, launch: Ray, policy: RunPolicy) -> None:
        self.launch, self.policy = launch, policy

    def argv(self) -> list[str]:
        return self.launch.command(timeout_s=self.policy.node_wait_timeout_s)

    def env(self) -> dict[str, str]:
        return {}

    def log_paths(self, step: Step, names: LogNames) -> dict[int | None, str]:
        r = self.launch
        return {
            r.node_rank: names.run_log(r.nnodes, r.node_rank, world_size=r.world_size, node_rank=r.node_rank)
        }

    def split(self, line: str) -> tuple[int | None, str]:
        return self.launch.node_rank, line

    def failing_rank(self, tee: Tee) -> int | None:
        return self.launch.node_rank

    def monitor(self) -> MonitorTargets:
        return MonitorTargets((self.launch.node_rank,), local_rank_env=False)


Launcher = ProcessLauncher | TorchrunLauncher | RayLauncher


def launcher_for(launch: Launch, policy: RunPolicy) -> Launcher:
    """The launcher of a launch kind (one class per kind of `ascendfactory.plan.Launch`)."""
    if isinstance(launch, Torchrun):
        return TorchrunLauncher(launch, policy)
    if isinstance(launch, Ray):
        return RayLauncher(launch, policy)
    return ProcessLauncher(launch, policy)


def open_step(
    step: Step, policy: RunPolicy, names: LogNames, *, env: dict[str, str], on_line: LineHook | None = None
) -> tuple[StepProcess, Launcher]:
    """The step's process, ready to `start()`: argv, environment and tee as its launcher says."""
    assert step.launch is not None, f"step {step.name} has nothing to launch"
    launcher = launcher_for(step.launch, policy)
    env = dict(env)
    for key, value in launcher.env().items():
        env.setdefault(key, value)
    tee = Tee(launcher.log_paths(step, names), split=launcher.split, on_line=on_line)
    return StepProcess(
        step.name, launcher.argv(), cwd=step.cwd, env=env, tee=tee, failing_rank=launcher.failing_rank
    ), launcher
