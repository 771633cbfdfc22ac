"""Tiny fake step programs and plan builders for the runner tests (unit and integration tiers).

`FAKE_TRAINER` behaves like a Megatron trainer as far as the runner can see: it prints the arguments dump
and one iteration line per step on the last rank, saves `iter_%07d/mp_rank_00/model_optim_rng.pt` + the
tracker every `--save-interval` steps (rank 0, temp dir then rename, as Megatron-LM does), resumes from
`--load` (deterministic: the loss is a function of the iteration only), and fails on request
(`FAKE_FAIL_AT=<iteration>` on `FAKE_FAIL_RANK`, once per marker file `FAKE_FAIL_MARKER`;
`FAKE_FAIL_MODE=kill` for a SIGKILL; `FAKE_EXIT_AT_END=<code>` on `FAKE_FAIL_RANK` after the last save, as a
teardown abort; `FAKE_NAN_FROM=<iteration>`: a NaN loss from there on). Under torchrun with
`AF_FAKE_DIST=1` it joins a gloo process group and all-reduces every iteration, so a dead peer is noticed.
"""

from __future__ import annotations

import base64
import dataclasses
import pickle
import sys
import textwrap
from pathlib import Path

from ascendfactory.backends.base import PlanContext
from ascendfactory.checkpoints.megatron import SAVED_MARKER
from ascendfactory.config.devices import DeviceCount
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.config.schema import ExperimentConfig
from ascendfactory.plan import (
    CheckpointSpec,
    LogNaming,
    LogSpec,
    Plan,
    Process,
    Role,
    Step,
    ThroughputSpec,
    Torchrun,
)
from tests.support.ports import free_port

FAKE_TRAINER = textwrap.dedent("""
    import argparse, os, shutil, sys, time
    p = argparse.ArgumentParser()
    p.add_argument("--train-iters", type=int, default=10)
    p.add_argument("--save-interval", type=int, default=0)
    p.add_argument("--save", default=None)
    p.add_argument("--load", default=None)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--seq-length", type=int, default=128)
    p.add_argument("--gbs", type=int, default=8)
    a = p.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    last = rank == world - 1
    if os.environ.get("AF_FAKE_DIST") == "1":
        import datetime, torch, torch.distributed as dist
        timeout = float(os.environ.get("AF_DISTRIBUTED_TIMEOUT_S", "60"))
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    start = 0
    if a.load and os.path.exists(os.path.join(a.load, "latest_checkpointed_iteration.txt")):
        start = int(open(os.path.join(a.load, "latest_checkpointed_iteration.txt")).read())
        print(f" loading checkpoint from {a.load} at iteration {start}", flush=True)
    if last:
        print("------------------------ arguments ------------------------", flush=True)
        print(f"  seq_length ...................................... {a.seq_length}", flush=True)
    fail_at = int(os.environ.get("FAKE_FAIL_AT", "0"))
    marker = os.environ.get("FAKE_FAIL_MARKER")
    for it in range(start + 1, a.train_iters + 1):
        if os.environ.get("AF_FAKE_DIST") == "1":
            t = torch.ones(1)
            dist.all_reduce(t)
        time.sleep(a.sleep)
        if it == fail_at and rank == int(os.environ.get("FAKE_FAIL_RANK", world - 1)) and not (
                marker and os.path.exists(marker)):
            if marker:
                open(marker, "w").close()
            if os.environ.get("FAKE_FAIL_MODE") == "kill":
                import signal
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"fake failure at iteration {it}")
        if last:
            nan = it >= int(os.environ.get("FAKE_NAN_FROM", "0") or 0) > 0
            loss = "nan" if nan else f"{10.0 / it:.6E}"
            print(f" [2026-01-22 10:00:{it % 60:02d}] iteration {it:8d}/{a.train_iters:8d} | "
                  f"consumed samples: {it * a.gbs:12d} | elapsed time per iteration (ms): 100.0 | "
                  f"learning rate: 1.000000E-05 | global batch size: {a.gbs:5d} | "
                  f"lm loss: {loss} | loss scale: 1.0 | grad norm: 1.000 | "
                  f"number of skipped iterations:   0 | number of nan iterations: {int(nan):3d} |",
                  flush=True)
        if a.save and a.save_interval and it % a.save_interval == 0:
            if rank == 0:
                final = os.path.join(a.save, f"iter_{it:07d}")
                tmp = final + ".tmp"
                os.makedirs(os.path.join(tmp, "mp_rank_00"), exist_ok=True)
                open(os.path.join(tmp, "mp_rank_00", "model_optim_rng.pt"), "w").write(str(it))
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
                open(os.path.join(a.save, "latest_checkpointed_iteration.txt"), "w").write(str(it))
            if os.environ.get("AF_FAKE_DIST") == "1":
                dist.barrier()
            if last:
                print(f"  successfully saved checkpoint from iteration {it:7d} to {a.save}", flush=True)
    if os.environ.get("AF_FAKE_DIST") == "1":
        dist.destroy_process_group()
    if os.environ.get("FAKE_EXIT_AT_END") and rank == int(os.environ.get("FAKE_FAIL_RANK", world - 1)):
        print("terminate called without an active exception", flush=True)  # a teardown abort, after it all
        sys.exit(int(os.environ["FAKE_EXIT_AT_END"]))
""")

WRITER = textwrap.dedent("""
    import os, sys
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for i in range(3):
        open(os.path.join(out, f"part{i}.bin"), "w").write("x" * (i + 1))
        print(f"wrote part{i}", flush=True)
    if os.environ.get("FAKE_WRITER_FAIL") == "1":
        print("Traceback (most recent call last):", file=sys.stderr, flush=True)
        print("RuntimeError: fake converter failure", file=sys.stderr, flush=True)
        sys.exit(3)
""")

FAKE_LAUNCHER = textwrap.dedent("""
    # A torchrun stand-in without torch: takes torchrun's options (--nproc_per_node N, others ignored),
    # starts N workers in sessions of their own (as torchrun does), with RANK/LOCAL_RANK/WORLD_SIZE set,
    # prefixes their lines "[defaultN]:" and exits with the first failure.
    import os, signal, subprocess, sys, threading
    argv, opts = sys.argv[1:], {}
    while argv and argv[0].startswith("--"):
        opts[argv[0]] = argv[1]
        argv = argv[2:]
    nproc, script, args = int(opts["--nproc_per_node"]), argv[0], argv[1:]
    procs = []
    def pump(i, p):
        for line in p.stdout:
            sys.stdout.write(f"[default{i}]:" + line.decode())
            sys.stdout.flush()
    def stop(signum, frame):
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    for i in range(nproc):
        env = dict(os.environ, RANK=str(i), LOCAL_RANK=str(i), WORLD_SIZE=str(nproc))
        p = subprocess.Popen([sys.executable, script, *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        threading.Thread(target=pump, args=(i, p), daemon=True).start()
    codes = [p.wait() for p in procs]
    print("launcher: all workers exited", flush=True)
    bad = [(i, c) for i, c in enumerate(codes) if c]
    if bad:
        print("Root Cause (first observed failure):", flush=True)
        print(f"  rank      : {bad[0][0]} (local_rank: {bad[0][0]})", flush=True)
        sys.exit(1)
""")

SPAWNER = textwrap.dedent("""
    import os, subprocess, sys, time
    pidfile = sys.argv[1]
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]),
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)]
    with open(pidfile, "w") as f:
        f.write(" ".join(str(p) for p in [os.getpid(), *(k.pid for k in kids)]))
    print("spawned", flush=True)
    time.sleep(600)
""")


def write_script(directory: Path, name: str, source: str) -> str:
    path = directory / name
    path.write_text(source, encoding="utf-8")
    return str(path)


def loaded(out_dir: Path, source: Path | None = None, **overrides: object) -> LoadedExperiment:
    data = {"af_model_name": "fake-model", "exp_name": "unit", "af_output_dir": str(out_dir), **overrides}
    cfg = ExperimentConfig.model_validate(data)
    return LoadedExperiment(
        config=cfg, tree=data, source=str(source or Path(out_dir) / "exp.yaml"), style="new"
    )


def plan(
    out_dir: Path, steps: list[Step], *, world_size: int = 1, model: str = "fake-model", exp: str = "unit"
) -> Plan:
    """A Megatron-style plan of `steps` (loss on the last rank, megatron checkpoints under out_dir)."""
    logs = LogSpec(
        format="megatron",
        naming=LogNaming(prefix=f"{model}-{exp}"),
        loss_rank="last",
        throughput=ThroughputSpec("megatron", devices=world_size),
    )
    p = Plan(
        backend="torch",
        exp_name=exp,
        model_name=model,
        output_dir=str(out_dir),
        logs=logs,
        checkpoints=CheckpointSpec(
            root=str(Path(out_dir) / "saved_checkpoints"), scheme="megatron", saved_marker=SAVED_MARKER
        ),
        facts={"world_size": world_size},
    )
    for s in steps:
        p.add(s)
    return p


def complete(p: Plan, experiment: LoadedExperiment) -> Plan:
    """What a backend takes from the experiment: the run policy, retention and the exp-config file."""
    ctx = PlanContext(loaded=experiment, devices=DeviceCount(1, "test"), python=sys.executable)
    path, text = ctx.exp_config_file(p.output_dir)
    p.policy, p.files, p.source = ctx.run_policy(), {path: text}, experiment.source
    if p.checkpoints is not None:
        p.checkpoints = dataclasses.replace(p.checkpoints, retain=experiment.config.save_total_limit)
    return p


def run_experiment(p: Plan, experiment: LoadedExperiment, **kw: object) -> int:
    """The runner as `train` calls it: the completed plan, the CLI's output object, and a re-planner that
    goes through `planner.make_plan` (tests replace it)."""
    from ascendfactory.backends import planner
    from ascendfactory.cli._output import out
    from ascendfactory.pipeline import runner

    def replan() -> Plan:
        return complete(planner.make_plan(experiment, dry_run=False), experiment)

    return runner.run_experiment(complete(p, experiment), out=out, replan=replan, **kw)  # type: ignore[arg-type]


def proc_step(name: str, role: Role, argv: list[str], **kw: object) -> Step:
    return Step(name=name, role=role, launch=Process(tuple(argv)), **kw)  # type: ignore[arg-type]


def plot_step(out_dir: Path, skip_reason: str | None = None) -> Step:
    return Step(
        name="plot",
        role=Role.PLOT,
        outputs=[str(Path(out_dir) / "training_loss.png")],
        skip_reason=skip_reason,
    )


def train_step(
    trainer: str,
    out_dir: Path,
    *,
    iters: int = 5,
    save_interval: int = 0,
    load: bool = False,
    sleep: float = 0.0,
    nproc: int = 0,
    nnodes: int = 1,
    node_rank: int = 0,
    port: int | None = None,
    launcher: str | None = None,
    fake_nproc: int = 1,
) -> Step:
    """A train step running the fake trainer: under torchrun with `--tee 3` (nproc > 0), under the fake
    launcher (`launcher` = path of FAKE_LAUNCHER, `fake_nproc` workers), or directly."""
    save = str(Path(out_dir) / "saved_checkpoints")
    args = [
        "--train-iters",
        str(iters),
        "--save-interval",
        str(save_interval),
        "--save",
        save,
        "--sleep",
        str(sleep),
    ]
    if load:
        args += ["--load", save]
    launch: Torchrun | Process
    if nproc:
        launch = Torchrun(
            python=sys.executable,
            entry=(trainer, *args),
            nnodes=nnodes,
            nproc_per_node=nproc,
            node_rank=node_rank,
            master_addr="127.0.0.1",
            master_port=port or free_port(),
        )
    elif launcher:
        launch = Torchrun(
            python=sys.executable,
            entry=(trainer, *args),
            nnodes=1,
            nproc_per_node=fake_nproc,
            node_rank=0,
            master_addr="127.0.0.1",
            master_port=0,
            torchrun=(sys.executable, launcher),
        )
    else:
        launch = Process((sys.executable, trainer, *args))
    return Step(name="train", role=Role.TRAIN, launch=launch, outputs=[save])


def replanned_train(out_dir: Path, train: Step, *, final: int) -> Step:
    """The train step as a Megatron backend plans it again after a failure: loading saved_checkpoints once
    it holds a complete checkpoint, and skipped as complete when that is at `final` (train-iters), as
    `backends.common.megatron.skeleton.finished_reason` says."""
    from ascendfactory.checkpoints.megatron import inspect, iteration_name

    save = str(Path(out_dir) / "saved_checkpoints")
    state = inspect(save)
    if not state.resumable:
        return train
    launch = train.launch
    if isinstance(launch, Torchrun) and "--load" not in launch.entry:
        launch = dataclasses.replace(launch, entry=(*launch.entry, "--load", save))
    elif isinstance(launch, Process) and "--load" not in launch.argv:
        launch = dataclasses.replace(launch, argv=(*launch.argv, "--load", save))
    at = state.tracker if isinstance(state.tracker, int) else 0
    skip = (
        f"complete: saved_checkpoints is at iteration {at} of train-iters {final}; nothing to train"
        if at >= final
        else None
    )
    return dataclasses.replace(train, launch=launch, skip_reason=skip, notes=[f"resume {iteration_name(at)}"])


def finishing_planner(out_dir: Path, train: Step, *, final: int, world_size: int = 1):
    """A stand-in for `planner.make_plan` in the runner's re-plan: `replanned_train` in a fake plan."""

    def make_plan(loaded: object, *, dry_run: bool, environ: object = None) -> Plan:
        return plan(out_dir, [replanned_train(out_dir, train, final=final)], world_size=world_size)

    return make_plan


DRIVER = textwrap.dedent("""
    # Runs the runner in a process of its own, as `ascendfactory-cli train` would (exit code included).
    import base64, json, pickle, sys
    from pathlib import Path
    spec = json.load(open(sys.argv[1]))
    sys.path.insert(0, spec["root"])
    from tests.support import runner_fakes as fakes
    from ascendfactory.errors import AscendFactoryError
    config = dict(spec["config"])
    loaded = fakes.loaded(config.pop("af_output_dir"), **config)
    cfg = loaded.config
    steps = [pickle.loads(base64.b64decode(s)) for s in spec["steps"]]
    world = spec.get("facts", {}).get("world_size", 1)
    plan = fakes.plan(Path(cfg.af_output_dir), steps, world_size=world, model=cfg.af_model_name,
                      exp=cfg.exp_name)
    if spec.get("final_iteration"):  # re-plans as a Megatron backend would (fakes.replanned_train)
        from ascendfactory.backends import planner
        train = next(s for s in steps if s.name == "train")
        planner.make_plan = fakes.finishing_planner(
            Path(cfg.af_output_dir), train, final=spec["final_iteration"], world_size=world)
    try:
        sys.exit(fakes.run_experiment(plan, loaded, live=False, grace_s=spec.get("grace_s", 5.0)))
    except AscendFactoryError as e:
        print(f"error: {e}", flush=True)
        sys.exit(e.exit_code)
""")


def step_spec(step: Step) -> str:
    """A Step as the DRIVER reads it (pickled, base64)."""
    return base64.b64encode(pickle.dumps(step)).decode()


def driver_spec(config: dict[str, object], steps: list[Step], **extra: object) -> dict[str, object]:
    """The JSON the DRIVER reads: experiment keys, the steps, and the repository root (for tests.support)."""
    return {
        "config": config,
        "steps": [step_spec(s) for s in steps],
        "root": str(Path(__file__).resolve().parents[2]),
        **extra,
    }
