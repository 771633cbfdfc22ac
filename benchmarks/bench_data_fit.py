"""The data-fit check on a large sft dataset: `engine/data/fit.check` against the I/O floor.

A synthetic `<prefix>_packed_labels_document` of N samples (default 1,000,000; lengths 32-224 tokens, a
prompt of -100 then the answer, int32 as preprocess writes labels) is written once to a temporary
directory; then, interleaved round by round:

    floor   np.fromfile(<labels>.bin) and one `!= -100` count over it (reading every token once)
    check   fit.check(prefix, seq_length=128): first/last answer position per sample, the counts

Prints each median (min, max) in seconds, the check's ratio to the floor (goal <= 3x), and the counts.
The page cache is warm for both after the first round (the floor reads the same file).

    python benchmarks/bench_data_fit.py [--samples 1000000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascendfactory.engine.data import fit  # noqa: E402
from ascendfactory.engine.data.indexed import IndexedDatasetBuilder, bin_path  # noqa: E402

RATIO_GOAL = 3.0


def write(prefix: str, samples: int, seed: int = 0) -> int:
    """Labels of `samples` sequences, written in blocks; returns the token count."""
    rng = np.random.default_rng(seed)
    total = 0
    with IndexedDatasetBuilder(prefix + fit.LABELS_SUFFIX, np.int32) as b:
        for lo in range(0, samples, 100_000):
            n = min(100_000, samples - lo)
            lengths = rng.integers(32, 225, n)
            prompts = (lengths * rng.uniform(0.2, 0.9, n)).astype(np.int64)
            flat = rng.integers(0, 32000, int(lengths.sum()), dtype=np.int32)
            pos = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            flat[pos < np.repeat(prompts, lengths)] = fit.IGNORE_INDEX
            b.add_documents(flat, lengths)
            total += len(flat)
        b.finalize()
    return total


def floor(prefix: str) -> int:
    data = np.fromfile(bin_path(prefix + fit.LABELS_SUFFIX), dtype=np.int32)
    return int(np.count_nonzero(data != fit.IGNORE_INDEX))


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seq-length", type=int, default=128)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prefix = str(Path(tmp) / "big")
        t, tokens = timed(write, prefix, args.samples)
        print(f"wrote {args.samples:,} samples, {tokens:,} label tokens in {t:.1f}s")
        times: dict[str, list[float]] = {"floor": [], "check": []}
        report = None
        for _ in range(args.runs):
            times["floor"].append(timed(floor, prefix)[0])
            t, report = timed(fit.check, prefix, args.seq_length)
            times["check"].append(t)
        for name, ts in times.items():
            print(f"{name:6s} median {statistics.median(ts):.3f}s (min {min(ts):.3f}, max {max(ts):.3f})")
        ratio = statistics.median(times["check"]) / statistics.median(times["floor"])
        verdict = "ok" if ratio <= RATIO_GOAL else "MISSED"
        print(f"check / floor: {ratio:.2f}x (goal <= {RATIO_GOAL:g}x) {verdict}")
        print(f"report at seq-length {args.seq_length}: {report.describe()}")


if __name__ == "__main__":
    main()
