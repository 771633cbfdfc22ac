"""The memory job of a Megatron-style experiment (torch, mindspeed-llm, mindspeed-mm; MindSpeed-RL's actor),
read from what the training program will parse (`launch.TrainArgs`: the flags the plan hands it, with the
program's own defaults) and never from the experiment as written or `plan.facts`.

The model's shape: the architecture flags on the command line (`--num-layers`, `--hidden-size`, ...,
`--padded-vocab-size`, `--untie-embeddings-and-output-weights`), each falling back to the catalog's or
config.json's value when the launch leaves it out; the embedded trainer builds the HF config's model
(`shape_from_arch`); MindSpeed-MM's from its model.json (`backends/mindspeed_mm/memory.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.common.megatron.launch import TrainArgs
from ascendfactory.backends.common.megatron.read import MegatronRun
from ascendfactory.config.catalog import ModelArch
from ascendfactory.memory.job import Job
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.shape import MLAShape, ModelShape, shape_from_arch
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.parallel import parse_layer_list

T = "backend_config.training."
# knob -> the training key a user sets (Megatron's dash spelling, as torch and mindspeed-llm take it)
KEYS = {
    "recompute": T + "recompute-granularity",
    "recompute_method": T + "recompute-method",
    "recompute_num_layers": T + "recompute-num-layers",
    "distributed_optimizer": T + "use-distributed-optimizer",
    "sequence_parallel": T + "sequence-parallel",
    "tp": T + "tensor-model-parallel-size",
    "pp": T + "pipeline-model-parallel-size",
    "vpp": T + "num-layers-per-virtual-pipeline-stage",
    "mbs": T + "micro-batch-size",
    "gbs": T + "global-batch-size",
}


def megatron_shape(args: TrainArgs, arch: ModelArch | None) -> ModelShape | None:
    """The decoder the program builds from its architecture flags (the catalog's / config.json's value
    where a flag is not on the command line; None when neither gives the layers and hidden size)."""
    if arch is None:
        if not (
            args.number("num-layers") and args.number("hidden-size") and args.number("num-attention-heads")
        ):
            return None
        base = ModelShape(
            name="model",
            layers=0,
            hidden=0,
            ffn=0,
            heads=0,
            kv_heads=0,
            vocab=args.number("vocab-size") or 0,
            tied=True,
        )
    else:
        base = shape_from_arch(arch)
    heads = args.number("num-attention-heads") or base.heads
    kv_heads = (args.number("num-query-groups") or heads) if args.on("group-query-attention") else heads
    if not args.given("num-attention-heads") and not args.given("group-query-attention"):
        kv_heads = base.kv_heads
    untie = args.value("untie-embeddings-and-output-weights")
    return ModelShape(
        name=base.name,
        layers=args.number("num-layers") or base.layers,
        hidden=args.number("hidden-size") or base.hidden,
        ffn=args.number("ffn-hidden-size") or base.ffn or 4 * (args.number("hidden-size") or 0),
        heads=heads,
        kv_heads=kv_heads,
        vocab=args.number("padded-vocab-size") or base.vocab,
        tied=base.tied if untie is None else not untie,
        head_dim=args.number("kv-channels") or base.head_dim,
        qkv_bias=args.on("add-qkv-bias") if args.given("add-qkv-bias") else base.qkv_bias,
        **_moe(args, base),
        vision=base.vision,
    )


def _moe(args: TrainArgs, base: ModelShape) -> dict[str, Any]:
    """The MoE and MLA sizes the program builds: its flags (either MindSpeed-LLM version's spelling), else
    the catalog's / config.json's value; none for a dense model."""
    experts = args.number("num-experts") or 0 if args.given("num-experts") else base.experts
    if not experts:
        return {}
    ffn = args.number("moe-ffn-hidden-size") or args.number("moe-intermediate-size") or base.moe_ffn
    shared = args.number("n-shared-experts")
    first_k = args.number("first-k-dense-replace")
    out: dict[str, Any] = dict(
        experts=experts,
        moe_topk=args.number("moe-router-topk") or base.moe_topk,
        moe_ffn=ffn,
        shared_ffn=shared * ffn if shared is not None else base.shared_ffn,
        dense_layers=max(first_k, 0) if first_k is not None else base.dense_layers,
        mla=base.mla,
    )
    if base.mla is not None:
        m = base.mla
        out["mla"] = MLAShape(
            q_lora=args.number("q-lora-rank") or m.q_lora,
            kv_lora=args.number("kv-lora-rank") or m.kv_lora,
            qk_nope=args.number("qk-head-dim") or args.number("qk-nope-head-dim") or m.qk_nope,
            qk_rope=args.number("qk-pos-emb-head-dim") or args.number("qk-rope-head-dim") or m.qk_rope,
            v_head=args.number("v-head-dim") or m.v_head,
        )
    return out


def megatron_job(args: TrainArgs, shape: ModelShape, *, dp: int, engine: str) -> MegatronJob:
    """The job of one launch on its data-parallel size `dp` (every other size as the program parses it)."""
    tp, pp = args.size("tensor-model-parallel-size"), args.size("pipeline-model-parallel-size")
    layer_list = args.value("num-layer-list")
    try:
        stages = parse_layer_list(layer_list) if layer_list else None
    except ValueError:
        stages = None  # refused by the plan's checks before an estimate is made
    return MegatronJob(
        shape=shape,
        tp=tp,
        pp=pp,
        dp=dp,
        cp=args.size("context-parallel-size"),
        ep=args.size("expert-model-parallel-size"),
        vpp=args.virtual_chunks(shape.layers, pp),
        mbs=args.micro_batch_size,
        gbs=args.global_batch_size(dp),
        seq=args.seq_length or 0,
        precision=args.precision,
        distributed_optimizer=args.on("use-distributed-optimizer"),
        sequence_parallel=args.on("sequence-parallel") and tp > 1,
        recompute=args.recompute,
        recompute_method=args.text("recompute-method") or "uniform",
        recompute_num_layers=args.number("recompute-num-layers") or 1,
        # the embedded trainer always runs PyTorch's fused attention (no softmax kept)
        flash_attention=args.on("use-flash-attn") if engine == "megatron" else True,
        attention_dropout=float(args.value("attention-dropout") or 0) > 0,
        lora_rank=args.lora_rank,
        lora_targets=args.lora_targets,
        num_layer_list=tuple(stages) if stages and len(stages) == pp else None,
        vocab_divisible_by=args.size("make-vocab-size-divisible-by"),
        engine=engine,
        train_iters=args.number("train-iters"),
        overlap_grad_reduce=args.on("overlap-grad-reduce"),
        capacity_factor=_capacity(args),
        pad_to_capacity=args.on("moe-pad-expert-input-to-capacity"),
        # Megatron's --expert-tensor-parallel-size (core 0.10+; unset: TP); the embedded trainer shards
        # experts by TP
        etp=(args.number("expert-tensor-parallel-size") or None) if engine == "megatron" else None,
    )


def _capacity(args: TrainArgs) -> float | None:
    """--moe-expert-capacity-factor (a negative value: none, as Megatron's TransformerConfig reads it)."""
    value = args.value("moe-expert-capacity-factor")
    try:
        factor = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return factor if factor is not None and factor >= 0 else None


def spelling(args: TrainArgs, keys: Mapping[str, str] = KEYS) -> Any:
    """Knobs as `backend_config.training` keys: a virtual pipeline as layers per chunk (null: none, and a
    `virtual-pipeline-model-parallel-size` given is cleared with it), recompute `none` as null."""

    def spell(knobs: Mapping[str, Any], job: Job) -> dict[str, Any] | None:
        if any(k not in keys for k in knobs):
            return None
        out: dict[str, Any] = {}
        for knob, value in knobs.items():
            if knob == "vpp":
                megatron: Any = job
                value = megatron.shape.layers // (megatron.pp * value) if value > 1 else None
                if args.given("virtual-pipeline-model-parallel-size"):
                    out[keys[knob].rsplit(".", 1)[0] + ".virtual-pipeline-model-parallel-size"] = None
            elif knob == "recompute" and value == "none":
                value = None
            out[keys[knob]] = value
        return out

    return spell


def megatron_target(
    run: MegatronRun[Any], *, engine: str, shape: ModelShape | None = None
) -> MemoryTarget | None:
    """The memory target of a planned Megatron-style run (None before its launch is decided)."""
    args = run.launch
    if args is None or not run.arch.layers or not run.arch.hidden:
        return None
    if shape is None:
        shape = shape_from_arch(run.arch) if engine == "embedded" else megatron_shape(args, run.arch)
    if shape is None:
        return None
    job = megatron_job(args, shape, dp=run.dp, engine=engine)
    return MemoryTarget(job=job, spell=spelling(args), world_size=run.world_size)
