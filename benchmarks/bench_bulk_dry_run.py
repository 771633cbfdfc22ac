"""`train --dry-run` over many experiment files in one process: files per second.

The files are what `config` writes: every registered backend's every experiment template for several
catalog models it offers (the models each backend's `config` offers, first `--models` of them), plus the
repository's `cfgs/` (its old-style file counted as its model/experiment pairs), copied into one folder.
Each round runs, as fresh processes interleaved with each other:

    one       ascendfactory-cli train <the folder's first file> --dry-run
    bulk      ascendfactory-cli train <the folder> --dry-run

and prints each median (min, max), the bulk's files/s over its whole wall time (start-up included: what a
user waits for) and the marginal files/s ((bulk - one) / (N - 1): the cost of one more file), against the
goal (>= 30 files/s on the machine it runs on). The bulk's verdicts are checked: every file planned or
refused, none failed.

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
    from ascendfactory.backends.templates import offered_models, render_experiment

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


def run(argv: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", type=int, default=3)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_bulk_"))
    write_experiments(folder, args.models)
    first = sorted(folder.glob("*.yaml"))[0]
    base = [*cli(), "train"]
    _, text = run([*base, str(folder), "--dry-run"])
    tail = text.strip().splitlines()[-1]
    count = int(tail.split()[0])
    failed = int(tail.split(", ")[-1].split()[0])
    assert failed == 0, text[-3000:]
    times: dict[str, list[float]] = {"one": [], "bulk": []}
    for _ in range(args.runs):
        times["one"].append(run([*base, str(first), "--dry-run"])[0])
        times["bulk"].append(run([*base, str(folder), "--dry-run"])[0])
    print(f"{args.runs} interleaved rounds on {os.cpu_count()} cores; {count} experiments ({tail})")
    for name, values in times.items():
        print(
            f"{name:5s} median {statistics.median(values) * 1000:7.0f} ms   "
            f"min {min(values) * 1000:6.0f}   max {max(values) * 1000:6.0f}"
        )
    one, bulk = statistics.median(times["one"]), statistics.median(times["bulk"])
    whole = count / bulk
    marginal = (count - 1) / (bulk - one) if bulk > one else float("inf")
    verdict = "OK" if whole >= GOAL else "UNDER"
    print(f"files/s (whole command): {whole:.1f}   goal >= {GOAL:.0f}   {verdict}")
    print(f"files/s (marginal, start-up left out): {marginal:.1f}")
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
