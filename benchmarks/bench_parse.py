"""Parse speed of `ascendfactory.metrics.parse_file` against a `grep -oP | awk` pipeline.

Generates a Megatron/MindSpeed-LLM run log of `--size-mb` (default 1024) in a temporary directory
(deleted afterwards), then runs, `--runs` times and interleaved (grep, ours, grep, ours, ...: the
machine may be shared, so no method gets a quiet or a busy stretch to itself):

- grep|awk: `grep -oP 'elapsed time per iteration \\(ms\\): \\K[0-9.]+|lm loss: \\K[-+0-9.Ee]+'`
  piped into `awk` pairing the two values per line (the same two fields);
- iter_columns([elapsed, lm loss]): the columnar scanner (`ascendfactory.metrics.columns`, what
  `logs plot` uses): numpy over blocks, the file's segments on up to 2 processes (grep | awk is two
  processes too), the same values as the parser, streamed piece by piece;
- parse_file(fields=[elapsed, lm loss]): our record parser reading only those two labels;
- parse_file (all fields): every `label: value` of every line, as `logs summary` uses.

It reports the median seconds and MB/s of each, the ratio of the medians against grep|awk, the
spread (min-max) and the load average seen while measuring. Each Python run is a child process, so
its peak RSS (ru_maxrss) is the parser's own; the same is measured on a file 1/8 the size to show
memory does not grow with the file.

    python benchmarks/bench_parse.py               # 1 GB, 3 runs (a few minutes)
    python benchmarks/bench_parse.py --size-mb 100 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ELAPSED, LOSS = "elapsed time per iteration (ms)", "lm loss"
GREP_PATTERN = r"elapsed time per iteration \(ms\): \K[0-9.]+|lm loss: \K[-+0-9.Ee]+"
AWK_PROGRAM = "NR%2==1{e=$1;next}{print e, $1}"
LINE = (
    " [2025-01-01 {h:02d}:{m:02d}:{s:02d}] iteration {i:8d}/ 9999999 | consumed samples: {c:12d} | "
    "elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | "
    "learning rate: 1.250000E-05 | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 | "
    "grad norm: {gn:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
)


def generate(path: Path, size_mb: int) -> int:
    """Write about `size_mb` MB of iteration lines (plus a warning every 500 lines); returns lines."""
    rng = random.Random(0)
    target, written, i = size_mb * 1024 * 1024, 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            block = []
            for _ in range(2000):
                i += 1
                t = i * 2
                block.append(
                    LINE.format(
                        h=t // 3600 % 24,
                        m=t // 60 % 60,
                        s=t % 60,
                        i=i,
                        c=512 * i,
                        ms=1200 + rng.random() * 50,
                        tf=180 + rng.random(),
                        loss=3.0 * rng.random() + 1.0,
                        gn=rng.random() * 2,
                    )
                )
                if i % 500 == 0:
                    block.append(
                        "[W compiler_depend.ts:1] Warning: something on stderr (function operator())\n"
                    )
            text = "".join(block)
            f.write(text)
            written += len(text)
    return i


def time_grep(path: Path) -> float:
    start = time.perf_counter()
    grep = subprocess.Popen(["grep", "-oP", GREP_PATTERN, str(path)], stdout=subprocess.PIPE)
    awk = subprocess.run(
        ["awk", AWK_PROGRAM], stdin=grep.stdout, stdout=subprocess.DEVNULL, check=True, timeout=3600
    )
    grep.stdout.close()  # type: ignore[union-attr]
    if grep.wait(timeout=3600) not in (0, 1) or awk.returncode:
        raise RuntimeError("grep | awk failed")
    return time.perf_counter() - start


def worker(mode: str, path: str) -> None:
    """Child process: parse, print seconds, record count and peak RSS (its own and its workers') as JSON."""
    from ascendfactory.metrics import parse_file
    from ascendfactory.metrics.columns import iter_columns

    fields = [ELAPSED, LOSS] if mode != "all" else None
    start = time.perf_counter()
    n = 0
    if mode == "columns":
        for piece in iter_columns(path, [ELAPSED, LOSS]):
            n += len(piece)
            piece.values[LOSS].sum()
    else:
        for rec in parse_file(path, "megatron", fields=fields):
            n += 1
            rec.metrics.get(LOSS)
    seconds = time.perf_counter() - start
    rss_kb = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    print(json.dumps({"seconds": seconds, "records": n, "max_rss_mb": rss_kb / 1024}))


def time_python(mode: str, path: Path) -> dict[str, float]:
    res = subprocess.run(
        [sys.executable, __file__, "--worker", mode, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-full", action="store_true", help="skip the all-fields parse")
    ap.add_argument("--worker", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    if shutil.which("grep") is None or shutil.which("awk") is None:
        print("grep and awk are needed for the baseline", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="af_bench_", dir="/tmp"))
    try:
        big, small = tmp / "run_log.txt", tmp / "run_log_small.txt"
        lines = generate(big, args.size_mb)
        generate(small, max(1, args.size_mb // 8))
        mb = big.stat().st_size / 1e6
        print(f"log: {mb:,.0f} MB, {lines:,} iteration lines, {os.cpu_count()} CPUs")
        time_grep(big)  # warm the page cache
        modes = [("columns", "iter_columns fields=2"), ("fields", "parse_file fields=2")] + (
            [] if args.skip_full else [("all", "parse_file all fields")]
        )
        seconds: dict[str, list[float]] = {"grep|awk (2 fields)": []}
        rss: dict[str, list[float]] = {}
        loads: list[float] = []
        for run in range(args.runs):
            loads.append(os.getloadavg()[0])
            seconds["grep|awk (2 fields)"].append(time_grep(big))
            for mode, label in modes:
                res = time_python(mode, big)
                if res["records"] != lines:
                    raise RuntimeError(f"{label}: expected {lines} records, got {res['records']}")
                seconds.setdefault(label, []).append(res["seconds"])
                rss.setdefault(label, []).append(res["max_rss_mb"])
            print(
                f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in seconds.items()),
                file=sys.stderr,
                flush=True,
            )
        loads.append(os.getloadavg()[0])
        small_rss = {label: time_python(mode, small)["max_rss_mb"] for mode, label in modes}
        grep_s = statistics.median(seconds["grep|awk (2 fields)"])
        print(
            f"{'method':<24}{'median s':>10}{'min-max s':>13}{'MB/s':>8}{'vs grep':>9}"
            f"{'peak RSS MB':>13}{'(1/8 file)':>12}"
        )
        for label, runs in seconds.items():
            sec = statistics.median(runs)
            spread = f"{min(runs):.2f}-{max(runs):.2f}"
            rss_txt = (
                f"{max(rss[label]):13.0f}{small_rss[label]:12.0f}" if label in rss else f"{'-':>13}{'-':>12}"
            )
            print(f"{label:<24}{sec:10.2f}{spread:>13}{mb / sec:8.1f}{grep_s / sec:8.2f}x{rss_txt}")
        print(
            f"load average (1 min) while measuring: {min(loads):.2f}-{max(loads):.2f} "
            f"(median {statistics.median(loads):.2f}) on {os.cpu_count()} CPUs"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
