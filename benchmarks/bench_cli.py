"""Start-up cost of the CLI against the import floor of the libraries it is built on.

The commands run as fresh processes, interleaved round by round (the machine's noise hits all alike):

    floor       python -c "import typer, pydantic, rich, yaml, jinja2"
    app floor   the floor, plus what any CLI on these libraries pays to run one command: a typer app with a
                `train` command of the same options, invoked, and one pydantic model validated (`import
                pydantic` alone loads none of pydantic's model machinery; typer 0.29 coerces every option
                through a pydantic TypeAdapter, so running any command loads it)
    --help      ascendfactory-cli --help
    dry run     ascendfactory-cli train cfgs/quickstart.yaml --dry-run     (stdout to a pipe)
    dry run 7B  the same on the mindspeed-llm qwen2.5-7b full-4k template (`config` writes it first, into a
                folder of its own: a missing input makes the plan read the experiment files beside it)

With `--baseline DIR` (another checkout, e.g. `git archive <rev> | tar -x -C DIR`), its two dry runs are
timed in the same rounds (PYTHONPATH pointing at it), so before and after share the machine's noise.

Prints each median (and min, max), the dry run's median as a ratio to the floor's (goal <= 1.5x) and to
the app floor's (what is ours; goal <= 1.2x), --help's median (goal < 150 ms), and whether torch /
transformers / matplotlib were imported (they must not be). The package is byte-compiled first, as `pip
install` does: with PYTHONDONTWRITEBYTECODE set, an editable checkout would otherwise be compiled from
source on every start.

With `--instructions`, each case instead runs once under valgrind's cachegrind (`--cache-sim=no`,
PYTHONHASHSEED=0) and the instructions it executed are printed: a count the machine's other load does not
change, where wall times on a shared machine move by tens of percent. The CLI keeps the compiled methods of
its dataclasses between runs (`ascendfactory/cli/_dataclass_code.py`); the warm-up round writes them, as a
user's first run does.

    python benchmarks/bench_cli.py [--runs 15] [--baseline DIR] [--instructions]
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RATIO_GOAL = 1.5
APP_RATIO_GOAL = 1.2
HELP_GOAL_S = 0.150
HEAVY = ("torch", "transformers", "matplotlib")


def once(argv: list[str], root: Path = REPO) -> float:
    env = {**os.environ, "PYTHONPATH": str(root)}
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def instructions(argv: list[str], root: Path = REPO) -> int:
    """The instructions `argv` executes (cachegrind's `I refs`), the interpreter's and libraries' included."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={tmp}/out", *argv],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
    found = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    if not found:
        raise SystemExit(f"no instruction count from valgrind for {argv}: {proc.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def count_instructions(cases: dict[str, tuple[list[str], Path]]) -> None:
    """Each case once under cachegrind; the dry runs' counts against the app floor's."""
    counts = {name: instructions(argv, root) for name, (argv, root) in cases.items()}
    for name, n in counts.items():
        print(f"{name:20s} {n / 1e6:9.1f}M instructions")
    for name, n in counts.items():
        if "dry run" in name:
            ratio = n / counts["app floor"]
            verdict = "OK" if ratio <= APP_RATIO_GOAL else "OVER"
            print(f"{name} / app floor: {ratio:.2f}x   goal <= {APP_RATIO_GOAL}x   {verdict}")


APP_FLOOR = """
import typer, pydantic, rich, yaml, jinja2

class Experiment(pydantic.BaseModel):
    backend: str = "torch"

app = typer.Typer()

@app.callback()
def group() -> None: ...

@app.command()
def train(args: list[str], dry_run: bool = False, fmt: str = "text", verbose: bool = False) -> None:
    Experiment.model_validate({"backend": "torch"})

app(["train", "exp.yaml", "--dry-run"], standalone_mode=False)
"""


def template_7b(root: Path, exe: str) -> str:
    """The mindspeed-llm qwen2.5-7b full-4k experiment as `config` writes it, alone in a temporary folder."""
    path = Path(tempfile.mkdtemp(prefix="bench_cli_7b_")) / "qwen2.5-7b-full-4k.yaml"
    args = ["config", "--backend=mindspeed-llm", "--af_model_name=qwen2.5-7b", "--exp_name=full-4k"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run(
        [exe, *args, f"--output_file_path={path}", "--force"],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    return str(path)


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
        f"{name:20s} median {statistics.median(times) * 1000:6.0f} ms   "
        f"min {min(times) * 1000:5.0f}   max {max(times) * 1000:5.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--baseline", type=Path, help="another checkout whose dry runs are timed alongside")
    ap.add_argument("--instructions", action="store_true", help="count instructions under valgrind instead")
    args = ap.parse_args()
    if args.instructions and not shutil.which("valgrind"):
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    exe = os.path.join(os.path.dirname(sys.executable), "ascendfactory-cli")
    roots = {"": REPO, **({"baseline ": args.baseline.resolve()} if args.baseline else {})}
    cases: dict[str, tuple[list[str], Path]] = {
        "floor": ([sys.executable, "-c", "import typer, pydantic, rich, yaml, jinja2"], REPO),
        "app floor": ([sys.executable, "-c", APP_FLOOR], REPO),
        "--help": ([exe, "--help"], REPO),
    }
    for tag, root in roots.items():
        compileall.compile_dir(str(root / "ascendfactory"), quiet=1)
        cases[f"{tag}dry run"] = ([exe, "train", "cfgs/quickstart.yaml", "--dry-run"], root)
        cases[f"{tag}dry run 7B"] = ([exe, "train", template_7b(root, exe), "--dry-run"], root)
    for argv, root in cases.values():  # warm the page cache (and the CLI's kept dataclass code)
        once(argv, root)
    if args.instructions:
        return count_instructions(
            {n: ([sys.executable, *c[0]] if c[0][0] == exe else c[0], c[1]) for n, c in cases.items()}
        )
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (argv, root) in cases.items():
            times[name].append(once(argv, root))
    print(f"{args.runs} interleaved rounds on {os.cpu_count()} cores")
    for name in cases:
        print(describe(name, times[name]))
    floor, app_floor, help_s = (statistics.median(times[n]) for n in ("floor", "app floor", "--help"))
    print(f"app floor / floor: {app_floor / floor:.2f}x   (a one-command typer app with a pydantic model)")
    for name in cases:
        if "dry run" in name:
            ratio = statistics.median(times[name]) / floor
            verdict = "OK" if ratio <= RATIO_GOAL else "OVER"
            print(
                f"{name} / floor: {ratio:.2f}x   goal <= {RATIO_GOAL}x   {verdict}   "
                f"/ app floor: {statistics.median(times[name]) / app_floor:.2f}x"
            )
    print(
        f"--help: {help_s * 1000:.0f} ms   goal < {HELP_GOAL_S * 1000:.0f} ms   "
        f"{'OK' if help_s < HELP_GOAL_S else 'OVER'}"
    )
    for name, a in (("--help", ["--help"]), ("dry run", ["train", "cfgs/quickstart.yaml", "--dry-run"])):
        print(f"heavy modules imported by {name}: {', '.join(heavy_imports(a)) or 'none'}")


if __name__ == "__main__":
    main()
