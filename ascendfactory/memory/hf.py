"""Per-device peak memory of Hugging Face models trained data-parallel: LLaMA-Factory (DDP or DeepSpeed
ZeRO 0-3, with and without offload; full, freeze, LoRA, QLoRA) and verl's FSDP workers.

- **ZeRO model states** (DeepSpeed `docs/code-docs/source/memory.rst`,
  `estimate_zero3_model_states_mem_needs`; the ZeRO paper's stages): ZeRO-0 `4P + 16P`; ZeRO-1 `4P + 16P/N`
  (fp32 master, fp32 gradients and Adam sharded); ZeRO-2 `2P + 18P/N` (the 16-bit gradients partitioned
  too; DeepSpeed's own estimator keeps them whole, `4P + 16P/N`, which overstates measured ZeRO-2 peaks),
  optimizer offload removes the 16P/N; ZeRO-3 `4 x largest layer + 18P/N`, parameter and optimizer offload
  `4 x largest layer` alone. Without DeepSpeed, HF's Trainer with AMP keeps fp32 trainable weights, fp32
  gradients and AdamW (16 bytes); LLaMA-Factory's
  `pure_bf16` keeps all of them in bf16 (8 bytes).
- **Frozen weights**: 16-bit (2 bytes), 8-bit (1 byte) or 4-bit NF4 with its constants (0.53 bytes) under
  QLoRA.
- **DeepSpeed buffers**: the bucket sizes of LLaMA-Factory's shipped `ds_z2/z3_config.json`
  (`allgather_bucket_size` and `reduce_bucket_size` 5e8 elements at ZeRO-2; ZeRO-3's prefetch bucket of
  0.9h^2 and `stage3_max_live_parameters` 1e9 elements, capped by the model's size).
- **Activations of an HF decoder layer**: the same per-layer terms as Megatron's (`memory.megatron`) without
  TP; gradient checkpointing keeps each layer's input `2sbh` and re-creates one layer during backward.
- **Logits**: transformers computes the logits in 16 bits and the loss in fp32: `(2 + 4 + 4)sbV` (the bf16
  output, the fp32 copy and the log-softmax kept for backward).
- **FSDP** (verl): fp32 master weights, gradients and AdamW sharded over the FSDP group (16P/N), the bf16
  all-gathered copy of the running and the prefetched layer (`2 x 2 x layer`), `param_offload` /
  `optimizer_offload` moving weights+gradients / optimizer state to the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from ascendfactory.memory.job import Change
from ascendfactory.memory.megatron import EFFICIENCY, MegatronJob, layer_activation, layer_input
from ascendfactory.memory.report import MemoryEstimate, StageMemory
from ascendfactory.memory.shape import ModelShape

QUANT_BYTES = {None: 2.0, 8: 1.0, 4: 0.53, 2: 0.28}  # NF4 weights + block constants (bitsandbytes)
LF_Z2_BUCKETS = 5e8 + 5e8  # LLaMA-Factory examples/deepspeed/ds_z2_config.json (elements)
Z3_MAX_LIVE = 1e9  # stage3_max_live_parameters (DeepSpeed default; LLaMA-Factory's ds_z3_config.json)


@dataclass(frozen=True)
class HFJob:
    """A data-parallel HF-model training job on `devices` devices (LLaMA-Factory / verl actor)."""

    shape: ModelShape
    devices: int = 1
    batch: int = 1  # per-device micro-batch (sequences)
    grad_accum: int = 1  # micro-batches per optimizer step (a smaller micro-batch doubles it: same batch)
    seq: int = 2048
    finetuning: str = "full"  # full | freeze | lora
    zero: int | None = None  # DeepSpeed stage, None: no DeepSpeed
    offload_optimizer: bool = False
    offload_param: bool = False
    quantization_bit: int | None = None
    lora_rank: int = 0
    freeze_trainable_layers: int = 2
    pure_bf16: bool = False
    precision: str = "bf16"
    gradient_checkpointing: bool = True
    flash_attention: bool = True
    fsdp: bool = False  # verl: FSDP full shard instead of DeepSpeed
    label: str = ""

    def with_(self, **changes: object) -> HFJob:
        return replace(self, **changes)  # type: ignore[arg-type]

    # -- the Job protocol (memory.job) ---------------------------------------------------------------------
    def estimate(self, device_memory: int | None = None) -> MemoryEstimate:
        return estimate_hf(self)

    def candidates(self, world_size: int) -> Iterator[Change]:
        """Gradient checkpointing; then the sharding that costs least first (FSDP: optimizer, then parameter
        offload; DeepSpeed: the next ZeRO stages, then optimizer offload); then half the micro-batch (the
        accumulation doubled, the batch per step kept)."""
        if not self.gradient_checkpointing:
            yield Change({"gradient_checkpointing": True}, self.with_(gradient_checkpointing=True))
        if self.fsdp:
            for knob in ("offload_optimizer", "offload_param"):
                if not getattr(self, knob):
                    yield Change({knob: True}, self.with_(**{knob: True}))
        elif self.devices > 1 and self.finetuning == "full":
            for stage in range((self.zero if self.zero is not None else 0) + 1, 4):
                job = self.with_(zero=stage)
                yield Change(_sharding(job), job)
            if (self.zero or 0) >= 2 and not self.offload_optimizer:
                job = self.with_(offload_optimizer=True)
                yield Change(_sharding(job), job)
        if self.batch > 1:
            smaller = self.with_(batch=self.batch // 2, grad_accum=self.grad_accum * 2)
            yield Change(_changed(self, smaller), smaller)

    def layouts(self, world_size: int) -> Iterator[Change]:
        """Gradient checkpointing x sharding (DeepSpeed: no DeepSpeed and ZeRO 0-3 with their offloads;
        FSDP: parameter and optimizer offload) x micro-batch 1, 2, 4 (the batch per step kept) x, for a full
        fine-tune, LoRA instead (a different training: the advisor says so)."""
        if self.fsdp:
            shardings: list[dict[str, object]] = [
                {"offload_param": p, "offload_optimizer": o} for p in (False, True) for o in (False, True)
            ]
        elif self.finetuning == "full" and self.devices > 1:
            shardings = [{"zero": None, "offload_optimizer": False, "offload_param": False}]
            for z in range(4):
                shardings.append({"zero": z, "offload_optimizer": False, "offload_param": False})
                if z >= 2:
                    shardings.append({"zero": z, "offload_optimizer": True, "offload_param": False})
                if z == 3:
                    shardings.append({"zero": z, "offload_optimizer": True, "offload_param": True})
        else:
            shardings = [{}]
        samples = self.batch * self.grad_accum
        batches = sorted({b for b in (1, 2, 4, self.batch) if b <= max(self.batch, 4) and samples % b == 0})
        methods: list[dict[str, object]] = [{}]
        if self.finetuning == "full" and not self.fsdp:
            methods.append({"finetuning": "lora", "lora_rank": self.lora_rank or 8})
        for method in methods:
            for sharding in shardings if not method else [{}]:
                for gc in (False, True):
                    for b in batches:
                        job = self.with_(
                            **method, **sharding, gradient_checkpointing=gc, batch=b, grad_accum=samples // b
                        )
                        note = "LoRA instead of a full fine-tune: a different training" if method else ""
                        yield Change(_changed(self, job), job, note)

    def step_time(self, peak_flops: float) -> float:
        """One optimizer step on one device: FLOPs = (2 forward + 2 input gradients + 2 weight gradients of
        the trainable part, + 2 re-computing with gradient checkpointing) x parameters x tokens, at
        `EFFICIENCY` of `peak_flops`; ZeRO-3 / FSDP gather the 16-bit parameters twice and reduce-scatter the
        gradients once (`DP_BANDWIDTH`); offloaded states cross the host link every step
        (`HOST_BANDWIDTH`), and the optimizer then runs on the host (`HOST_ADAM`)."""
        total = self.shape.params(tp=1, divisible_by=1)
        trainable = trainable_params(self)
        tokens = self.batch * self.grad_accum * self.seq
        per_token = (4 + (2 if self.gradient_checkpointing else 0)) * total + 2 * trainable
        compute = per_token * tokens / (peak_flops * EFFICIENCY)
        sharded = self.fsdp or self.zero == 3
        comm = 3 * 2 * total / DP_BANDWIDTH if sharded and self.devices > 1 else 0.0
        host = 0.0
        if self.offload_optimizer:
            host += trainable * (4 + 2) / HOST_BANDWIDTH + trainable / max(self.devices, 1) / HOST_ADAM
        if self.offload_param:
            host += 2 * 2 * total / HOST_BANDWIDTH
        return compute + comm + host

    def groups(self) -> int:
        """Communication domains: the data-parallel default group (when there are several devices)."""
        return int(self.devices > 1)

    def describe(self) -> str:
        if self.fsdp:
            sharding = "FSDP" + "".join(
                f" +{n} offload"
                for n, on in (("param", self.offload_param), ("optimizer", self.offload_optimizer))
                if on
            )
        elif self.zero is None:
            sharding = "no DeepSpeed"
        else:
            sharding = f"ZeRO-{self.zero}" + (" +optimizer offload" if self.offload_optimizer else "")
            sharding += " +param offload" if self.offload_param else ""
        method = self.finetuning + (f" r{self.lora_rank}" if self.finetuning == "lora" else "")
        gc = "grad-ckpt" if self.gradient_checkpointing else "no grad-ckpt"
        return f"{method} {sharding} {gc} MBS {self.batch} x GA {self.grad_accum}"


DP_BANDWIDTH = 100e9  # bytes/s of a collective between data-parallel devices (HCCS / NVLink, effective)
HOST_BANDWIDTH = 25e9  # bytes/s between a device and its host (PCIe 4 x16, effective)
HOST_ADAM = 1e9  # parameters/s an Adam step updates on the host (DeepSpeed's CPU Adam, order of magnitude)


def _sharding(job: HFJob) -> dict[str, object]:
    """The sharding knobs of a job, all of them (a DeepSpeed config names its stage and offloads together)."""
    if job.fsdp:
        return {"offload_param": job.offload_param, "offload_optimizer": job.offload_optimizer}
    return {"zero": job.zero, "offload_optimizer": job.offload_optimizer, "offload_param": job.offload_param}


def _changed(old: HFJob, new: HFJob) -> dict[str, object]:
    """The knobs in which `new` differs from `old` (the layout as written: none); a changed DeepSpeed
    sharding is spelled whole."""
    out: dict[str, object] = {}
    if _sharding(new) != _sharding(old):
        out.update(
            _sharding(new)
            if not new.fsdp
            else {k: v for k, v in _sharding(new).items() if getattr(old, k) != v}
        )
    if new.gradient_checkpointing != old.gradient_checkpointing:
        out["gradient_checkpointing"] = new.gradient_checkpointing
    if new.batch != old.batch:
        out.update(mbs=new.batch, grad_accum=new.grad_accum)
    if new.finetuning != old.finetuning:
        out.update(finetuning=new.finetuning, lora_rank=new.lora_rank)
    return out


def trainable_params(job: HFJob) -> float:
    s = job.shape
    total = s.params(tp=1, divisible_by=1)
    if job.finetuning == "full":
        return total
    if job.finetuning == "freeze":
        n = job.freeze_trainable_layers
        layers = min(abs(n), s.layers)
        return layers * s.layer_params()
    q, kv = s.q_size, s.kv_size
    per_layer = job.lora_rank * (
        (s.hidden + q) + 2 * (s.hidden + kv) + (q + s.hidden) + 2 * (s.hidden + s.ffn) + (s.ffn + s.hidden)
    )  # q, k, v, o, gate, up, down (lora_target: all)
    return s.layers * per_layer


def _model_states(job: HFJob) -> tuple[float, float, float, float, list[str]]:
    """(weights, gradients, optimizer, buffers, notes) on one device."""
    s, n = job.shape, max(job.devices, 1)
    total = s.params(tp=1, divisible_by=1)
    trainable = trainable_params(job)
    frozen = total - trainable
    frozen_w = QUANT_BYTES.get(job.quantization_bit, 2.0) * frozen
    largest = s.largest_layer()
    notes: list[str] = []
    if job.fsdp:
        shard = trainable / n
        weights = 0.0 if job.offload_param else 4 * shard + 2 * frozen / n
        grads = 0.0 if job.offload_param else 4 * shard
        optim = 0.0 if job.offload_optimizer else 8 * shard
        buffers = 2.0 * 2 * s.layer_params()  # the running and the prefetched layer, all-gathered in bf16
        notes.append("FSDP full shard: fp32 master 4 + grads 4 + AdamW 8 bytes per parameter / devices")
        return weights, grads, optim, buffers, notes
    if job.zero is None or job.finetuning != "full":
        # DDP (or DeepSpeed on a LoRA/freeze job: the trainable part is small, sharding changes little)
        per = 8.0 if job.pure_bf16 else 16.0
        w, g, o = (2.0, 2.0, 4.0) if job.pure_bf16 else (4.0, 4.0, 8.0)
        shard = n if (job.zero or 0) >= 1 else 1
        notes.append(
            f"trainable parameters: {per:g} bytes each ({'pure bf16' if job.pure_bf16 else 'fp32 AMP'})"
        )
        autocast = 0.0 if job.pure_bf16 or job.precision == "fp32" else 2 * trainable
        return w * trainable + frozen_w, g * trainable, o * trainable / shard, autocast, notes
    z = job.zero
    if z == 3:
        if job.offload_param:
            weights, grads, optim = 4 * largest, 0.0, 0.0
        else:
            weights = 2 * trainable / n + 4 * largest
            grads = 2 * trainable / n
            optim = 0.0 if job.offload_optimizer else 16 * trainable / n
        live: float = min(Z3_MAX_LIVE, total) * 2 + 2 * 0.9 * s.hidden**2
        notes.append(
            "ZeRO-3: 18P/N + 4 x largest layer (DeepSpeed memory.rst); live parameters capped at 1e9"
        )
        return weights, grads, optim, live, notes
    # ZeRO-1 shards the fp32 master weights, gradients and moments (16 bytes); ZeRO-2 also the 16-bit
    # gradients (reduce-scattered in buckets). DeepSpeed's estimator keeps whole 16-bit gradients at ZeRO-2
    # too (4P + 16P/N); measured ZeRO-2 peaks (ms-swift, Qwen2.5-14B) match partitioned gradients.
    weights = 2.0 * trainable
    grads = 2 * trainable / (n if z >= 2 else 1)
    optim = 0.0 if job.offload_optimizer else (16 * trainable / (n if z >= 1 else 1))
    notes.append(
        f"ZeRO-{z}: 16-bit weights 2P, 16-bit gradients 2P{'/N' if z >= 2 else ''}, "
        f"fp32 master + gradients + Adam 16P{'/N' if z >= 1 else ''}"
    )
    buffers = 2 * min(LF_Z2_BUCKETS, 2 * trainable) if z == 2 else 0.0
    return weights, grads, optim, buffers, notes


def activations(job: HFJob) -> tuple[float, float]:
    """(activation bytes at the peak, logits bytes) of one micro-batch on one device."""
    as_megatron = MegatronJob(
        shape=job.shape,
        mbs=job.batch,
        seq=job.seq,
        flash_attention=job.flash_attention,
        precision=job.precision,
    )
    layer = layer_activation(as_megatron)
    if job.gradient_checkpointing:
        acts = job.shape.layers * layer_input(as_megatron) + layer
    else:
        acts = job.shape.layers * layer
    logits = 10 * job.seq * job.batch * job.shape.vocab
    return acts, logits


def estimate_hf(job: HFJob) -> MemoryEstimate:
    weights, grads, optim, buffers, notes = _model_states(job)
    acts, logits = activations(job)
    stage = StageMemory(
        stage="all",
        weights=weights,
        gradients=grads,
        optimizer=optim,
        activations=acts,
        logits=logits,
        buffers=buffers,
    )
    s = job.shape
    assumptions = [
        f"{s.name}: {s.params(tp=1, divisible_by=1) / 1e9:.2f}B parameters, "
        f"{trainable_params(job) / 1e6:.1f}M trainable ({job.finetuning}"
        + (f", {job.quantization_bit}-bit base" if job.quantization_bit else "")
        + ")",
        f"{job.devices} data-parallel devices, {job.batch} x {job.seq} tokens per device and micro-batch",
        *notes,
        "gradient checkpointing: layer inputs kept, one layer re-created"
        if job.gradient_checkpointing
        else "no gradient checkpointing: every layer's activations kept",
        "logits: bf16 output + fp32 copy + fp32 log-softmax (10 bytes per token and vocabulary entry)",
    ]
    if job.offload_optimizer or job.offload_param:
        assumptions.append("offloaded states live in host memory (not counted here)")
    return MemoryEstimate(stages=[stage], assumptions=assumptions, model="fsdp" if job.fsdp else "hf")
