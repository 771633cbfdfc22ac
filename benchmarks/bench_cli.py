"""Start-up cost of the CLI against the import floor of the libraries it is built on.

Three commands run as fresh processes, interleaved round by round (the machine's noise hits all three
alike):

    floor     python -c "import typer, pydantic, rich, yaml, jinja2"
    --help    ascendfactory-cli --help
    dry run   ascendfactory-cli train cfgs/quickstart.yaml --dry-run     (stdout to a pipe)

Prints each median (and min, max), the dry run's median as a ratio to the floor's (goal <= 1.5x) and
--help's median (goal < 150 ms), and whether torch / transformers / matplotlib were imported (they must
not be). The package is byte-compiled first, as `pip install` does: with PYTHONDONTWRITEBYTECODE set, an
editable checkout would otherwise be compiled from source on every start.

    python benchmarks/bench_cli.py [--runs 15]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RATIO_GOAL = 1.5
HELP_GOAL_S = 0.150
HEAVY = ("torch", "transformers", "matplotlib")


def once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def heavy_imports(args: list[str]) -> list[str]:
    code = (
        "import sys; from ascendfactory.cli.app import main; rc = main(sys.argv[1:]); "
        f"print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True)
    line = [x for x in proc.stderr.splitlines() if x.startswith("HEAVY=")]
    return [m for m in line[-1][6:].split(",") if m] if line else ["(probe failed)"]


def describe(name: str, times: list[float]) -> str:
    return (
        f"{name:10s} median {statistics.median(times) * 1000:6.0f} ms   "
        f"min {min(times) * 1000:5.0f}   max {max(times) * 1000:5.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    compileall.compile_dir(str(REPO / "ascendfactory"), quiet=1)
    exe = os.path.join(os.path.dirname(sys.executable), "ascendfactory-cli")
    cases = {
        "floor": [sys.executable, "-c", "import typer, pydantic, rich, yaml, jinja2"],
        "--help": [exe, "--help"],
        "dry run": [exe, "train", "cfgs/quickstart.yaml", "--dry-run"],
    }
    for argv in cases.values():  # warm the page cache
        once(argv)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, argv in cases.items():
            times[name].append(once(argv))
    print(f"{args.runs} interleaved rounds on {os.cpu_count()} cores")
    for name in cases:
        print(describe(name, times[name]))
    floor, dry, help_s = (statistics.median(times[n]) for n in ("floor", "dry run", "--help"))
    ratio = dry / floor
    print(
        f"dry run / floor: {ratio:.2f}x   goal <= {RATIO_GOAL}x   {'OK' if ratio <= RATIO_GOAL else 'OVER'}"
    )
    print(
        f"--help: {help_s * 1000:.0f} ms   goal < {HELP_GOAL_S * 1000:.0f} ms   "
        f"{'OK' if help_s < HELP_GOAL_S else 'OVER'}"
    )
    for name, a in (("--help", ["--help"]), ("dry run", ["train", "cfgs/quickstart.yaml", "--dry-run"])):
        print(f"heavy modules imported by {name}: {', '.join(heavy_imports(a)) or 'none'}")


if __name__ == "__main__":
    main()
