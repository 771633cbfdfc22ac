"""The step time of a training layout, before it runs: `predict(workload, device) -> StepPrediction`.

One iteration of a Megatron-style job on `world = TP x PP x DP x CP` devices, each part a formula:

- compute: each GEMM one device runs (`speed.work.gemms`: the layers' projections, the attention kernel and
  the output layer, forward, data and weight gradients, what recompute redoes, no weight gradient for
  LoRA's frozen weights; their FLOPs add up to Megatron's formula, `speed.flops`) at the device's rate for
  that GEMM's shape (`DeviceSpeed.gemm_rate`: the CPU's measured table, elsewhere the large-GEMM rate) x
  `device.efficiency`;
- pipeline bubble (1F1B): (compute + memory + launch) x (PP - 1) / (VPP x micro-batches);
- memory: the bytes the memory-bound work moves (norms, rotary, SwiGLU, residual adds, SDPA's inputs and
  output, the cross-entropy over the vocabulary in fp32: `speed.work.elementwise_bytes`) over the device's
  memory bandwidth;
- launch: the operators the step calls (`speed.work.operators`, counted from the trainer) x
  `device.launch_s`: what a tiny model's step is made of. On the CPU (one thread computes and dispatches)
  compute, memory and launch add up; on a GPU / NPU (`device.async_launch`) the host queues kernels ahead, so
  each GEMM costs its time or its launch, whichever is longer, and the short memory-bound kernels their
  bytes' time or their launches';
- overhead: `device.step_overhead_s` per iteration (calibrated, 0 where the runs need none);
- tensor parallel: 4 all-reduces of s/CP x b x h activations per layer and micro-batch (2 forward, 2
  backward; sequence parallel moves the same bytes as reduce-scatter + all-gather), 2(t-1)/t of each on the
  wire, plus the device's latency per collective; for the embedded trainer (its TP layers are DTensor
  modules) also DTensor's dispatch, per step and per layer and micro-batch, where the device has it
  measured (`DeviceSpeed.tp_dispatch_step_s`, `tp_dispatch_layer_s`);
- pipeline parallel: each micro-batch's activations forward and their gradients backward across a stage
  boundary, once per model chunk (the interleaved schedule sends VPP times as often), and per such chunk
  op the schedule's own cost (`device.pipeline_op_s`: measured on the CPU, the latency elsewhere);
- data parallel: the gradient all-reduce (2(d-1)/d of the local gradients; with the distributed optimizer a
  reduce-scatter of gradients and an all-gather of parameters, the same bytes), zero when
  `overlap_grad_reduce` hides it in the backward; for the embedded trainer also what a data-parallel step
  costs besides it, where the device has it measured (`DeviceSpeed.dp_step_s`). Over gloo (`device.gloo`:
  the CPU) the distributed optimizer moves more: gloo has no in-place reduce-scatter, so the embedded
  trainer all-reduces the whole gradient buffer and then all-gathers the updated weights ((d-1)/d of them on
  the wire), copying them into the gather buffer and out again (`engine/train/distopt.py`, `reduce_grads` /
  `all_gather_params`): an all-reduce and an all-gather, plus three passes over the weights at memory
  bandwidth;
- optimizer: Adam reads and writes the local states once, bytes / the device's memory bandwidth (16-bit
  Megatron: 2 + 4 + 12 bytes per parameter read and written, the embedded trainer's fp32 states 4 + 4 + 8;
  the distributed optimizer divides them by DP);
- links: inside a node at `intra_bandwidth`, across nodes (a group larger than the devices per node) at
  `inter_bandwidth`.

tokens/s per device = GBS x seq / step / world; the run's wall time = step x train iterations (start-up,
evaluation and checkpoint saves are not counted: said where it is printed).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from ascendfactory.speed import work
from ascendfactory.speed.devices import DeviceSpeed
from ascendfactory.speed.flops import megatron_flops

ACTIVATION_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# Adam's bytes read + written per trainable parameter in one step (weights, gradient, two moments; 16-bit
# Megatron also its fp32 master copy): the optimizer step is bound by memory bandwidth.
# The embedded trainer also reads its fp32 gradients for their norm and reads and writes them to clip
# (`engine/train/step.py`, `_foreach_norm` and `_foreach_mul_`): 3 x 4 bytes more.
OPTIMIZER_BYTES = {"megatron": 2 * (2 + 4 + 12), "embedded": 2 * (4 + 4 + 8) + 3 * 4}


@dataclass(frozen=True)
class Workload:
    """One training layout, every field as the framework's flags mean it."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    kv_channels: int
    vocab: int  # the tokenizer's; Megatron pads it to a multiple of vocab_divisible_by x TP
    seq: int
    mbs: int
    gbs: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    vpp: int = 1
    tied: bool = False
    swiglu: bool = True
    routed_experts: int = 1  # experts a token is routed to (MoE top-k); 1 for a dense model
    params: float | None = None  # all parameters (for gradients and the optimizer); None: counted here
    trainable: float = 1.0  # the trainable share of the parameters (LoRA: a few percent)
    recompute: str = "none"  # none | selective | full
    precision: str = "bf16"  # bf16 | fp16 | fp32
    engine: str = "megatron"  # megatron | embedded (fp32 weights and states, autocast)
    distributed_optimizer: bool = False
    overlap_grad_reduce: bool = False
    devices_per_node: int | None = None  # for which groups cross nodes; None: all in one node
    vocab_divisible_by: int = 128
    train_iters: int | None = None

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        return max(1, self.gbs // max(1, self.mbs * self.dp))

    @property
    def padded_vocab(self) -> int:
        multiple = max(1, self.vocab_divisible_by) * max(1, self.tp)
        return int(math.ceil(self.vocab / multiple) * multiple)

    def param_count(self) -> float:
        if self.params is not None:
            return self.params
        q, kv = self.heads * self.kv_channels, self.kv_heads * self.kv_channels
        attention = self.hidden * (q + 2 * kv) + q * self.hidden
        mlp = (3 if self.swiglu else 2) * self.hidden * self.ffn * self.routed_experts
        embedding = self.padded_vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * (attention + mlp + 2 * self.hidden) + embedding + self.hidden

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class StepPrediction:
    step_s: float
    parts: dict[str, float]  # compute, memory, launch, bubble, overhead, tp_comm, tp_dispatch, ... (seconds)
    flops: float  # the iteration's FLOPs by Megatron's formula (no recompute), the log's TFLOP/s numerator
    tokens_per_s_per_device: float
    tflops_per_device: float  # Megatron's FLOPs / step / world (the figure its log prints)
    run_s: float | None  # step x train iterations
    device: str
    calibration_error: float | None
    assumptions: tuple[str, ...]
    in_range: bool = True  # the model's shape near the recorded runs' (`DeviceSpeed.calibrated_hidden`)
    calibrated_hidden: tuple[int, int] | None = None  # the recorded runs' hidden sizes (smallest, largest)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _collective_s(nbytes: float, group: int, bandwidth: float, latency: float) -> float:
    """A ring all-reduce of `nbytes` over `group` ranks: 2(g-1)/g of it on the wire, plus the latency."""
    if group <= 1:
        return 0.0
    return 2 * (group - 1) / group * nbytes / bandwidth + latency


def _link(w: Workload, device: DeviceSpeed, span: int) -> float:
    """The bandwidth of a group spanning `span` consecutive ranks: across nodes when it exceeds a node."""
    per_node = w.devices_per_node or w.world
    return device.inter_bandwidth if span > per_node else device.intra_bandwidth


def predict(w: Workload, device: DeviceSpeed) -> StepPrediction:
    """The step time of `w` on `device` (module docstring)."""
    tokens = w.gbs * w.seq
    flops = megatron_flops(
        batch=w.gbs,
        seq=w.seq,
        layers=w.layers,
        hidden=w.hidden,
        ffn=w.ffn,
        heads=w.heads,
        kv_heads=w.kv_heads,
        kv_channels=w.kv_channels,
        padded_vocab=w.padded_vocab,
        swiglu=w.swiglu,
        routed_experts=w.routed_experts,
    )
    act = ACTIVATION_BYTES.get(w.precision, 2)
    calls = work.gemms(w)
    ops = work.operators(w)
    launch = device.launch_s
    layer_bytes, ce_bytes = work.elementwise_bytes(w, act)
    if device.async_launch:
        # the host queues kernels ahead of the device: a GEMM takes its own time or its launch, whichever is
        # longer; the many short memory-bound kernels take their bytes' time or their launches'
        compute = sum(g.count * max(device.gemm_call_s(g, w.precision), launch) for g in calls)
        # (shown as the launch part or the memory part, whichever is longer)
        small = max(0.0, ops - sum(g.count for g in calls)) * launch
        memory = ce_bytes / device.memory_bandwidth
        launches = 0.0
        if small >= layer_bytes / device.memory_bandwidth:
            launches = small
        else:
            memory += layer_bytes / device.memory_bandwidth
    else:
        # one CPU thread computes and dispatches in turn: the parts add up; the processes of a job on one
        # machine run side by side, each at the share of a lone process's rate the device has measured
        share = device.side_by_side if min(w.world, w.devices_per_node or w.world) > 1 else 1.0
        compute = sum(g.count * device.gemm_call_s(g, w.precision) for g in calls) / share
        memory = (layer_bytes + ce_bytes) / device.memory_bandwidth / share
        launches = ops * launch / share
    m = w.micro_batches
    bubble = (compute + memory + launches) * (w.pp - 1) / (w.vpp * m)
    local_layers = w.layers / w.pp
    overhead = device.step_overhead_s + device.layer_overhead_s * local_layers * m * work.layer_passes(w)

    activation = w.seq / w.cp * w.mbs * w.hidden * act
    tp_comm = 4 * local_layers * m * _collective_s(activation, w.tp, _link(w, device, w.tp), device.latency_s)
    tp_dispatch = 0.0
    if w.tp > 1 and w.engine == "embedded":
        # the embedded trainer's TP layers run on DTensor: its dispatch per step (the optimizer and the
        # gradient clip over DTensor parameters) and per layer and micro-batch (forward, backward, recompute)
        tp_dispatch = device.tp_dispatch_step_s + device.tp_dispatch_layer_s * local_layers * m * (
            work.layer_passes(w)
        )
    pp_comm = 0.0
    if w.pp > 1:
        span = w.tp * w.cp * w.dp * 2  # neighbouring stages are TP x CP x DP ranks apart
        # every model chunk's boundary, forward and backward, per micro-batch (VPP: vpp times as many sends),
        # each with the schedule's cost of one chunk op (`DeviceSpeed.op_s`)
        pp_comm = 2 * m * w.vpp * (activation / _link(w, device, span) + device.op_s)
    local_params = w.param_count() / (w.tp * w.pp)
    grads = local_params * w.trainable * 4  # gradients reduced in fp32 (Megatron's main_grad; ours fp32)
    dp_group = w.dp * w.cp
    dp_comm = 0.0
    if not w.overlap_grad_reduce:
        dp_comm = _collective_s(grads, dp_group, _link(w, device, w.world), device.latency_s)
    if dp_group > 1 and w.engine == "embedded":
        dp_comm += device.dp_step_s  # the trainer's other per-step collectives and the ranks' waits
    if w.distributed_optimizer and device.gloo and dp_group > 1:
        weights = local_params * w.trainable * (4 if w.engine == "embedded" else 2)
        gather = (dp_group - 1) / dp_group * weights / _link(w, device, w.world) + device.latency_s
        dp_comm += gather + 3 * weights / device.memory_bandwidth
    states = local_params * w.trainable * OPTIMIZER_BYTES.get(w.engine, OPTIMIZER_BYTES["megatron"])
    if w.distributed_optimizer:
        states /= dp_group
    optimizer = states / device.memory_bandwidth
    parts = {
        "compute": compute,
        "memory": memory,
        "launch": launches,
        "bubble": bubble,
        "overhead": overhead,
        "tp_comm": tp_comm,
        "tp_dispatch": tp_dispatch,
        "pp_comm": pp_comm,
        "dp_comm": dp_comm,
        "optimizer": optimizer,
    }
    step = sum(parts.values())
    assumptions = [device.source]
    assumptions += list(device.notes)
    assumptions.append("the run's wall time counts iterations only (no start-up, evaluation or saves)")
    # A model smaller than the recorded ones (under the smallest hidden size) steps in what the per-layer and
    # per-step overheads of ITS shape cost, which the recorded shapes do not tell (the CPU's held-out shapes,
    # hidden 64-384, measured +49% to +1772% off: recorded/cpu.yaml `validate:`): no supported figure
    # (`in_range` False; the estimate and the run summary print none, and say why). A model much larger
    # (over twice the largest) is compute-bound: the figure extrapolates, and says so.
    known = device.calibrated_hidden
    in_range = known is None or known[0] <= w.hidden
    if not in_range and known is not None:
        assumptions.append(
            f"hidden size {w.hidden} is below the shapes {device.name} was calibrated on (hidden "
            f"{known[0]}-{known[1]}): their per-layer overheads are not this model's, so no figure is "
            "supported"
        )
    elif known is not None and w.hidden > known[1] * 2:
        assumptions.append(
            f"hidden size {w.hidden} is beyond the shapes {device.name} was calibrated on (hidden "
            f"{known[0]}-{known[1]}): extrapolated; larger models have run faster than predicted "
            "(docs/time-to-train.md)"
        )
    return StepPrediction(
        step_s=step,
        parts=parts,
        flops=flops,
        tokens_per_s_per_device=tokens / step / w.world,
        tflops_per_device=flops / step / w.world / 1e12,
        run_s=step * w.train_iters if w.train_iters else None,
        device=device.name,
        calibration_error=device.calibration_error,
        assumptions=tuple(assumptions),
        in_range=in_range,
        calibrated_hidden=known,
    )


# The calibrated constants and how each enters the step time (`linear_terms`).
CALIBRATED = ("efficiency", "step_overhead_s", "layer_overhead_s", "launch_s", "intra_bandwidth")


def unknown(device: DeviceSpeed, name: str) -> float:
    """The value a constant's column multiplies: 1 / efficiency, 1 / bandwidth, the seconds as they are."""
    if name == "efficiency":
        return 1 / device.efficiency
    if name == "intra_bandwidth":
        return 1 / device.intra_bandwidth
    return float(getattr(device, name))


def with_unknown(device: DeviceSpeed, name: str, u: float) -> DeviceSpeed:
    """`device` with the constant `name` set from its unknown `u` (the inverse of `unknown`)."""
    if name in ("efficiency", "intra_bandwidth"):
        return device.with_(**{name: 1 / u if u > 0 else math.inf})
    return device.with_(**{name: u})


def linear_terms(w: Workload, device: DeviceSpeed) -> tuple[dict[str, float], float]:
    """The step time near `device`'s constants as sum(column[c] x u_c) + rest, u_c = `unknown(device, c)`
    for c in `CALIBRATED`: the step is piecewise linear in them (a max() where the host's launches and the
    device's work race, `DeviceSpeed.async_launch`), so each column is its slope at these constants and
    `speed.calibrate` refits until the pieces settle. Valid for a workload inside one node."""
    base = predict(w, device).step_s
    columns = {}
    for name in CALIBRATED:
        u = unknown(device, name)
        du = max(abs(u), 1e-6) * 1e-3
        columns[name] = (predict(w, with_unknown(device, name, u + du)).step_s - base) / du
    rest = base - sum(columns[c] * unknown(device, c) for c in CALIBRATED)
    return columns, rest
