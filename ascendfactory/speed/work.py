"""What one training step does on one device, counted from the layers' shapes: the GEMMs (each with its
shape, for the device's rate at that shape), the bytes the memory-bound work moves, and how many operators
the step calls (each paid a fixed launch cost). `speed.model.predict` turns these into seconds.

GEMMs, per layer and micro-batch of T = MBS x seq / CP tokens on a rank holding 1/TP of the weights (the
shapes the embedded trainer multiplies: HF's separate q, k, v, gate and up projections; Megatron fuses q, k,
v and gate, up into one GEMM each): forward (m=T, k, n) and, per such GEMM, the backward's data gradient
(T, n, k) and weight gradient (k, T, n); the attention's scores and values (SDPA) as (seq, c, seq) per head
and sequence, forward and twice that backward; the output layer (T, h, V / TP) likewise. Their FLOPs add
up to Megatron's `num_floating_point_operations` (`speed.flops`; a unit test holds the two equal).

Memory-bound bytes per step (read + written, at the activations' precision, `ELEMENTWISE_PASSES`): each
layer's RMSNorms, rotary embedding, SDPA's inputs and output, SwiGLU's activation and product and the
residual adds, forward and backward; the cross-entropy over the (local) vocabulary in fp32, chunk by chunk
(`engine/train/cross_entropy.py`); the optimizer's pass over the weights, gradients and states is
`speed.model`'s own term.

Operators: the embedded trainer's step, counted with torch.profiler (`benchmarks/bench_step_ops.py`: every
top-level ATen call, from Python or the autograd engine, of one iteration of the demo model (hidden 64),
2 and 4 layers, 1 and 2 micro-batches, 2026-11-28): `OPS_PER_STEP` + micro-batches x (`OPS_PER_MICRO_BATCH`
+ layers x `OPS_PER_LAYER`), plus `OPS_PER_CE_CHUNK` for every cross-entropy chunk past the first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascendfactory.speed.model import Workload

# benchmarks/bench_step_ops.py on the embedded trainer (demo model, fp32, CPU, 2026-11-28): 526 top-level
# ATen calls with 2 layers and 1 micro-batch, 916 with 4 layers, 1019 with 2 micro-batches.
OPS_PER_LAYER = 195  # per layer and micro-batch: its forward and backward
OPS_PER_MICRO_BATCH = 103  # embedding, final norm, output layer and cross-entropy, the loss's bookkeeping
OPS_PER_STEP = 33  # gradient norm and clipping (foreach), fused AdamW, zeroing, the loss's reduction
# the calls of one pass of cross_entropy.py's chunk loop (slices, the logit GEMM, max, exp, sum, the
# gradient's scaling and index, its two GEMMs), counted from the code
OPS_PER_CE_CHUNK = 28

# Elements read + written per token and layer by the memory-bound work, forward and backward (backward
# about twice the forward: each element-wise op reads its saved inputs and the incoming gradient and writes
# the gradients), counted from HF's Qwen2 decoder layer (transformers `modeling_qwen2.py`: RMSNorm in 4
# ops, rotary `q * cos + rotate_half(q) * sin`, `repeat_kv` before SDPA, SiLU(gate) * up, two residual adds):
#   forward: 2 RMSNorms 14 h, 2 residual adds 6 h; rotary 10 per q and per k element; repeat_kv 2 q; SDPA
#   reads q, k, v and writes its output 4 q, its output made contiguous 2 q; SiLU 2 f and the product 3 f
ELEMENTWISE_PASSES = {"h": 3 * 20, "q": 3 * 18, "kv": 3 * 10, "f": 3 * 5}
# Bytes per logit of the chunked cross-entropy (cross_entropy.py): the GEMM's output at the activations'
# precision, then in fp32 the max (read), the shift and the exp (read + write each), the sum (read), the
# gradient's scaling (read + write): 8 passes of 4 bytes; 16-bit: its cast to fp32 and back (read + write).
CE_FP32_BYTES = 8 * 4


@dataclass(frozen=True)
class Gemm:
    m: int
    k: int
    n: int
    count: float  # how many calls of it one device makes per step
    batch: int = 1  # GEMMs per call (the attention kernel: two per head and sequence)

    @property
    def flops(self) -> float:
        """All its calls' FLOPs."""
        return 2.0 * self.m * self.k * self.n * self.batch * self.count


def layer_passes(w: Workload) -> float:
    """How many times a step runs its layers' per-layer work, relative to once: full recompute runs their
    forward (a third of forward + backward) again."""
    return 4 / 3 if w.recompute == "full" else 1.0


def _linear(m: int, k: int, n: int, count: float, weight_grad: float) -> list[Gemm]:
    """A linear layer's forward (m, k, n), its data gradient (m, n, k) and its weight gradient (k, m, n)
    (`weight_grad`: the share of the weights trained; frozen ones need none)."""
    out = [Gemm(m, k, n, count), Gemm(m, n, k, count)]
    if weight_grad > 0:
        out.append(Gemm(k, m, n, count * weight_grad))
    return out


def gemms(w: Workload) -> list[Gemm]:
    """The GEMMs one device runs in one step (module docstring), averaged over pipeline stages (the output
    layer's share 1 / PP of a stage), with what recompute redoes."""
    t = max(1, w.mbs * w.seq // max(1, w.cp))
    tp = max(1, w.tp)
    q, kv = w.heads * w.kv_channels // tp, max(1, w.kv_heads * w.kv_channels // tp)
    f = max(1, w.ffn // tp)
    mb = w.micro_batches
    layers = w.layers / w.pp * mb
    trained = min(1.0, max(0.0, w.trainable))
    fwd: list[tuple[int, int, int, float]] = []
    if w.engine == "embedded":
        fwd += [(t, w.hidden, q, 1), (t, w.hidden, kv, 2)]
    else:
        fwd += [(t, w.hidden, q + 2 * kv, 1)]
    fwd.append((t, q, w.hidden, 1))
    ups = 2 if w.swiglu else 1
    if w.engine == "embedded":
        fwd.append((t, w.hidden, f, ups * w.routed_experts))
    else:
        fwd.append((t, w.hidden, ups * f, w.routed_experts))
    fwd.append((t, f, w.hidden, w.routed_experts))
    out: list[Gemm] = []
    redo = 1.0 if w.recompute == "full" else 0.0
    for m, k, n, c in fwd:
        out += _linear(m, k, n, c * layers, trained)
        if redo:
            out.append(Gemm(m, k, n, c * layers * redo))
    # attention: Q K^T and P V per head and sequence, (s, c, s) each, forward; backward twice the forward
    heads = w.heads // tp
    seq = max(1, w.seq // max(1, w.cp))
    per = 2 * max(1, heads) * w.mbs  # Q K^T and P V of every head and sequence: one kernel call
    forwards = 1 + (1 if w.recompute in ("full", "selective") else 0)
    out.append(Gemm(seq, w.kv_channels, w.seq, layers * forwards, batch=per))
    out.append(Gemm(seq, w.kv_channels, w.seq, layers, batch=2 * per))  # the backward: twice the forward
    vocab = w.padded_vocab // tp
    out += _linear(t, w.hidden, vocab, mb / w.pp, trained)
    return out


def elementwise_bytes(w: Workload, activation_bytes: int) -> tuple[float, float]:
    """(the layers', the cross-entropy's) bytes read + written per step on one device (module docstring),
    averaged over pipeline stages; full recompute runs the layers' forward (a third of it) again."""
    t = w.mbs * w.seq / max(1, w.cp)
    tp = max(1, w.tp)
    q = w.heads * w.kv_channels / tp
    kv = w.kv_heads * w.kv_channels / tp
    f = w.ffn * w.routed_experts / tp
    p = ELEMENTWISE_PASSES
    per_token_layer = p["h"] * w.hidden + p["q"] * q + p["kv"] * kv + p["f"] * f
    redo = layer_passes(w)
    layers = t * w.micro_batches * w.layers / w.pp * per_token_layer * activation_bytes * redo
    ce_per_logit = (
        CE_FP32_BYTES + activation_bytes + (0 if activation_bytes >= 4 else 2 * (4 + activation_bytes))
    )
    logits = t * w.micro_batches * w.padded_vocab / tp * ce_per_logit / w.pp
    return layers, logits


def ce_chunks(w: Workload) -> int:
    """How many chunks cross_entropy.py splits one micro-batch's tokens into (2^27 logits each)."""
    from_vocab = max(256, (1 << 27) // max(1, w.padded_vocab // max(1, w.tp)))
    return max(1, math.ceil(w.mbs * w.seq / max(1, w.cp) / from_vocab))


def operators(w: Workload) -> float:
    """The operators one device calls in one step (module docstring): the counted per-step, per-micro-batch
    and per-layer ones (full recompute: the layers' forward, a third of their calls, again)."""
    redo = layer_passes(w)
    per_mb = OPS_PER_MICRO_BATCH / w.pp + OPS_PER_LAYER * w.layers / w.pp * redo
    per_mb += OPS_PER_CE_CHUNK * (ce_chunks(w) - 1) / w.pp
    return OPS_PER_STEP + w.micro_batches * per_mb
