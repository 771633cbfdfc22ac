"""`train --dry-run` over many experiment files in one process: files per second.

The files are what `config` writes: every registered backend's every experiment template for several
catalog models it offers (its first `--models`), plus the repository's `cfgs/` (its old-style file counted
as its model/experiment pairs), in one folder. Each round runs, as fresh processes interleaved:

    one        ascendfactory-cli train <the folder's first file> --dry-run
    bulk       ascendfactory-cli train <the folder> --dry-run
    bulk-keys  the same with AF_VERL_ENV pointing nowhere: verl's files checked against its shipped key
               lists instead of composed by Hydra in verl's environment (where it is installed: one
               compose program for all of them, `backends/common/hydra/programs/hydra_compose.py --serve`)
    baseline   with `--baseline DIR` (another checkout, e.g. `git archive <rev> | tar -x -C DIR`): its bulk,
               PYTHONPATH pointing at it, in the same rounds

and prints each median (min, max) of wall time and of CPU time (user + sys of the command and the
processes it waited for: what the machine's other load does not change), files/s over the whole wall
time (start-up included: what a user waits for) and marginal files/s ((bulk - one) / (N - 1): the cost
of one more file), against the goal (>= 30 files/s on the machine it runs on). The verdicts are
checked: every file planned or refused, none failed, and the baseline's verdicts the same.

    python benchmarks/bench_bulk_dry_run.py [--runs 5] [--models 3] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
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


def cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(argv: list[str], root: Path = REPO, **env: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds, stdout."""
    environ = {**os.environ, "PYTHONPATH": str(root), **env}
    c0, t0 = cpu(), time.perf_counter()
    done = subprocess.run(argv, cwd=root, env=environ, capture_output=True, text=True)
    return time.perf_counter() - t0, cpu() - c0, done.stdout


def counted(text: str) -> tuple[int, str]:
    tail = text.strip().splitlines()[-1]
    failed = int(tail.split(", ")[-1].split()[0])
    assert failed == 0, text[-3000:]
    return int(tail.split()[0]), tail


def verdicts(text: str, root: Path) -> object:
    """The JSON report less what differs between runs and checkouts: timings, the checkout's own path (its
    programs') and the step fingerprints that hash it."""
    import json

    def strip(x: object) -> object:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("compose_s", "fingerprint")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    return strip(json.loads(text.replace(str(root), "<checkout>")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout whose bulk is timed alongside")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_bulk_"))
    write_experiments(folder, args.models)
    first = sorted(folder.glob("*.yaml"))[0]
    base = [*cli(), "train"]
    keys = {"AF_VERL_ENV": str(folder / "no-verl-env")}
    json_argv = [*base, str(folder), "--dry-run", "--format", "json"]
    ours = run(json_argv)[2]
    count, tail = counted(run([*base, str(folder), "--dry-run"])[2])
    counted(run([*base, str(folder), "--dry-run"], **keys)[2])
    cases: dict[str, tuple[list[str], Path, dict[str, str]]] = {
        "one": ([*base, str(first), "--dry-run"], REPO, {}),
        "bulk": ([*base, str(folder), "--dry-run"], REPO, {}),
        "bulk-keys": ([*base, str(folder), "--dry-run"], REPO, keys),
    }
    if args.baseline:
        root = args.baseline.resolve()
        same = verdicts(run(json_argv, root)[2], root) == verdicts(ours, REPO)
        print(f"baseline {root}: the same verdicts and plans: {'yes' if same else 'NO'}")
        cases["baseline"] = ([*base, str(folder), "--dry-run"], root, {})
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (argv, root, env) in cases.items():
            wall, used, _ = run(argv, root, **env)
            times[name].append(wall)
            cpus[name].append(used)
    print(f"{args.runs} interleaved rounds on {os.cpu_count()} cores; {count} experiments ({tail})")
    for name, values in times.items():
        print(
            f"{name:9s} median {statistics.median(values) * 1000:7.0f} ms   "
            f"min {min(values) * 1000:6.0f}   max {max(values) * 1000:6.0f}   "
            f"CPU median {statistics.median(cpus[name]) * 1000:7.0f} ms"
        )
    one = statistics.median(times["one"])
    for name in [n for n in cases if n != "one"]:
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
