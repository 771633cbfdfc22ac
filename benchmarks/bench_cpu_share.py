"""What each process of a CPU job gets of this machine when the job's processes run at once.

A CPU job of several processes (torchrun's ranks, one thread each) shares the machine's cores, caches and
memory: each rank multiplies slower than one process alone does. This prints, interleaved over `--repeats`
rounds, one process's fp32 matmul rate alone (`ascendfactory.speed.probe.matmul_flops`, the probe every
CPU row is read against) and each process's rate while `--procs` of them run it at once
(`probe.matmul_flops_side_by_side`), and the share: the CPU profile's `side_by_side`
(`ascendfactory/speed/devices.py`).

    python benchmarks/bench_cpu_share.py [--procs 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ascendfactory.speed import probe  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    alone, side = [], []
    for _ in range(a.repeats):
        alone.append(probe.matmul_flops(threads=1, repeats=9))
        side.append(probe.matmul_flops_side_by_side(a.procs))
    print(f"alone (GFLOP/s): {[round(x / 1e9, 1) for x in alone]}")
    print(f"{a.procs} side by side (GFLOP/s each): {[round(x / 1e9, 1) for x in side]}")
    alone_rate, side_rate = statistics.median(alone), statistics.median(side)
    print(
        f"median alone {alone_rate / 1e9:.1f}, side by side {side_rate / 1e9:.1f}: "
        f"side_by_side={side_rate / alone_rate:.3f}"
    )


if __name__ == "__main__":
    main()
