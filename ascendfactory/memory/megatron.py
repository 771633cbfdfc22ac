"""Per-device peak memory of a Megatron-style training job, by pipeline stage.

Used for `torch` (the embedded trainer), `mindspeed-llm`, `mindspeed-mm`'s LLM and `mindspeed-rl`'s actor.
The terms, each a formula someone can check by hand (`tests/unit/memory/test_megatron_memory.py` does):

- **Model states** (Megatron-LM's README, "Distributed Optimizer"; `theoretical_memory_usage.py`): bytes per
  trainable parameter as (weights, gradients, optimizer) = bf16 (2, 4, 12), fp16 (2, 2, 16), fp32 (4, 4, 8);
  `--use-distributed-optimizer` divides the optimizer part by DP x CP. A frozen parameter (LoRA's base
  model) holds only its weight. The embedded trainer (`engine/train/mixed_precision.py`): bf16 and fp16
  (2, 4, 12) (16-bit weights, fp32 main gradients, fp32 masters and moments), fp32 (4, 4, 8).
- **Activations per layer and micro-batch** (Korthikanti et al. 2022, Table 2, for the layer Megatron builds
  today: RMSNorm, SwiGLU, grouped-query attention, no dropout): norm inputs, QKV input and fc1 input
  `8sbh` (divided by TP only with sequence parallelism), Q, K, V and the attention output
  `2sb(2q + 2kv)/t`, the gated MLP `6sbf/t`; without flash attention the softmax probabilities `2as^2b/t`
  (plus mask and dropout output `3as^2b/t` with attention dropout); selective recompute drops the `as^2`
  terms; full recompute keeps `2sbh` (/t with SP) per recompute group and re-creates one group's activations
  during its backward. Context parallelism divides `s` by CP.
- **In-flight micro-batches** under 1F1B on stage r of p: `min(p - r, M)`; interleaved (VPP = m chunks):
  `min(2(p - r - 1) + (m - 1)p + 1, Mm)` chunk passes of `L/(pm)` layers (Megatron's warm-up count + 1).
- **Logits** on the last stage, one micro-batch: the 16-bit logits and the fp32 softmax the vocab-parallel
  cross entropy keeps, `(2 + 4)sbV/t` over the padded vocabulary; the embedded trainer's chunked output
  layer + cross-entropy (`engine/train/cross_entropy.py`) one chunk of tokens and the output layer's
  gradient instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ascendfactory.memory.job import Change
from ascendfactory.memory.report import MemoryEstimate, StageMemory
from ascendfactory.memory.shape import ModelShape
from ascendfactory.parallel import LayoutInput, validate_layout
from ascendfactory.speed.model import Workload

# bytes per trainable parameter: (weights, gradients, optimizer before sharding)
MEGATRON_STATES = {"bf16": (2, 4, 12), "fp16": (2, 2, 16), "fp32": (4, 4, 8)}
EMBEDDED_STATES = {"bf16": (2, 4, 12), "fp16": (2, 4, 12), "fp32": (4, 4, 8)}
# the embedded trainer's chunked cross-entropy (engine/train/cross_entropy.py CHUNK_ELEMENTS, chunk_tokens)
CE_CHUNK_ELEMENTS, CE_MIN_CHUNK = 1 << 27, 256
LORA_TARGET_DIMS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")


@dataclass(frozen=True)
class MegatronJob:
    """One Megatron-style training layout (every field as the framework's flags mean it)."""

    shape: ModelShape
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1  # model chunks per pipeline rank (--virtual-pipeline-model-parallel-size)
    mbs: int = 1
    gbs: int = 1
    seq: int = 4096
    precision: str = "bf16"  # bf16 | fp16 | fp32
    distributed_optimizer: bool = False
    sequence_parallel: bool = False
    recompute: str = "none"  # none | selective | full
    recompute_method: str = "uniform"  # uniform | block
    recompute_num_layers: int = 1
    flash_attention: bool = True
    attention_dropout: bool = False
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ()
    num_layer_list: tuple[int, ...] | None = None
    vocab_divisible_by: int = 128
    engine: str = "megatron"  # megatron | embedded (our trainer: HF layers, chunked cross-entropy)
    # MoE: --moe-expert-capacity-factor (None: no token dropped) and --moe-pad-expert-input-to-capacity
    capacity_factor: float | None = None
    pad_to_capacity: bool = False
    # --expert-tensor-parallel-size (Megatron core 0.10+; None: TP, the default Megatron-LM core_v0.12.1
    # megatron/training/arguments.py line 358 sets): how each routed expert is sharded
    etp: int | None = None
    label: str = ""
    train_iters: int | None = None  # the run's iterations (the time model's wall time of the whole run)
    overlap_grad_reduce: bool = False  # --overlap-grad-reduce: the DP all-reduce hidden in the backward
    # the embedded trainer runs on the host's CPU (no accelerator named or found: `memory.runtime.estimate_on`
    # sets it), where PyTorch's SDPA takes its math path for MLA (`mla_host_attention`)
    host: bool = False

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def expert_dp(self) -> int:
        """The expert data-parallel size: the decoder's ranks over ETP x EP x PP (Megatron-LM core_v0.12.1
        megatron/core/parallel_state.py line 699), i.e. TP x DP x CP / (ETP x EP); DP x CP / EP when
        ETP = TP."""
        return max(1, self.tp * self.dp * self.cp // (self.expert_tp * self.ep))

    @property
    def micro_batches(self) -> int:
        return max(1, self.gbs // max(1, self.mbs * self.dp))

    def stage_layers(self) -> list[int]:
        if self.num_layer_list:
            return list(self.num_layer_list)
        base, extra = divmod(self.shape.layers, self.pp)
        return [base + (1 if r < extra else 0) for r in range(self.pp)]

    def with_(self, **changes: object) -> MegatronJob:
        return replace(self, **changes)  # type: ignore[arg-type]

    # -- the Job protocol (memory.job) ---------------------------------------------------------------------
    def estimate(self, device_memory: int | None = None) -> MemoryEstimate:
        return estimate_megatron(self)

    def candidates(self, world_size: int) -> Iterator[Change]:
        """Recompute, then sharding the optimizer state, then more model parallelism, then a smaller
        micro-batch: the order that costs least throughput first."""
        if self.recompute == "none":
            yield Change({"recompute": "selective"}, self.with_(recompute="selective"))
        if self.recompute != "full":
            full = {"recompute": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
            yield Change(full, self.with_(**full))
        if not self.distributed_optimizer and self.dp * self.cp > 1:
            yield Change({"distributed_optimizer": True}, self.with_(distributed_optimizer=True))
        for tp, pp in ((self.tp * 2, self.pp), (self.tp, self.pp * 2)):
            changed = self.relayout(world_size, tp=tp, pp=pp, vpp=self.vpp, mbs=self.mbs)
            if changed is not None:
                yield Change(layout_knobs(self, changed), changed)
        if self.mbs > 1:
            smaller = self.relayout(world_size, tp=self.tp, pp=self.pp, vpp=self.vpp, mbs=self.mbs // 2)
            if smaller is not None:
                yield Change({"mbs": self.mbs // 2}, smaller)

    def layouts(self, world_size: int) -> Iterator[Change]:
        """TP x PP x VPP x MBS x recompute x distributed optimizer on the same devices (CP, GBS and the
        sequence length as given), each layout that `parallel.validate_layout` accepts."""
        for tp in _divisors(world_size):
            for pp in _divisors(world_size // tp):
                for vpp in (1, 2, 4):
                    for mbs in sorted({1, 2, 4, self.mbs}):
                        if mbs > max(self.mbs, 4):
                            continue
                        base = self.relayout(world_size, tp=tp, pp=pp, vpp=vpp, mbs=mbs)
                        if base is None:
                            continue
                        for recompute in ("none", "selective", "full"):
                            for dist in (False, True) if base.dp * base.cp > 1 else (False,):
                                job = base.with_(
                                    recompute=recompute,
                                    recompute_method="uniform",
                                    recompute_num_layers=1,
                                    distributed_optimizer=dist,
                                )
                                knobs = layout_knobs(self, job)
                                if recompute != self.recompute or recompute == "full":
                                    knobs.update(recompute=recompute)
                                    if recompute == "full":
                                        knobs.update(recompute_method="uniform", recompute_num_layers=1)
                                if dist != self.distributed_optimizer:
                                    knobs["distributed_optimizer"] = dist
                                yield Change(knobs, job)

    def step_time(self, peak_flops: float) -> float:
        """compute = FLOPs / (devices x peak x EFFICIENCY), FLOPs = (6, or 8 with full recompute) x N x tokens
        + (12, or 16 recomputing attention) x L x s x h x tokens; bubble = compute x (PP - 1) / (VPP x
        micro-batches) (1F1B); TP: 4 all-reduces of s x b x h x 2 bytes per layer and micro-batch, 2(t-1)/t
        of it on the wire at TP_BANDWIDTH (DP gradient traffic assumed overlapped). N: the decoder's ACTIVE
        parameters (a MoE layer's router, shared and top-k routed experts:
        `ModelShape.active_decoder_params`), which is what a token's forward and backward multiply by."""
        s, world = self.shape, self.tp * self.pp * self.dp * self.cp
        tokens = self.gbs * self.seq
        n = s.active_decoder_params()
        factor = 8 if self.recompute == "full" else 6
        attention = (16 if self.recompute in ("full", "selective") else 12) * s.layers * self.seq * s.hidden
        flops = factor * n * tokens + attention * tokens + 6 * s.vocab * s.hidden * tokens
        compute = flops / (world * peak_flops * EFFICIENCY)
        bubble = compute * (self.pp - 1) / (self.vpp * self.micro_batches)
        per_layer = 4 * 2 * self.seq / self.cp * self.mbs * s.hidden * 2 * (self.tp - 1) / self.tp
        tp_comm = per_layer * (s.layers / self.pp) * self.micro_batches / TP_BANDWIDTH
        return compute + bubble + tp_comm

    def groups(self) -> int:
        """Communication domains a rank communicates in: the default group, and each parallel dimension
        above 1 (TP, PP, DP, CP, EP)."""
        dims = (self.tp, self.pp, self.dp, self.cp, self.ep)
        return (self.tp * self.pp * self.dp * self.cp > 1) + sum(d > 1 for d in dims)

    def workload(self, *, devices_per_node: int | None = None) -> Workload:
        """This layout for the step-time model (`ascendfactory.speed.predict`)."""
        s = self.shape
        total = s.params(tp=self.tp, divisible_by=self.vocab_divisible_by)
        return Workload(
            layers=s.layers,
            hidden=s.hidden,
            ffn=s.moe_ffn if s.experts else s.ffn,
            heads=s.heads,
            kv_heads=s.kv_heads,
            kv_channels=s.kv_channels,
            vocab=s.vocab,
            seq=self.seq,
            mbs=self.mbs,
            gbs=self.gbs,
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            cp=self.cp,
            vpp=self.vpp,
            tied=s.tied,
            swiglu=s.gated_mlp,
            routed_experts=s.moe_topk if s.experts else 1,
            params=float(total),
            trainable=min(1.0, lora_params(self) * s.layers * self.tp / total) if self.lora_rank else 1.0,
            recompute=self.recompute,
            precision=self.precision,
            engine=self.engine,
            distributed_optimizer=self.distributed_optimizer,
            overlap_grad_reduce=self.overlap_grad_reduce,
            devices_per_node=devices_per_node,
            vocab_divisible_by=self.vocab_divisible_by,
            train_iters=self.train_iters,
        )

    def describe(self) -> str:
        parts = [f"TP{self.tp}", f"PP{self.pp}"] + ([f"VPP{self.vpp}"] if self.vpp > 1 else [])
        parts += [f"DP{self.dp}", f"MBS {self.mbs}", f"recompute {self.recompute}"]
        parts.append("dist-opt" if self.distributed_optimizer else "no dist-opt")
        return " ".join(parts)

    def relayout(self, world: int, *, tp: int, pp: int, vpp: int, mbs: int) -> MegatronJob | None:
        """This job on `world` devices with new TP/PP/VPP/MBS (DP is the rest), or None if a rule refuses it
        (`parallel.validate_layout`, the layers per stage and chunk, the interleaved schedule's rule)."""
        mp = tp * pp * self.cp
        if mp > world or world % mp:
            return None
        dp = world // mp
        s = self.shape
        report = validate_layout(
            LayoutInput(
                world_size=world,
                tp=tp,
                pp=pp,
                cp=self.cp,
                mbs=mbs,
                gbs=self.gbs,
                num_layers=s.layers,
                heads=s.heads,
                kv_heads=s.kv_heads,
                seq_length=self.seq,
                max_position_embeddings=max(self.seq, 1),
                sequence_parallel=self.sequence_parallel and tp > 1,
                ep=self.ep,
                experts=s.experts,
            )
        )
        if report.problems or s.layers % pp:
            return None
        if vpp > 1 and (pp == 1 or s.layers % (pp * vpp) or (self.gbs // (mbs * dp)) % pp):
            return None
        return self.with_(
            tp=tp,
            pp=pp,
            dp=dp,
            vpp=vpp,
            mbs=mbs,
            num_layer_list=None if pp != self.pp else self.num_layer_list,  # layers per stage: PP's
            sequence_parallel=self.sequence_parallel and tp > 1,
        )


EFFICIENCY = 0.45  # achieved / peak matmul throughput of a well-tuned dense run (MFU of published runs)
TP_BANDWIDTH = 150e9  # bytes/s of a TP all-reduce inside one node (HCCS / NVLink, effective)


def layout_knobs(old: MegatronJob, new: MegatronJob) -> dict[str, object]:
    """The layout knobs that differ between two jobs (tp, pp, vpp, mbs, sequence_parallel)."""
    knobs: dict[str, object] = {}
    for knob in ("tp", "pp", "vpp", "mbs", "sequence_parallel"):
        if getattr(new, knob) != getattr(old, knob):
            knobs[knob] = getattr(new, knob)
    return knobs


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def estimate_megatron(job: MegatronJob) -> MemoryEstimate:
    stages = [_stage(job, r, n) for r, n in enumerate(job.stage_layers())]
    return MemoryEstimate(stages=stages, assumptions=assumptions(job), model=f"megatron/{job.engine}")


# -- model states ------------------------------------------------------------------------------------------
def stage_dense_layers(job: MegatronJob, rank: int, layers: int) -> int:
    """How many of stage `rank`'s `layers` layers are the model's dense first layers (MoE models)."""
    s = job.shape
    if not s.experts or not s.dense_layers:
        return 0 if s.experts else layers
    first = sum(job.stage_layers()[:rank])
    return max(0, min(first + layers, s.dense_layers) - first)


def stage_expert_params(job: MegatronJob, rank: int, layers: int) -> float:
    """Routed-expert parameters one device of stage `rank` holds: each MoE layer's experts / EP, each
    expert sharded by the expert tensor parallel size (Megatron's default: TP)."""
    s = job.shape
    moe_layers = layers - stage_dense_layers(job, rank, layers) if s.experts else 0
    return moe_layers * s.expert_params() / (job.ep * job.expert_tp)


def stage_params(job: MegatronJob, rank: int, layers: int) -> tuple[float, float]:
    """(all parameters, trainable parameters) held by one device of pipeline stage `rank`: attention and
    norms, the dense or MoE MLP of each layer (routed experts / EP; the router replicated, its logits
    computed on every TP rank), the embedding on the first stage, the final norm and output layer on the
    last."""
    s, t = job.shape, job.tp
    first, last = rank == 0, rank == job.pp - 1
    dense = stage_dense_layers(job, rank, layers)
    common = layers * (s.attention_params() / t + 2 * s.hidden) + dense * s.dense_mlp_params() / t
    if s.experts:
        moe = layers - dense
        common += moe * (s.hidden * s.experts + s.shared_params() / t)
    emb = s.padded_vocab(t, job.vocab_divisible_by) * s.hidden / t
    total = common + stage_expert_params(job, rank, layers)
    if first:
        total += emb
    if last:
        total += s.hidden  # final norm
        if not s.tied or job.pp > 1:  # an untied output layer, or the last stage's copy of a tied one
            total += emb
    if job.lora_rank <= 0:
        return total, total
    return total + layers * lora_params(job), layers * lora_params(job)


def lora_params(job: MegatronJob) -> float:
    """LoRA A and B of one layer's targets (default: all four linear layers), sharded by TP on one side."""
    s, r, t = job.shape, job.lora_rank, job.tp
    dims = {
        "linear_qkv": (s.hidden, s.q_size + 2 * s.kv_size),
        "linear_proj": (s.q_size, s.hidden),
        "linear_fc1": (s.hidden, (2 if s.gated_mlp else 1) * s.ffn),
        "linear_fc2": (s.ffn, s.hidden),
    }
    targets = [d for d in (job.lora_targets or LORA_TARGET_DIMS) if d in dims]
    return sum(r * (i + o / t) for i, o in (dims[d] for d in targets))


def _states(
    job: MegatronJob, total: float, trainable: float, experts: float = 0.0
) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer, autocast buffer) bytes (no engine keeps autocast copies now).
    `experts`: the trainable routed-expert parameters among them, whose optimizer state the distributed
    optimizer shards over the expert data-parallel group only (Megatron core_r0.8.0
    megatron/core/optimizer/__init__.py: the expert-parallel buffers use the data-modulo-expert-parallel
    group; core_v0.12.1 line 586: `get_expert_data_parallel_group()`, of `MegatronJob.expert_dp` ranks)."""
    table = EMBEDDED_STATES if job.engine == "embedded" else MEGATRON_STATES
    w, g, o = table.get(job.precision, table["bf16"])
    shards = job.dp * job.cp if job.distributed_optimizer else 1
    expert_shards = job.expert_dp if job.distributed_optimizer else 1
    frozen = total - trainable
    weights = w * trainable + (2 if job.precision != "fp32" else 4) * frozen
    optimizer = o * (trainable - experts) / shards + o * experts / expert_shards
    return weights, g * trainable, optimizer, 0.0


# -- activations ---------------------------------------------------------------------------------------------
# Bytes a decoder layer keeps per token and per element of (hidden, query, kv, ffn) width, plus per head and
# per token. Megatron: 16-bit tensors of its fused layer (Korthikanti et al.); the embedded trainer (HF's
# Qwen2/Llama layer): counted with autograd's saved-tensor hooks on CPU (`tests/unit/memory` re-measures
# them): fp32 keeps every tensor in 4 bytes; the 16-bit model (no autocast) keeps its tensors in 2 bytes
# except RMSNorm's fp32 input copy and its per-token fp32 rsqrt, and SDPA's fp32 log-sum-exp.
LAYER_BYTES = {
    ("megatron", "16bit"): (8, 4, 4, 6, 4, 0),
    ("megatron", "fp32"): (16, 8, 8, 12, 4, 0),
    ("embedded", "fp32"): (24, 8, 8, 16, 4, 8),
    ("embedded", "16bit"): (16, 4, 4, 8, 4, 8),
}


def layer_activation(
    job: MegatronJob, *, recompute_core: bool | None = None, moe: bool | None = None
) -> float:
    """Bytes one decoder layer keeps for backward, for one micro-batch on one device (`moe`: a MoE layer of
    a MoE model, the default for one; False: its dense first layers)."""
    s, t, b = job.shape, job.tp, job.mbs
    moe = bool(s.experts) if moe is None else moe and bool(s.experts)
    seq = job.seq / job.cp
    t_sp = t if job.sequence_parallel else 1
    h, q, kv, a = s.hidden, s.q_size, s.kv_size, s.heads
    if s.mla is not None:  # per head: q and k of nope + rope dims, v of v_head dims
        q = a * (s.mla.qk_nope + s.mla.qk_rope)
        kv = a * (s.mla.qk_nope + s.mla.qk_rope + s.mla.v_head) // 2
    c_h, c_q, c_kv, c_f, c_a, c_0 = LAYER_BYTES[(job.engine, "fp32" if job.precision == "fp32" else "16bit")]
    if not s.gated_mlp:
        c_f = c_f * 2 // 3
    width = 4 if job.precision == "fp32" else 2
    if job.engine == "embedded" and job.lora_rank:
        # frozen RMSNorm weights: `weight * normalized` keeps only the weight for backward, not the
        # normalized input (in the model's dtype) of each of the layer's two norms (measured:
        # bench_memory_estimate.py, lora rows)
        c_h -= 2 * width
    replicated = seq * b * (c_h * h + c_0) / t_sp
    selective = job.recompute == "selective" if recompute_core is None else recompute_core
    if (
        s.mla is not None
        and job.engine == "embedded"
        and job.host
        and s.mla.qk_nope + s.mla.qk_rope != s.mla.v_head
    ):
        per_token, core = mla_host_attention(job)
        attn = seq * b * per_token / t
        core = 0.0 if selective else core * seq * seq * b / t
        return replicated + attn + _mlp_activation(job, seq, c_f, moe) + core
    attn = seq * b * (c_q * q + c_kv * kv) / t
    if s.qk_norm and s.mla is None and job.engine == "embedded":
        # HF Qwen3's q_norm / k_norm: each keeps its input in fp32 (the projection's output itself in an fp32
        # model, an fp32 copy in a 16-bit one), the normalized q / k in the model's dtype and an fp32 rsqrt
        # per head and token (counted with saved-tensor hooks: tests/unit/memory/test_embedded_layer_bytes.py)
        attn += seq * b * ((4 + width) * (q + kv) + 4 * (a + s.kv_heads)) / t
    if s.mla is not None:  # the latents: each kept for its RMSNorm and its up-projection
        attn += 2 * width * seq * b * ((s.mla.q_lora or 0) + s.mla.kv_lora + s.mla.qk_rope)
    mlp = _mlp_activation(job, seq, c_f, moe)
    core = 0.0
    if not job.flash_attention and not selective:
        core = (width + (3 if job.attention_dropout else 0)) * a * seq * seq * b / t
    elif job.flash_attention:
        core = c_a * seq * b * a / t  # fp32 log-sum-exp
    return replicated + attn + mlp + core


def _mlp_activation(job: MegatronJob, seq: float, c_f: int, moe: bool) -> float:
    """The layer's MLP: a MoE layer's routed experts and its shared experts' MLP, or the dense MLP."""
    s, t, b = job.shape, job.tp, job.mbs
    if moe:
        return moe_activation(job, seq) + c_f * seq * b * s.shared_ffn / t  # + the shared experts' MLP
    return c_f * seq * b * s.ffn / t


def mla_host_attention(job: MegatronJob) -> tuple[float, float]:
    """(bytes per token, bytes per head and token pair) HF's DeepSeek-V2 attention (transformers'
    `modeling_deepseek_v2.py`, run by the embedded trainer) keeps for backward on the host's CPU.

    Its queries and keys have qk_nope + qk_rope dims and its values v_head: PyTorch's fused CPU attention
    takes only equal head dims (`aten/src/ATen/native/transformers/sdp_utils_cpp.cpp`,
    `check_head_dim_size_cpp`), so SDPA runs its math path, which keeps the fp32 softmax probabilities
    (4 bytes per head and token pair) and its scaled fp32 copies of q and k. The rotary embedding goes
    through complex fp32, so q, k and v are fp32 in a bf16 model as well. Per token (a heads, d = qk_nope +
    qk_rope, r / r_q the kv / q latent, p = qk_rope), counted with autograd's saved-tensor hooks
    (`tests/unit/memory/test_embedded_mla_bytes.py`): scaled q and k 8ad; with fp32 weights v 4a v_head
    (a copy; one sample per micro-batch keeps instead the kv up-projection's whole output, 4a(qk_nope +
    v_head)), the output projection's input 4a v_head, each latent's projection output (4(r + p), 4 r_q),
    its normalized copy and its up-projection's input (8r, 8 r_q); with 16-bit weights v 4a v_head (an fp32
    copy), the output projection's input 2a v_head, each latent's fp32 RMSNorm input and two 16-bit copies
    (8r, 8 r_q); 4 bytes of RMSNorm rsqrt per latent."""
    s = job.shape
    assert s.mla is not None
    m, a = s.mla, s.heads
    d, r, rq = m.qk_nope + m.qk_rope, m.kv_lora, m.q_lora or 0
    per_token = 8.0 * a * d + 4 * (1 + (rq > 0))
    if job.precision == "fp32":
        # v: a view of the kv up-projection's output when one sample fills the batch, else a copy
        v = 4 * a * (m.v_head + (m.qk_nope if job.mbs == 1 else 0))
        per_token += v + 4 * a * m.v_head + 4 * (r + m.qk_rope) + 8 * r + 12 * rq
    else:
        per_token += 6 * a * m.v_head + 8 * r + 8 * rq
    return per_token, 4.0 * a


def routed_tokens(job: MegatronJob, tokens: float) -> float:
    """Token copies the routed experts of one device process for `tokens` tokens: top-k per token, balanced
    over the EP ranks on average (each sends and receives k copies per token); a capacity factor c caps
    each expert at c times its balanced share (Megatron's --moe-expert-capacity-factor, dropping the rest),
    and --moe-pad-expert-input-to-capacity fills every expert up to it."""
    k = job.shape.moe_topk * tokens
    c = job.capacity_factor
    if c is None:
        return k
    return k * c if job.pad_to_capacity else k * min(1.0, c)


def moe_activation(job: MegatronJob, seq: float) -> float:
    """A MoE layer's MLP for one micro-batch on one device (memory_estimate spec, section 1.4, "MoE"): the
    router's fp32 logits `4sbE` (on the tokens of this TP rank with sequence parallelism), the dispatched
    token copies `2ksbh` (the all-to-all's buffers), and the routed experts `ks b(2h + 6 f_moe)` with the
    expert FFN sharded by the expert tensor parallel size (Megatron: TP); 4 bytes per element in fp32."""
    s, t, b = job.shape, job.tp, job.mbs
    t_sp = t if job.sequence_parallel else 1
    width = 4 if job.precision == "fp32" else 2
    if job.engine == "embedded":
        # the embedded trainer's MoE layer (engine/train/moe/layer.py), counted with autograd's saved-tensor
        # hooks on CPU (tests/unit/memory/test_embedded_moe_bytes.py): per token the fp32 router logits and
        # one element; per routed copy (it routes the whole sequence, TP gathered) the permuted token, the
        # expert input and the combine's weighted output (3h), gate, up, SiLU and product (4 f_moe / t) and
        # 32 bytes of indices and probabilities. With EP and more than one expert per rank the received
        # copies are regrouped by local expert and back (`moe/dispatch.py`): `index_copy` keeps its source
        # for backward (PyTorch's derivatives.yaml: `expand_as(source)`), so the regrouped expert output and
        # the combine all-to-all's output are both held: one more h-wide copy and its 8-byte index
        # (measured: benchmarks/bench_memory_estimate.py, qwen3moe ep2 rows)
        tokens = seq * b
        regroup = job.ep > 1 and s.experts // job.ep > 1 and not job.pad_to_capacity
        per_copy = width * ((3 + regroup) * s.hidden + 4 * s.moe_ffn / t) + 32 + 8 * regroup
        return tokens * (4 * s.experts + width) + routed_tokens(job, tokens) * per_copy
    router = 4 * seq * b * s.experts / t_sp
    # the all-to-all dispatcher gathers the received copies over the expert TP group only
    # (Megatron-LM core_v0.12.1 megatron/core/transformer/moe/token_dispatcher.py line 53 and 526), and
    # MoE with TP trains with sequence parallelism (moe_layer.py line 130), so a device processes the
    # copies of ETP of its TP group's sequence shards: all of them when ETP = TP
    share = job.expert_tp / t if job.sequence_parallel else 1.0
    copies = routed_tokens(job, seq * b * share)
    dispatch = width * copies * s.hidden
    experts = copies * (width * s.hidden + 3 * width * s.moe_ffn / job.expert_tp)
    return router + dispatch + experts


def layer_input(job: MegatronJob) -> float:
    """What full recompute keeps per recompute group: the group's 16-bit input (sharded with SP)."""
    t_sp = job.tp if job.sequence_parallel else 1
    width = 4 if job.precision == "fp32" else 2
    return width * (job.seq / job.cp) * job.mbs * job.shape.hidden / t_sp


def stored_per_pass(job: MegatronJob, layers: int, dense: int = 0) -> tuple[float, float]:
    """(bytes kept by one micro-batch pass over `layers` layers, the recompute working set on top);
    `dense`: how many of them are a MoE model's dense first layers."""
    moe_layers = layers - dense if job.shape.experts else 0
    per = [layer_activation(job, moe=False)] * (layers - moe_layers) + [layer_activation(job)] * moe_layers
    full = max(per) if per else 0.0
    backward = math_attention_backward(job, moe=moe_layers > 0) if layers else 0.0
    if job.recompute == "selective" and layers:
        # the attention core is re-created in backward, one layer at a time
        return sum(per), layer_activation(job, recompute_core=False) - layer_activation(job) + backward
    if job.recompute != "full" or layers == 0:
        return sum(per), backward
    k = max(1, min(job.recompute_num_layers, layers))
    if job.recompute_method == "block":
        return k * layer_input(job) + sum(per[k:]), full + backward
    groups = math.ceil(layers / k)
    return groups * layer_input(job), k * full + backward


def math_attention_backward(job: MegatronJob, *, moe: bool) -> float:
    """What the backward of SDPA's math path (MLA on the host: `mla_host_attention`) holds on top of the
    kept activations: the gradient of the fp32 softmax probabilities and the softmax backward's output, two
    [b, a, s, s] fp32 tensors at once, less the layer's MLP activations, freed when its backward ran
    before (measured: bench_memory_estimate.py, dsv2lite rows at seq 512 and with recompute); 0 elsewhere."""
    s = job.shape
    m = s.mla
    if m is None or job.engine != "embedded" or not job.host or m.qk_nope + m.qk_rope == m.v_head:
        return 0.0
    seq = job.seq / job.cp
    _, per_pair = mla_host_attention(job)
    c_f = LAYER_BYTES[(job.engine, "fp32" if job.precision == "fp32" else "16bit")][3]
    return max(0.0, 2 * per_pair * seq * seq * job.mbs / job.tp - _mlp_activation(job, seq, c_f, moe))


def in_flight(job: MegatronJob, rank: int) -> int:
    """Micro-batch passes whose activations a stage holds at its peak (1F1B / interleaved 1F1B)."""
    p, m, mb = job.pp, job.vpp, job.micro_batches
    if p == 1:
        return 1
    if m > 1:
        return min(2 * (p - rank - 1) + (m - 1) * p + 1, mb * m)
    return min(p - rank, mb)


def pipelining_buffers(job: MegatronJob, rank: int) -> float:
    """torch.distributed.pipelining's buffers on one stage: a receive buffer per micro-batch for the
    activations (every stage but the first) and for their gradients (every stage but the last), hidden
    states of one micro-batch each (in the model's dtype), and the tensors a sending stage holds per
    in-flight micro-batch."""
    width = 4 if job.precision == "fp32" else 2
    unit = width * (job.seq / job.cp) * job.mbs * job.shape.hidden / (job.tp if job.sequence_parallel else 1)
    recv = job.micro_batches * unit * ((rank > 0) + (rank < job.pp - 1))
    if rank < job.pp - 1:
        # measured (bench_memory_estimate.py, PP 2): four hidden-state tensors per in-flight micro-batch on
        # a stage that sends (its output kept for backward, the send and the gradient's working copies)
        recv += 4 * unit * in_flight(job, rank)
    return recv


def vision_encoder(job: MegatronJob) -> tuple[float, float, float, float]:
    """(weights, gradients, optimizer, activations) of a VLM's vision encoder on the first stage, sharded by
    TP, `patches` tokens per sample: trained with the LLM, or frozen (MindSpeed-MM's `freeze: true`): its
    16-bit weights alone, and nothing kept for a backward that does not reach it."""
    v = job.shape.vision
    assert v is not None
    params = v.params / job.tp
    if v.frozen:
        return (4 if job.precision == "fp32" else 2) * params, 0.0, 0.0, 0.0
    table = EMBEDDED_STATES if job.engine == "embedded" else MEGATRON_STATES
    w, g, o = table.get(job.precision, table["bf16"])
    shards = job.dp * job.cp if job.distributed_optimizer else 1
    vit = replace(
        job,
        shape=replace(job.shape, hidden=v.hidden, ffn=v.ffn, heads=v.heads, kv_heads=v.heads, head_dim=None),
        seq=v.patches,
        cp=1,
    )
    acts = v.layers * layer_activation(vit) * in_flight(job, 0)
    return w * params, g * params, o * params / shards, acts


def logits_bytes(job: MegatronJob) -> float:
    """Megatron: 16-bit logits + the fp32 softmax its vocab-parallel cross entropy keeps (6 bytes). The
    embedded trainer (`engine/train/cross_entropy.py`): one chunk of C tokens at a time, C = CE_CHUNK_ELEMENTS
    / local vocabulary (at least CE_MIN_CHUNK, at most the micro-batch's tokens): its logits in 16 bit and
    fp32, then fp32 and the 16-bit gradient (6 bytes; fp32 weights: one 4-byte tensor), vocab-sharded under
    TP; the output layer's gradient made in the forward (fp32, plus its 16-bit copy) and the hidden states'
    gradient, kept until the backward."""
    s = job.shape
    vocab = s.padded_vocab(job.tp, job.vocab_divisible_by)
    tokens = (job.seq / job.cp) * job.mbs
    if job.engine == "megatron":
        return 6 * tokens * vocab / job.tp
    local = vocab / job.tp
    width = 4 if job.precision == "fp32" else 2
    chunk = min(tokens, max(CE_MIN_CHUNK, CE_CHUNK_ELEMENTS // local))
    # the output layer's gradient, unless it is frozen (LoRA trains the adapters only)
    weight_grad = 0.0 if job.lora_rank > 0 else (4 + (0 if width == 4 else 2)) * local * s.hidden
    return (6 if width == 2 else 4) * chunk * local + weight_grad + width * tokens * s.hidden


def _stage(job: MegatronJob, rank: int, layers: int) -> StageMemory:
    total, trainable = stage_params(job, rank, layers)
    experts = stage_expert_params(job, rank, layers) if job.lora_rank <= 0 else 0.0
    weights, grads, optim, autocast = _states(job, total, trainable, experts)
    chunk_layers = layers / job.vpp if job.vpp > 1 else layers
    dense = stage_dense_layers(job, rank, layers) if job.shape.experts else 0
    kept, working = stored_per_pass(job, math.ceil(chunk_layers), min(dense, math.ceil(chunk_layers)))
    last = rank == job.pp - 1
    logits = logits_bytes(job) if last else 0.0
    # a recomputed layer's working set exists during its backward, after the loss's tensors are freed
    acts = kept * in_flight(job, rank) + max(0.0, working - logits)
    if rank == 0 and job.shape.vision is not None:
        v_w, v_g, v_o, v_act = vision_encoder(job)
        weights, grads, optim, acts = weights + v_w, grads + v_g, optim + v_o, acts + v_act
    if last:
        # the final norm's input and the output layer's input (a frozen output layer under the embedded
        # trainer's LoRA needs no input for a weight gradient)
        acts += (1 if job.engine == "embedded" and job.lora_rank else 2) * layer_input(job)
    if job.engine == "embedded" and job.pp > 1 and rank == 0 and job.micro_batches > 1 and not job.lora_rank:
        # the embedding's backward makes a fresh dense gradient (vocab x hidden) and adds it into the
        # accumulated one while the other passes in flight are still held: a peak of its own when that
        # gradient outweighs one pass (measured: bench_memory_estimate.py --shape vocab pp2, rank 0)
        width = 4 if job.precision == "fp32" else 2
        fresh = width * job.shape.padded_vocab(job.tp, job.vocab_divisible_by) * job.shape.hidden / job.tp
        acts = max(acts, kept * (in_flight(job, rank) - 1) + fresh)
    fp32_grads_freed = job.precision == "fp32" and not job.distributed_optimizer
    if (
        job.engine == "embedded"
        and job.pp == 1
        and job.tp == 1
        and job.micro_batches == 1
        and fp32_grads_freed
    ):
        # no accumulation: gradients appear as backward frees the activations (zero_grad sets them to
        # None), so only what exceeds the activations and logits adds to the peak (16-bit runs keep their
        # fp32 gradient buffer: `engine/train/mixed_precision.py`). Not under TP: there the measured peak
        # holds part of the gradients beside the activations (benchmarks/bench_memory_estimate.py tp2-dp2:
        # 51.00 MiB measured; 45.68 estimated with this overlap, 55.07 without it), so they are counted.
        grads = max(0.0, grads - acts - logits)
    return StageMemory(
        stage=f"pp{rank}" if job.pp > 1 else "all",
        weights=weights,
        gradients=grads,
        optimizer=optim,
        activations=acts,
        logits=logits,
        buffers=autocast + _buffers(job, rank),
    )


def _buffers(job: MegatronJob, rank: int) -> float:
    out = 0.0
    if job.sequence_parallel and job.tp > 1:
        out += 2 * job.seq / job.cp * job.mbs * job.shape.hidden  # one all-gathered sequence
    if job.engine == "embedded" and job.pp > 1:
        out += pipelining_buffers(job, rank)
    if job.engine == "embedded" and job.tp > 1 and rank == job.pp - 1 and job.micro_batches > 1:
        # measured: the vocab-sharded lm_head's fresh gradient, added into the accumulated one
        width = 4 if job.precision == "fp32" else 2
        out += width * job.shape.padded_vocab(job.tp, job.vocab_divisible_by) * job.shape.hidden / job.tp
    return out


def assumptions(job: MegatronJob) -> list[str]:
    s = job.shape
    states = EMBEDDED_STATES if job.engine == "embedded" else MEGATRON_STATES
    w, g, o = states.get(job.precision, states["bf16"])
    out = [
        f"{s.name}: {s.layers} layers, hidden {s.hidden}, ffn {s.ffn}, heads {s.heads}/{s.kv_heads} kv, "
        f"vocab {s.vocab} padded to {s.padded_vocab(job.tp, job.vocab_divisible_by)}"
        + (", tied embeddings" if s.tied else ""),
        f"layout TP{job.tp} PP{job.pp}"
        + (f" VPP{job.vpp}" if job.vpp > 1 else "")
        + f" CP{job.cp} DP{job.dp}"
        + (f" EP{job.ep}" if job.ep > 1 else "")
        + f", MBS {job.mbs}, GBS {job.gbs} ({job.micro_batches} micro-batches per step), seq {job.seq}",
        f"{job.precision} ({job.engine}): {w}+{g}+{o} bytes per trainable parameter (weights, gradients, "
        "optimizer)"
        + (f", optimizer sharded over DPxCP={job.dp * job.cp}" if job.distributed_optimizer else ""),
        f"recompute {job.recompute}"
        + (f" ({job.recompute_method}, {job.recompute_num_layers} layers)" if job.recompute == "full" else "")
        + (", sequence parallel" if job.sequence_parallel else "")
        + (", flash attention" if job.flash_attention else ", no flash attention: softmax kept (as^2 terms)"),
        "activations: RMSNorm + SwiGLU + GQA layer without dropout (Korthikanti et al. Table 2, adapted); "
        "1F1B holds min(PP - stage, micro-batches) passes",
        (
            "logits: one chunk of tokens of the output layer + cross entropy, and its weight's gradient"
            if job.engine == "embedded"
            else "logits: 16-bit output + fp32 softmax of the vocab-parallel cross entropy, one micro-batch"
        ),
    ]
    if s.experts:
        shared = f", shared experts of {s.shared_ffn}" if s.shared_ffn else ""
        dense = f", the first {s.dense_layers} layers dense" if s.dense_layers else ""
        cap = f", capacity factor {job.capacity_factor}" if job.capacity_factor is not None else ""
        out.append(
            f"MoE: {s.experts} routed experts of {s.moe_ffn} (top {s.moe_topk}){shared}{dense}; each device "
            f"holds experts / EP{job.ep} sharded by expert TP{job.expert_tp}, their optimizer state "
            f"sharded over the expert DP={job.expert_dp if job.distributed_optimizer else 1}; a MoE layer "
            f"keeps the router's fp32 logits and top-k token copies (dispatch and expert FFN){cap}"
        )
    if s.mla is not None:
        out.append(
            f"multi-head latent attention: q latent {s.mla.q_lora}, kv latent {s.mla.kv_lora}, "
            f"head dims {s.mla.qk_nope}+{s.mla.qk_rope} (qk) / {s.mla.v_head} (v)"
        )
    if job.lora_rank:
        out.append(f"LoRA rank {job.lora_rank}: base weights frozen (no gradients or optimizer state)")
    return out
