"""Start-up cost of the CLI: `ascendfactory-cli --help` and `train cfgs/quickstart.yaml --dry-run`.

Goals on a 2-core machine: --help < 0.25 s, the dry run < 0.4 s (median wall time of fresh processes).
Also reports whether torch / transformers / matplotlib were imported (they must not be).

    python benchmarks/bench_cli.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def wall(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - t0)
    return times


def heavy_imports(args: list[str]) -> list[str]:
    code = (
        "import sys; from ascendfactory.cli.app import main; rc = main(sys.argv[1:]); "
        "print('HEAVY=' + ','.join(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules), "
        "file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True)
    line = [x for x in proc.stderr.splitlines() if x.startswith("HEAVY=")]
    return [m for m in line[-1][6:].split(",") if m] if line else ["(probe failed)"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    exe = os.path.join(os.path.dirname(sys.executable), "ascendfactory-cli")
    cases = {
        "--help": ([exe, "--help"], 0.25),
        "train quickstart --dry-run": ([exe, "train", "cfgs/quickstart.yaml", "--dry-run"], 0.40),
    }
    floor = statistics.median(wall([sys.executable, "-c", "pass"], args.runs))
    print(f"python interpreter start-up floor: {floor * 1000:.0f} ms (median of {args.runs})")
    for name, (argv, goal) in cases.items():
        t = wall(argv, args.runs)
        med = statistics.median(t)
        print(
            f"{name:32s} median {med * 1000:6.0f} ms  min {min(t) * 1000:6.0f} ms  "
            f"goal < {goal * 1000:.0f} ms  "
            f"{'OK' if med < goal else 'OVER'}"
        )
    for name, a in (("--help", ["--help"]), ("dry run", ["train", "cfgs/quickstart.yaml", "--dry-run"])):
        mods = heavy_imports(a)
        print(f"heavy modules imported by {name}: {', '.join(mods) or 'none'}")


if __name__ == "__main__":
    main()
