"""What one device does per second, for the step-time model (`speed.model.predict`).

Each `DeviceSpeed` holds figures of two kinds, and says which is which:

- measured or published: the dense matmul rate at each precision (`matmul_flops`: FLOP/s of a large GEMM as
  measured, else the datasheet peak times the ratio measured on the H200, said so in `source`), the
  memory bandwidth (the optimizer step is bound by it) and the link bandwidths: `intra_bandwidth` for
  tensor / pipeline / data-parallel traffic inside a node, `inter_bandwidth` across nodes (bytes/s a rank
  sends, effective);
- calibrated on recorded runs of the device (`speed.calibrate` fits them; `recorded/<device>.yaml` holds
  the runs, each with its date and commit): `efficiency` (the share of the matmul rate a training step
  achieves), `step_overhead_s` (per iteration) and `layer_overhead_s` (per layer and micro-batch): kernel
  launches, Python and memory-bound work, what dominates a tiny model; and, where measured runs had
  communication, `intra_bandwidth`. Which of them a device's runs determine is listed in its recorded file
  (`fit:`); the others keep the values written here. `calibration_error` is the
  largest |predicted / measured - 1| over those runs; `calibrated_on` how many there were.

A device without recorded runs of its own (every Ascend NPU here: none was lent to this project) borrows
the H200's calibrated constants; its `source` says so and the estimate prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ascendfactory.metrics.hardware import peak_for

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
    efficiency: float  # calibrated: achieved share of the matmul rate in a training step
    step_overhead_s: float  # calibrated: seconds per iteration besides the FLOPs (optimizer launches, loop)
    layer_overhead_s: float  # calibrated: seconds per layer per micro-batch besides the FLOPs
    source: str
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

    @property
    def op_s(self) -> float:
        """Seconds per pipeline schedule op: the measured figure, else the collective latency."""
        return self.latency_s if self.pipeline_op_s is None else self.pipeline_op_s

    def rate(self, precision: str) -> float:
        """FLOP/s of a large matmul at `precision` (16-bit falls back to bf16, anything else to fp32)."""
        key = precision if precision in self.matmul_flops else ("bf16" if "16" in precision else "fp32")
        return self.matmul_flops.get(key) or max(self.matmul_flops.values())

    def with_(self, **changes: object) -> DeviceSpeed:
        return replace(self, **changes)  # type: ignore[arg-type]


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
        layer_overhead_s=h200.layer_overhead_s,
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
        efficiency=0.4289,
        step_overhead_s=0.04223,
        layer_overhead_s=0.0,
        source=(
            "bf16 matmul measured (8192^3, 796 TFLOP/s; 2026-11-25, project at 776fd04); fp32 67 TFLOP/s, "
            "memory 4.8 TB/s, NVLink 900 GB/s both ways (360 GB/s taken as effective), 400 Gb/s "
            "InfiniBand per GPU: NVIDIA H200 datasheet, not measured"
        ),
        calibration_error=0.0,
        calibrated_on=2,
        calibrated_hidden=(64, 896),
        notes=(
            "H200: two recorded runs fit two constants (efficiency, step overhead) exactly; its error is a "
            "fit, "
            "not a validation",
        ),
    ),
    "cpu": DeviceSpeed(
        name="cpu",
        # the medians of the probes bench_steptime.py took beside its 16 runs (2026-11-27): one thread's fp32
        # GEMM (1024 x 768 by 768 x 2048) and its copy bandwidth; gloo over loopback between processes
        matmul_flops={"fp32": 64.8e9, "bf16": 64.8e9, "fp16": 64.8e9},
        memory_bandwidth=13.1e9,
        intra_bandwidth=326.6e6,
        inter_bandwidth=100e6,
        latency_s=100e-6,
        efficiency=1.2058,
        step_overhead_s=0.0,
        layer_overhead_s=0.1650,
        source=(
            "one thread of the project's 2-core CPU machine, fp32 (matmul 64.8 GFLOP/s and copy 13.1 GB/s "
            "measured 2026-11-27 at d2c3378; gloo over loopback, its bandwidth calibrated)"
        ),
        calibration_error=0.238,
        calibrated_on=16,
        calibrated_hidden=(768, 768),
        gloo=True,
        # benchmarks/bench_pipeline_ops.py, 2026-11-28 (load average ~6): median 3.6 ms per chunk op (2.5 ms
        # with 1 chunk per rank, 4.7 ms with 3), the send / receive of a (1, 256, 768) activation included
        pipeline_op_s=3.6e-3,
        notes=(
            "CPU: fitted on 16 layouts of bench_memory.py (hidden 768) measured while other work shared the "
            "2 cores, every one within 24% (leave-one-out 30%); the per-layer term is that model's",
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
