"""Runner benchmarks: its own overhead, the device monitor's CPU use, and the time to reach training.

    python benchmarks/bench_runner.py [--repeats 5]

1. overhead: wall time of `run_experiment` minus the sum of its steps' wall times, for a plan of four
   trivial steps (three `python -c pass` steps and a train step under a torchrun-like launcher with two
   workers, so the tee, the per-rank split and the monitor thread are all exercised). Goal < 1 s.
2. monitor: CPU time of the device monitor thread per sample while it follows 8 worker processes, and
   the resulting share of one core at the default interval. Goal < 1 %.
3. time to first step: from calling `run_experiment` to the train step's process starting, when the two
   steps before it are skipped by their manifests (inputs: a 2,000-file directory and a 256 MiB file).
   Goal < 2 s.
Medians over `--repeats` runs are printed.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support
from ascendfactory.pipeline.plan import RankLayout, Step  # noqa: E402

from ascendfactory.cli._output import out  # noqa: E402
from ascendfactory.pipeline.launch import LogNames  # noqa: E402
from ascendfactory.pipeline.monitor import DEFAULT_INTERVAL_S, DeviceMonitor  # noqa: E402
from ascendfactory.pipeline.runner import run_experiment  # noqa: E402
from tests.support import runner_fakes as fakes  # noqa: E402

PASS = [sys.executable, "-c", "pass"]


def bench_overhead(root: Path) -> float:
    work = Path(tempfile.mkdtemp(dir=root))
    outdir = work / "out"
    trainer = fakes.write_script(work, "trainer.py", fakes.FAKE_TRAINER)
    launcher = fakes.write_script(work, "launcher.py", fakes.FAKE_LAUNCHER)
    steps = [Step(name=n, kind=n, argv=PASS, outputs=[str(outdir / n)]) for n in ("preprocess", "hf2mg")]
    steps.append(fakes.train_step(trainer, outdir, iters=3, launcher=launcher, fake_nproc=2))
    steps.append(Step(name="mg2hf", kind="mg2hf", argv=PASS, outputs=[str(outdir / "mg2hf")]))
    t0 = time.perf_counter()
    run_experiment(fakes.plan(outdir, steps, world_size=2), fakes.loaded(outdir), live=False)
    wall = time.perf_counter() - t0
    summary = json.loads((outdir / ".af" / "summary.json").read_text())
    return wall - sum(s["wall_s"] for s in summary["steps"])


def bench_monitor(root: Path, seconds: float) -> tuple[float, int]:
    """(CPU seconds per sample, samples) while following 8 sleeping workers."""
    work = Path(tempfile.mkdtemp(dir=root))
    sleeper = fakes.write_script(work, "sleeper.py", "import time\ntime.sleep(600)\n")
    launcher = fakes.write_script(work, "launcher.py", fakes.FAKE_LAUNCHER)
    proc = subprocess.Popen(
        [sys.executable, launcher, "8", sleeper], stdout=subprocess.DEVNULL, start_new_session=True
    )
    time.sleep(1.0)
    mon = DeviceMonitor(
        LogNames.for_run(str(work / "logs"), "m", "e"), RankLayout(1, 8, 0), env={}, interval_s=0.25
    )
    mon.attach(proc.pid)
    mon.start()
    time.sleep(seconds)
    mon.stop()
    os.killpg(proc.pid, 15)
    proc.wait()
    return mon.cpu_seconds / max(mon.samples, 1), mon.samples


def bench_first_step(root: Path) -> float:
    work = Path(tempfile.mkdtemp(dir=root))
    outdir = work / "out"
    model = work / "model"
    for i in range(20):
        (model / f"d{i}").mkdir(parents=True)
        for j in range(100):
            (model / f"d{i}" / f"f{j}.json").write_text("{}")
    with open(model / "model.safetensors", "wb") as f:
        f.truncate(256 * 2**20)
    stamp = work / "train_started"
    train = Step(
        name="train",
        kind="train",
        argv=[sys.executable, "-c", f"import time; open({str(stamp)!r}, 'w').write(repr(time.time()))"],
    )

    def plan():
        return fakes.plan(
            outdir,
            [
                Step(
                    name="preprocess", kind="preprocess", argv=PASS, inputs=[str(model)], outputs=[str(model)]
                ),
                Step(name="hf2mg", kind="hf2mg", argv=PASS, inputs=[str(model)], outputs=[str(model)]),
                train,
            ],
        )

    run_experiment(plan(), fakes.loaded(outdir), live=False)  # writes the manifests
    t0 = time.time()
    run_experiment(plan(), fakes.loaded(outdir), live=False)
    skipped = json.loads((outdir / ".af" / "summary.json").read_text())["steps"]
    assert [s["state"] for s in skipped] == ["skipped", "skipped", "done"], skipped
    return float(stamp.read_text()) - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--monitor-seconds", type=float, default=10.0)
    args = parser.parse_args()
    out._console = Console(file=io.StringIO())  # the runner's own output is not what is measured
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        overhead = [bench_overhead(root) for _ in range(args.repeats)]
        first = [bench_first_step(root) for _ in range(args.repeats)]
        per_sample, samples = bench_monitor(root, args.monitor_seconds)
    print(
        f"runner overhead (4 trivial steps):     median {statistics.median(overhead):.3f} s "
        f"(min {min(overhead):.3f}, max {max(overhead):.3f}; goal < 1 s)"
    )
    print(
        f"start -> first step, 2 steps skipped:  median {statistics.median(first):.3f} s "
        f"(min {min(first):.3f}, max {max(first):.3f}; goal < 2 s)"
    )
    share = per_sample / DEFAULT_INTERVAL_S * 100
    print(
        f"device monitor: {per_sample * 1000:.2f} ms CPU per sample over {samples} samples (8 workers) "
        f"= {share:.3f} % of one core at the default {DEFAULT_INTERVAL_S:g} s interval "
        f"({per_sample * 100:.2f} % at 1 s; goal < 1 %)"
    )


if __name__ == "__main__":
    main()
