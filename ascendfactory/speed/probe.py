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


def _probe_worker(start: Any, out: Any, rounds: int) -> None:
    start.wait()
    out.put(statistics.median(matmul_flops(threads=1) for _ in range(rounds)))


def matmul_flops_side_by_side(procs: int = 2, *, rounds: int = 5) -> float:
    """The median FLOP/s one process's `matmul_flops` reaches while `procs` processes run it at once (one
    thread each, started together): what each rank of a `procs`-process CPU job gets, against what one
    process alone gets (`matmul_flops`), when they share the machine's cores, caches and memory."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_probe_worker, args=(start, out, rounds)) for _ in range(procs)]
    for w in workers:
        w.start()
    rates = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
    return statistics.median(rates)


# The GEMM table's dimensions (`gemm_table`): the token counts, hidden, head, MLP and vocabulary widths of
# the models the CPU runs (a head's width 16 to a vocabulary slice's 4096; larger ones take 4096's rate).
GEMM_DIMS = (16, 64, 256, 1024, 4096)
REFERENCE = (1024, 768, 2048)  # (m, k, n) of `matmul_flops`, the rate the table is relative to


def gemm_seconds(m: int, k: int, n: int, *, repeats: int = 5) -> float:
    """The least seconds of one fp32 (m x k) @ (k x n) on the current threads over `repeats` (the least:
    the time with the least interference from other processes, for a ratio between shapes that their load
    does not move)."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    torch.mm(a, b, out=out)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - t0)
    return min(times)


def gemm_table(*, threads: int = 1, dims: tuple[int, ...] = GEMM_DIMS) -> list[list[float]]:
    """[m, k, n, rate / reference rate] for every (m, k, n) of `dims`^3: each GEMM's FLOP/s over the FLOP/s
    of the reference GEMM (`REFERENCE`, `matmul_flops`'s shape) timed right beside it, so that the load of
    other processes cancels; the cost of a call that multiplies nothing (1 x 1 x 1) is taken off each time
    (it is the per-operator cost the step-time model counts apart)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        call = gemm_seconds(1, 1, 1, repeats=50)
        rows = []
        for m in dims:
            for k in dims:
                for n in dims:
                    reference = gemm_seconds(*REFERENCE)
                    seconds = max(gemm_seconds(m, k, n) - call, 1e-9)
                    ratio = (2.0 * m * k * n / seconds) / (
                        2.0 * REFERENCE[0] * REFERENCE[1] * REFERENCE[2] / reference
                    )
                    rows.append([m, k, n, round(ratio, 4)])
    finally:
        torch.set_num_threads(before)
    return rows
