"""Signals and kill -9 at every step of real runs: what is left running, and whether the same command then
completes the run.

    python benchmarks/fault_trials.py [--only torch|ray] [--steps preprocess,hf2mg,train,mg2hf,plot]

torch (the quickstart on two CPU processes, 24 iterations): for each step, SIGINT and SIGTERM to the CLI,
kill -9 of the CLI (the runner), kill -9 of the step's own process (for training: the torchrun agent) and,
for training, kill -9 of one worker. ray (the test backend of tests/integration/ray_contract, two nodes on
127.0.0.1): SIGINT and SIGTERM to the head's CLI, kill -9 of a whole node (head, worker), kill -9 of the
head's CLI alone. After each trial: processes of the run still alive 15 s after the CLI ended (orphans,
goal 0), then the same command(s) again: did the run complete (exit 0, training_loss.png, the loss in
summary.json)? Prints one row per trial and the totals. Not a test: it takes about 20-40 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.support.ports import free_port  # noqa: E402

CLI = [sys.executable, "-m", "ascendfactory.cli.app"]
TAG = "AF_RUN_TAG"


def run_processes(out: Path) -> list[psutil.Process]:
    """Processes of the run in `out`: tagged with it, or naming it on their command line."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if p.pid == os.getpid():
            continue
        try:
            tagged = p.environ().get(TAG, "").startswith(str(out) + "|")
        except (psutil.Error, OSError):
            tagged = False
        named = str(out) in " ".join(p.info["cmdline"] or [])
        if (tagged or named) and p.status() != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def wait_for(predicate, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def orphans_after(out: Path, wait_s: float = 15.0) -> int:
    wait_for(lambda: not run_processes(out), wait_s)
    return len(run_processes(out))


def completed(out: Path) -> bool:
    summary = out / ".af" / "summary.json"
    if not summary.exists() or not (out / "training_loss.png").exists():
        return False
    data = json.loads(summary.read_text())
    return data.get("loss_start") is not None or bool(data.get("metrics"))


# -- torch ------------------------------------------------------------------------------------------
def torch_args(out: Path, model: Path, port: int) -> list[str]:
    return [
        *CLI,
        "train",
        str(REPO / "cfgs" / "quickstart.yaml"),
        f"--af_output_dir={out}",
        f"--backend_config.training.tokenizer-name-or-path={model}",
        f"--env.MASTER_PORT={port}",
        "--backend_config.training.train-iters=24",
        "--backend_config.training.save-interval=6",
        "--backend_config.training.log-interval=1",
    ]


def runner_log(out: Path) -> str:
    logs = sorted((out / "logs").glob("*-runner.txt")) if (out / "logs").is_dir() else []
    return logs[-1].read_text() if logs else ""


def step_process(cli: subprocess.Popen, step: str) -> psutil.Process | None:
    markers = {
        "preprocess": "engine.data.preprocess",
        "hf2mg": "engine.convert",
        "mg2hf": "engine.convert",
        "train": "torch.distributed.run",
    }
    for p in psutil.Process(cli.pid).children():
        if markers[step] in " ".join(p.cmdline()):
            return p
    return None


def worker(cli: subprocess.Popen) -> psutil.Process | None:
    for p in psutil.Process(cli.pid).children(recursive=True):
        cmd = " ".join(p.cmdline())
        if "ascendfactory.engine.train" in cmd and "torch.distributed.run" not in cmd:
            return p
    return None


def torch_trial(step: str, fault: str, work: Path, model: Path, port: int) -> dict:
    out = work / f"torch-{step}-{fault}"
    args = torch_args(out, model, port)
    cli = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    marker = f"step {step}: running" if step != "plot" else "step mg2hf: done"
    hit = wait_for(lambda: marker in runner_log(out), 400, cli)
    if hit and step == "train":  # faults in the middle of training
        logs = out / "logs"
        hit = wait_for(
            lambda: "iteration        8/" in "".join(p.read_text() for p in logs.glob("*run_log*")), 300, cli
        )
    target = {
        "sigint": lambda: cli.send_signal(signal.SIGINT),
        "sigterm": lambda: cli.send_signal(signal.SIGTERM),
        "kill9-cli": lambda: cli.kill(),
        "kill9-step": lambda: (p := step_process(cli, step)) and p.kill(),
        "kill9-worker": lambda: (p := worker(cli)) and p.kill(),
    }[fault]
    if hit:
        target()  # training: at iteration 8; the other steps: as soon as the runner log says they run
    text, _ = cli.communicate(timeout=600)
    first = cli.returncode
    orphans = orphans_after(out)
    again = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=900)
    return {
        "trial": f"torch {step} {fault}",
        "hit": hit,
        "exit": first,
        "traceback": "Traceback" in text,
        "orphans": orphans,
        "rerun_exit": again.returncode,
        "completed": again.returncode == 0 and completed(out),
    }


# -- ray --------------------------------------------------------------------------------------------
def ray_trial(fault: str, work: Path, port: int) -> dict:
    from tests.integration.test_ray_launch import experiment, kill_node, no_ray_process_left, start

    name = f"ray-{fault}"
    paths = [
        experiment(work, name, nnodes=2, node_rank=r, port=port, steps=30, step_sleep_s=0.3) for r in (0, 1)
    ]
    procs = [start(p) for p in paths]
    log = work / f"{name}-node0" / "logs"
    hit = wait_for(
        lambda: any("step:3 " in f.read_text() for f in log.glob("raycontract-*-ray-node0-of-2.txt")),
        180,
        procs[0],
    )
    if hit:
        {
            "sigint": lambda: procs[0].send_signal(signal.SIGINT),
            "sigterm": lambda: procs[0].send_signal(signal.SIGTERM),
            "kill9-worker-node": lambda: kill_node(procs[1]),
            "kill9-head-node": lambda: kill_node(procs[0]),
            "kill9-head-cli": lambda: procs[0].kill(),
        }[fault]()
    texts = [p.communicate(timeout=180)[0] for p in procs]
    exits = [p.returncode for p in procs]
    wait_for(lambda: no_ray_process_left(port), 30)
    orphans = 0 if no_ray_process_left(port) else 1
    orphans += sum(orphans_after(work / f"{name}-node{r}", 5) for r in (0, 1))
    again = [start(p) for p in paths]
    again_exits = [(p.communicate(timeout=300), p.returncode)[1] for p in again]
    return {
        "trial": f"ray {fault}",
        "hit": hit,
        "exit": exits,
        "traceback": any("Traceback" in t.split("error:")[-1] for t in texts),
        "orphans": orphans,
        "rerun_exit": again_exits,
        "completed": again_exits == [0, 0] and completed(work / f"{name}-node0"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("torch", "ray"))
    ap.add_argument("--steps", default="preprocess,hf2mg,train,mg2hf,plot")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="af-faults-"))
    rows = []
    if a.only in (None, "torch"):
        from ascendfactory.engine.demo import make_demo_model

        model = make_demo_model(work / "tiny-qwen2")
        for step in a.steps.split(","):
            faults = ["sigint", "sigterm", "kill9-cli"]
            if step != "plot":
                faults.append("kill9-step")
            if step == "train":
                faults.append("kill9-worker")
            for fault in faults:
                rows.append(torch_trial(step, fault, work, model, free_port()))
                print(rows[-1], flush=True)
    if a.only in (None, "ray"):
        for fault in ("sigint", "sigterm", "kill9-worker-node", "kill9-head-node", "kill9-head-cli"):
            rows.append(ray_trial(fault, work, free_port()))
            print(rows[-1], flush=True)
    print(f"\n{'trial':32s} {'hit':5s} {'exit':10s} {'orphans':8s} {'re-run':8s} completed")
    for r in rows:
        print(
            f"{r['trial']:32s} {str(r['hit']):5s} {str(r['exit']):10s} {r['orphans']:<8d} "
            f"{str(r['rerun_exit']):8s} {r['completed']}"
        )
    print(
        f"\ntrials: {len(rows)} ({sum(r['hit'] for r in rows)} hit their step); orphans: "
        f"{sum(r['orphans'] for r in rows)}; tracebacks on the console: {sum(r['traceback'] for r in rows)}; "
        f"re-runs that completed: {sum(r['completed'] for r in rows)}/{len(rows)}"
    )
    return 0 if all(r["orphans"] == 0 and r["completed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
