"""What one device does per second, for the step-time model (`speed.model.predict`).

Each `DeviceSpeed` holds figures of two kinds, and says which is which:

- measured or published: the dense matmul rate at each precision (`matmul_flops`: FLOP/s of a large GEMM as
  measured, else the datasheet peak times the ratio measured on the H200, said so in `source`), the
  memory bandwidth (the optimizer step is bound by it) and the link bandwidths: `intra_bandwidth` for
  tensor / pipeline / data-parallel traffic inside a node, `inter_bandwidth` across nodes (bytes/s a rank
  sends, effective);
- measured where said: `launch_s`, the cost of one operator call (the CPU's by
  benchmarks/bench_step_ops.py --launch), and `gemm_table`, GEMM rates by shape;
- calibrated on recorded runs of the device (`speed.calibrate` fits them; `recorded/<device>.yaml` holds
  the runs, each with its date and commit): `efficiency` (the share of the GEMM rate the step's GEMMs
  reach), `launch_s` where none was measured (the H200's, from its quickstart run), `step_overhead_s` (per
  iteration), `layer_overhead_s` (the CPU's, per layer and micro-batch: what the counted work misses at its
  calibrated shape); and, where measured runs had communication, `intra_bandwidth`. Which of them a
  device's runs determine is listed in its recorded file (`fit:`); the others keep the values written
  here. `calibration_error` is the largest |predicted / measured - 1| over those runs; `calibrated_on`
  how many there were.

A device without recorded runs of its own (every Ascend NPU here: none was lent to this project) borrows
the H200's calibrated constants; its `source` says so and the estimate prints it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from ascendfactory.metrics.hardware import peak_for
from ascendfactory.speed.work import Gemm

# The H200 figures (the project's GPU run, shared method in benchmarks/: 2026-11-25, project at 776fd04,
# torch 2.11 + CUDA 13.0): an 8192^3 bf16 matmul ran at 796 TFLOP/s against the 989 TFLOP/s datasheet peak.
H200_MATMUL_BF16 = 796e12
MATMUL_OF_PEAK = H200_MATMUL_BF16 / 989e12  # the measured share of the datasheet peak a large GEMM reaches


@dataclass(frozen=True)
class DeviceSpeed:
    name: str
    matmul_flops: dict[str, float]  # precision (bf16 | fp16 | fp32) -> FLOP/s of a large dense matmul
    memory_bandwidth: float  # bytes/s
    intra_bandwidth: float  # bytes/s a rank moves inside a node (TP, PP, DP collectives), effective
    inter_bandwidth: float  # bytes/s across nodes, effective
    latency_s: float  # per collective or point-to-point message
    efficiency: float  # calibrated: the share of the GEMM rate (`gemm_call_s`) the step's GEMMs reach
    step_overhead_s: float  # calibrated: seconds per iteration besides the step's counted work
    # seconds per operator the step calls (`speed.work.operators`): the host's dispatch and Python around
    # it (CPU: measured by benchmarks/bench_step_ops.py --launch; else calibrated)
    launch_s: float
    source: str
    # calibrated (CPU): seconds per layer and micro-batch beyond the counted work (`speed.model`)
    layer_overhead_s: float = 0.0
    calibration_error: float | None = None  # the largest |predicted / measured - 1| on the recorded runs
    calibrated_on: int = 0
    threads_per_process: int = 1  # CPU only: the matmul rate is one thread's, times this
    # the hidden sizes of the recorded runs: a model under the smallest gets no figure, one over twice the
    # largest an extrapolated one (`speed.model.predict`)
    calibrated_hidden: tuple[int, int] | None = None
    notes: tuple[str, ...] = field(default=())
    # measured where stated: seconds per op of a pipeline schedule (one model chunk's forward or backward of
    # one micro-batch: torch.distributed.pipelining's bookkeeping and the send / receive around it, no
    # compute), else the collective latency
    pipeline_op_s: float | None = None
    gloo: bool = False  # collectives by gloo (the CPU): no reduce-scatter of its own (`speed.model`)
    # a GPU / NPU: the host queues kernels ahead of the device, so a kernel costs its own time or its
    # launch, whichever is longer (`speed.model`); the CPU computes and dispatches in one thread, in turn
    async_launch: bool = False
    # measured GEMM rates by shape (CPU): (m, k, n, FLOP/s over `matmul_flops`'s), interpolated in log m,
    # log k, log n (`gemm_rate`); None: every GEMM at the large-GEMM rate
    gemm_table: tuple[tuple[int, int, int, float], ...] | None = None
    # the matmul rate measured beside `launch_s` (CPU): a run whose probe read less (other processes' load)
    # pays its launches slower in proportion (`speed.calibrate.device_for`), as it pays `tp_dispatch_*` and
    # `dp_step_s`
    launch_flops: float | None = None
    # measured where stated (CPU: benchmarks/bench_parallel_overheads.py): what tensor parallelism costs the
    # embedded trainer besides its collectives, per step and per layer and micro-batch: its TP layers run on
    # DTensor, whose every operator goes through DTensor's Python dispatch (sharding propagation,
    # redistribution) before the local kernel; 0 where not measured (said in `notes`)
    tp_dispatch_step_s: float = 0.0
    tp_dispatch_layer_s: float = 0.0
    # measured where stated (CPU: the same benchmark): what a data-parallel step costs the embedded trainer
    # besides its gradient all-reduce, per step (its other collectives, each rank waiting for the slower)
    dp_step_s: float = 0.0
    # measured where stated (CPU: `probe.matmul_flops_side_by_side`): the share of one process's matmul rate
    # each process gets while the job's processes on the machine run at once (they share its cores, caches
    # and memory); the compute, memory-bound work and launches of a job of more than one process run at it
    side_by_side: float = 1.0

    @property
    def op_s(self) -> float:
        """Seconds per pipeline schedule op: the measured figure, else the collective latency."""
        return self.latency_s if self.pipeline_op_s is None else self.pipeline_op_s

    def rate(self, precision: str) -> float:
        """FLOP/s of a large matmul at `precision` (16-bit falls back to bf16, anything else to fp32)."""
        key = precision if precision in self.matmul_flops else ("bf16" if "16" in precision else "fp32")
        return self.matmul_flops.get(key) or max(self.matmul_flops.values())

    def gemm_rate(self, m: int, k: int, n: int, precision: str) -> float:
        """FLOP/s of an (m x k) @ (k x n) GEMM at `precision`: the large-GEMM rate times the measured table's
        ratio at that shape (trilinear in log2 of each dimension, clamped to the table's range), times the
        threads and the calibrated efficiency."""
        rate = self.rate(precision) * self.threads_per_process * self.efficiency
        if self.gemm_table:
            rate *= _interpolate(self.gemm_table, (m, k, n))
        return rate

    def gemm_call_s(self, g: Gemm, precision: str) -> float:
        """Seconds of one call of `g` (all its batched GEMMs)."""
        return 2.0 * g.m * g.k * g.n * g.batch / self.gemm_rate(g.m, g.k, g.n, precision)

    def with_(self, **changes: object) -> DeviceSpeed:
        return replace(self, **changes)  # type: ignore[arg-type]


def _interpolate(table: tuple[tuple[int, int, int, float], ...], shape: tuple[int, int, int]) -> float:
    """The table's ratio at `shape`, trilinear in log2 of (m, k, n) between the grid's points, clamped."""
    axes: list[list[int]] = [sorted({int(row[i]) for row in table}) for i in range(3)]
    value = {(int(r[0]), int(r[1]), int(r[2])): float(r[3]) for r in table}
    brackets: list[tuple[tuple[int, float], tuple[int, float]]] = []
    for axis, size in zip(axes, shape):
        x = min(max(float(size), axis[0]), axis[-1])
        hi = next(i for i, a in enumerate(axis) if a >= x)
        lo = max(0, hi - 1) if axis[hi] > x else hi
        a, b = axis[lo], axis[hi]
        t = 0.0 if a == b else (math.log2(x) - math.log2(a)) / (math.log2(b) - math.log2(a))
        brackets.append(((a, 1 - t), (b, t)))
    total = 0.0
    for (m, wm), (k, wk), (n, wn) in itertools.product(*brackets):
        if wm * wk * wn:
            total += wm * wk * wn * value[(m, k, n)]
    return total


def _from_peak(
    name: str, peak_name: str, *, memory_bw: float, intra: float, inter: float, why: str
) -> DeviceSpeed:
    peak = peak_for(peak_name)
    assert peak is not None, peak_name  # the table below names only entries of metrics.hardware.PEAKS
    bf16 = peak.bf16_tflops * 1e12 * MATMUL_OF_PEAK
    h200 = DEVICES["h200"]
    return DeviceSpeed(
        name=name,
        matmul_flops={"bf16": bf16, "fp16": bf16, "fp32": bf16 / 8},
        memory_bandwidth=memory_bw,
        intra_bandwidth=intra,
        inter_bandwidth=inter,
        latency_s=h200.latency_s,
        efficiency=h200.efficiency,
        step_overhead_s=h200.step_overhead_s,
        launch_s=h200.launch_s,
        async_launch=True,
        source=(
            f"not measured: {peak.source} x {MATMUL_OF_PEAK:.3f} (the H200's measured matmul / peak); "
            f"fp32 at 1/8 of it; {why}; efficiency and overhead borrowed from the H200's calibration"
        ),
        calibration_error=None,
        calibrated_on=0,
    )


# Constants the calibration fits (`python -m ascendfactory.speed.calibrate` prints them; a unit test
# refits and holds them to these values): see recorded/cpu.yaml and recorded/h200.yaml.
DEVICES: dict[str, DeviceSpeed] = {
    "h200": DeviceSpeed(
        name="h200",
        matmul_flops={"bf16": H200_MATMUL_BF16, "fp16": H200_MATMUL_BF16, "fp32": 67e12},
        memory_bandwidth=4.8e12,
        intra_bandwidth=360e9,
        inter_bandwidth=50e9,
        latency_s=20e-6,
        efficiency=0.8772,
        step_overhead_s=0.0,
        launch_s=21.09e-6,
        async_launch=True,
        source=(
            "bf16 matmul measured (8192^3, 796 TFLOP/s; 2026-11-25, project at 776fd04); fp32 67 TFLOP/s, "
            "memory 4.8 TB/s, NVLink 900 GB/s both ways (360 GB/s taken as effective), 400 Gb/s "
            "InfiniBand per GPU: NVIDIA H200 datasheet, not measured"
        ),
        calibration_error=0.0,
        calibrated_on=2,
        calibrated_hidden=(64, 896),
        notes=(
            "H200: two recorded runs fit two constants exactly (the GEMMs' share of the measured matmul rate "
            "on the 0.5B shape, the per-operator launch cost on the quickstart): a fit; held-out figures of "
            "the same GPU run (0.5B and 1.5B shapes) are within 8%",
        ),
    ),
    "cpu": DeviceSpeed(
        name="cpu",
        # the medians of the probes bench_steptime.py took beside its 28 recorded runs (2026-11-28, nothing
        # else running): one thread's fp32 GEMM (1024 x 768 by 768 x 2048) and its copy bandwidth; gloo over
        # loopback between processes
        matmul_flops={"fp32": 87.8e9, "bf16": 87.8e9, "fp16": 87.8e9},
        memory_bandwidth=19.9e9,
        intra_bandwidth=457.1e6,
        inter_bandwidth=100e6,
        latency_s=100e-6,
        efficiency=0.9586,
        step_overhead_s=4.827e-3,
        # benchmarks/bench_step_ops.py --launch (the trainer on a hidden-16 model, next to no FLOPs), 5 runs
        # 2026-11-28 08:33 UTC, nothing else running: 5.58 to 6.18 us per operator, median 5.81 at a median
        # matmul probe of 87.9 GFLOP/s beside them
        launch_s=5.81e-6,
        launch_flops=87.9e9,
        # benchmarks/bench_parallel_overheads.py --repeats 5, 2026-11-28 09:29-09:33 UTC, nothing else
        # running: TP 2 and DP 2 against one process on a hidden-32 model at 2 and 8 layers (TP 2's runs
        # spread by 2x: 39 to 83 ms at 2 layers, 114 to 247 ms at 8; the medians are taken), at a median
        # probe of 89.0 GFLOP/s (scaled to `launch_flops` here)
        tp_dispatch_step_s=0.002001 * 89.0 / 87.9,
        tp_dispatch_layer_s=0.0214 * 89.0 / 87.9,
        dp_step_s=0.004528 * 89.0 / 87.9,
        # benchmarks/bench_cpu_share.py, 2026-11-28 09:20 UTC: two processes' matmul at once 87.0 GFLOP/s
        # each against 89.7 alone (medians of 5 rounds)
        side_by_side=0.969,
        source=(
            "one thread of the project's 2-core CPU machine, fp32 (matmul 87.8 GFLOP/s and copy 19.9 GB/s "
            "measured 2026-11-28 with nothing else running; gloo over loopback, its bandwidth calibrated)"
        ),
        calibration_error=0.227,
        calibrated_on=28,
        calibrated_hidden=(64, 768),
        gloo=True,
        # benchmarks/bench_pipeline_ops.py, 2026-11-28 (load average ~6): median 3.6 ms per chunk op (2.5 ms
        # with 1 chunk per rank, 4.7 ms with 3), the send / receive of a (1, 256, 768) activation included
        pipeline_op_s=3.6e-3,
        notes=(
            "CPU: fitted on 28 layouts measured on the otherwise idle 2-core machine (bench_memory.py's 16 "
            "at hidden 768 and 12 of models of hidden 64 to 384); another job on the same cores slows a step "
            "by more than the goal (docs/time-to-train.md)",
        ),
    ),
}
DEVICES["h100-80gb"] = _from_peak(
    "h100-80gb", "h100", memory_bw=3.35e12, intra=360e9, inter=50e9, why="memory 3.35 TB/s (datasheet)"
)
DEVICES["a100-80gb"] = _from_peak(
    "a100-80gb", "a100", memory_bw=2.0e12, intra=240e9, inter=25e9, why="memory 2.0 TB/s (datasheet)"
)
for _sku in ("910b1", "910b2", "910b3", "910b4"):
    DEVICES[f"ascend-{_sku}"] = _from_peak(
        f"ascend-{_sku}",
        f"ascend{_sku}",
        memory_bw=1.6e12,
        intra=150e9,
        inter=25e9,
        why="HBM 1.6 TB/s and HCCS 150 GB/s effective, 200 Gb/s RoCE per NPU (widely reported, not measured)",
    )

ALIASES = {"h100": "h100-80gb", "a100": "a100-80gb", "910b": "ascend-910b3", "ascend-910b": "ascend-910b3"}


def device_names() -> list[str]:
    return list(DEVICES)


def device_speed(name: str | None) -> DeviceSpeed | None:
    """The profile of `name` (memory_check.device's names: `ascend-910b3`, `h200`, `h100-80gb`, `cpu`)."""
    if not name:
        return None
    key = name.strip().lower().replace("_", "-")
    key = ALIASES.get(key, key)
    if key in DEVICES:
        return DEVICES[key]
    for alias in (f"ascend-{key}", key.replace("ascend", "ascend-")):
        if alias in DEVICES:
            return DEVICES[alias]
    parts = key.split("-")  # nvidia-smi's longer names: `h100-80gb-hbm3` -> h100-80gb
    for n in range(len(parts) - 1, 0, -1):
        shorter = ALIASES.get("-".join(parts[:n]), "-".join(parts[:n]))
        if shorter in DEVICES:
            return DEVICES[shorter]
    return None
