"""This machine's matmul rate and copy bandwidth, measured with torch (imported here, when called).

`matmul_flops(threads=1)`: the median FLOP/s of fp32 GEMMs of a transformer layer's shape (1024 x 768 by
768 x 2048, what bench_memory.py's model multiplies), over a few repeats after a warm-up, on `threads`
threads (torch.set_num_threads, restored after). `copy_bandwidth(threads=1)`: bytes/s read + written by
copying a 64 MiB fp32 tensor. Both are what the CPU profile's calibration is read against: the benchmark
measures them right before each run, so the load of other processes weighs on both alike.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


def _timed(fn: Any, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_flops(*, threads: int = 1, m: int = 1024, k: int = 768, n: int = 2048, repeats: int = 5) -> float:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(m, k), torch.randn(k, n)
        seconds = _timed(lambda: torch.mm(a, b), repeats)
    finally:
        torch.set_num_threads(before)
    return 2.0 * m * k * n / seconds


def copy_bandwidth(*, threads: int = 1, nbytes: int = 64 << 20, repeats: int = 5) -> float:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        src = torch.randn(nbytes // 4)
        dst = torch.empty_like(src)
        seconds = _timed(lambda: dst.copy_(src), repeats)
    finally:
        torch.set_num_threads(before)
    return 2.0 * nbytes / seconds
