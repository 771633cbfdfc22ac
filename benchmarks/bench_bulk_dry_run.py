"""`train --dry-run` over many experiment files in one process: files per second.

The files are what `config` writes: every registered backend's every experiment template for several
catalog models it offers (its first `--models`), plus the repository's `cfgs/` (its old-style file counted
as its model/experiment pairs), in one folder. Each round runs, as fresh processes interleaved:

    one        ascendfactory-cli train <the folder's first file> --dry-run
    bulk       ascendfactory-cli train <the folder> --dry-run
    bulk-keys  the same with AF_VERL_ENV pointing nowhere: verl's files checked against its shipped key
               lists instead of composed by Hydra in verl's environment (0.5-1.5 s each where it is
               installed: Hydra's own composition of verl's ppo_trainer config)

and prints each median (min, max), files/s over the whole wall time (start-up included: what a user waits
for) and marginal files/s ((bulk - one) / (N - 1): the cost of one more file), against the goal (>= 30
files/s on the machine it runs on). The verdicts are checked: every file planned or refused, none failed.

    python benchmarks/bench_bulk_dry_run.py [--runs 5] [--models 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL = 30.0


def cli() -> list[str]:
    exe = Path(sys.executable).with_name("ascendfactory-cli")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "ascendfactory.cli.app"]


def write_experiments(folder: Path, models: int) -> int:
    """Every backend's templates for its first `models` offered models, and cfgs/; the experiment count."""
    sys.path.insert(0, str(REPO))
    from ascendfactory.backends.registry import all_backends
    from ascendfactory.features.templates import offered_models, render_experiment

    for backend in all_backends():
        for model in offered_models(backend.name)[:models]:
            for exp in backend.experiments():
                path = folder / f"{backend.name}-{model}-{exp}.yaml"
                text = render_experiment(
                    backend=backend.name, model_name=model, exp_name=exp, output_file=str(path)
                )
                path.write_text(text)
    for path in (REPO / "cfgs").glob("*.yaml"):
        shutil.copy(path, folder / path.name)
    return 0


def run(argv: list[str], **env: str) -> tuple[float, str]:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=environ, capture_output=True, text=True)
    return time.perf_counter() - t0, done.stdout


def counted(text: str) -> tuple[int, str]:
    tail = text.strip().splitlines()[-1]
    failed = int(tail.split(", ")[-1].split()[0])
    assert failed == 0, text[-3000:]
    return int(tail.split()[0]), tail


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", type=int, default=3)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_bulk_"))
    write_experiments(folder, args.models)
    first = sorted(folder.glob("*.yaml"))[0]
    base = [*cli(), "train"]
    keys = {"AF_VERL_ENV": str(folder / "no-verl-env")}
    count, tail = counted(run([*base, str(folder), "--dry-run"])[1])
    counted(run([*base, str(folder), "--dry-run"], **keys)[1])
    times: dict[str, list[float]] = {"one": [], "bulk": [], "bulk-keys": []}
    for _ in range(args.runs):
        times["one"].append(run([*base, str(first), "--dry-run"])[0])
        times["bulk"].append(run([*base, str(folder), "--dry-run"])[0])
        times["bulk-keys"].append(run([*base, str(folder), "--dry-run"], **keys)[0])
    print(f"{args.runs} interleaved rounds on {os.cpu_count()} cores; {count} experiments ({tail})")
    for name, values in times.items():
        print(
            f"{name:9s} median {statistics.median(values) * 1000:7.0f} ms   "
            f"min {min(values) * 1000:6.0f}   max {max(values) * 1000:6.0f}"
        )
    one = statistics.median(times["one"])
    for name in ("bulk", "bulk-keys"):
        bulk = statistics.median(times[name])
        whole = count / bulk
        marginal = (count - 1) / (bulk - one) if bulk > one else float("inf")
        verdict = "OK" if whole >= GOAL else "UNDER"
        print(
            f"{name}: {whole:.1f} files/s over the whole command (goal >= {GOAL:.0f}: {verdict}); "
            f"{marginal:.1f} files/s marginal"
        )
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
