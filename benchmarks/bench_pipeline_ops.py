"""The cost of one pipeline-schedule op on CPU ranks, without the compute: what the step-time model's
`DeviceSpeed.pipeline_op_s` holds for the CPU (`ascendfactory/speed/devices.py`).

Two gloo ranks (one thread each, as torchrun sets it) run torch.distributed.pipelining's schedules the way
the embedded trainer builds them (`engine/train/step.py`: `Schedule1F1B` over one stage per rank, and
`ScheduleInterleaved1F1B` over VPP chunks per rank), each chunk `x * w` on a (1, 256, 768) fp32 activation
(bench_memory.py's medium rows: the same bytes sent, next to no compute). A step runs 2 x micro-batches x
VPP chunk ops per rank (a forward and a backward of each chunk and micro-batch); the op's cost is the
median step over that count. The schedules alternate, `--repeats` times, so the machine's load weighs on
both.

    python benchmarks/bench_pipeline_ops.py [--repeats 3] [--steps 25] [--microbatches 2]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class Chunk(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(768))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out - target).pow(2).mean()


def _rank(rank: int, port: int, vpp: int, m: int, steps: int, out) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleInterleaved1F1B

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dev, pp = torch.device("cpu"), 2
    if vpp > 1:
        stages = [PipelineStage(Chunk(), c * pp + rank, pp * vpp, dev) for c in range(vpp)]
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=m, loss_fn=_loss)
    else:
        schedule = Schedule1F1B(PipelineStage(Chunk(), rank, pp, dev), n_microbatches=m, loss_fn=_loss)
    x, y = torch.randn(m, 256, 768), torch.randn(m, 256, 768)
    times = []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])
        times.append(time.perf_counter() - t0)
    if rank == 0:
        out.put(times)
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step_s(vpp: int, m: int, steps: int) -> float:
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_rank, args=(_port(), vpp, m, steps, queue), nprocs=2)
    return statistics.median(queue.get()[3:])  # past the first steps (shape inference, buffers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--microbatches", type=int, default=2)
    a = ap.parse_args()
    m = a.microbatches
    per_op: dict[int, list[float]] = {1: [], 3: []}
    for _ in range(a.repeats):
        for vpp in per_op:
            s = step_s(vpp, m, a.steps)
            per_op[vpp].append(s / (2 * m * vpp))
            print(f"vpp {vpp}: {2 * m * vpp:2d} chunk ops per rank, step {s * 1e3:6.1f} ms", flush=True)
    for vpp, ops in per_op.items():
        print(f"vpp {vpp}: median {statistics.median(ops) * 1e3:.2f} ms per chunk op over {len(ops)} runs")
    both = statistics.median(per_op[1] + per_op[3])
    print(f"pipeline_op_s (median of all): {both:.4g}")


if __name__ == "__main__":
    main()
