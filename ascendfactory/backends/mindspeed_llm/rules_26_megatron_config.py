"""MindSpeed-LLM 26.1.0 rules read from Megatron-LM core_v0.12.1's TransformerConfig / ModelParallelConfig
__post_init__ and initialize_megatron (megatron/core/transformer/transformer_config.py,
megatron/core/model_parallel_config.py, megatron/training/initialize.py), as data: each a statement of the
26.1.0 coverage map (tests/diffval/maps/) that refuses a job our other rules accepted. `rules.py` adds
them to its table; the record and the source texts are `rule_types.py`'s.
"""

from __future__ import annotations

from typing import Any

from ascendfactory.backends.mindspeed_llm.rule_types import V26, Flags, Rule, without

CONFIG = (
    "Megatron-LM {megatron} megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__"
)
INITIALIZE = "Megatron-LM {megatron} megatron/training/initialize.py initialize_megatron"
FIRST, LAST = "decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers"
ACCOUNT = ("account-for-embedding-in-pipeline-split", "account-for-loss-in-pipeline-split")


def _modules(f: Flags) -> list[Any]:
    value = f["recompute-modules"]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _selective(f: Flags, module: str) -> bool:
    """`module` among the recompute-modules of selective recomputation (TransformerConfig reads them only
    then)."""
    return f["recompute-granularity"] == "selective" and module in _modules(f)


def _mla(f: Flags) -> bool:
    """Multi-latent attention: core 0.12's multi-latent-attention, or MindSpeed-LLM's deprecated
    multi-head-latent-attention that 26.1.0 copies into it (features_manager/arguments/deprecated_args.py)."""
    return f.given("multi-latent-attention") or f.given("multi-head-latent-attention")


def _fp8_bf16_edges(f: Flags) -> bool:
    return f.given("fp8-format") and f.given("first-last-layers-bf16")


def _bf16_layers_out_of_range(f: Flags, key: str) -> bool:
    """fp8 with first-last-layers-bf16: the BF16 layers at each end lie in [0, num-layers / PP]."""
    if not (_fp8_bf16_edges(f) and f.given(key)):
        return False
    stage = f.num("num-layers") // f.num("pipeline-model-parallel-size")
    return f.num(key) < 0 or f.num(key) > stage


def _virtual_stages(f: Flags) -> float:
    """num-virtual-stages-per-pipeline-rank; MindSpeed's megatron_basic feature drops a virtual pipeline
    of 1 (mindspeed/features_manager/megatron_basic/megatron_basic.py validate_args), so 1 means none."""
    return (
        f.num("num-virtual-stages-per-pipeline-rank")
        if f.given("num-virtual-stages-per-pipeline-rank")
        else 1
    )


def _uneven_stages_split_by_vpp(f: Flags) -> bool:
    """TransformerConfig.__post_init__ with decoder-first/last-pipeline-num-layers and a virtual pipeline:
    the first stage's layers, the last stage's and each middle stage's are multiples of the virtual size
    (only when the middle stages split evenly at all: that is the uneven-pipeline rule's)."""
    vpp = _virtual_stages(f)
    if vpp <= 1 or not (f.given(FIRST) or f.given(LAST)):
        return False
    layers, stages = f.num("num-layers"), f.num("pipeline-model-parallel-size")
    for key in (FIRST, LAST):
        if f.given(key):
            if f.num(key) <= 0:
                return False
            if f.num(key) % vpp:
                return True
            layers, stages = layers - f.num(key), stages - 1
    if stages <= 0 or layers % stages:
        return False
    return (layers // stages) % vpp != 0


def _accounted_split(f: Flags) -> bool:
    """account-for-embedding/loss-in-pipeline-split: refused beside decoder-first/last-pipeline-num-layers;
    otherwise num-layers plus one per accounted stage is split over the pipeline stages (validate_args, and
    TransformerConfig.__post_init__ for num-virtual-stages-per-pipeline-rank), and each stage's share over
    the virtual stages."""
    if f.given(FIRST) or f.given(LAST):
        return True
    layers = f.num("num-layers") + sum(1 for key in ACCOUNT if f.given(key))
    stages = f.num("pipeline-model-parallel-size")
    if layers % stages:
        return True
    vpp = _virtual_stages(f)
    return vpp > 1 and (layers // stages) % vpp != 0


def _cp_comm_types(f: Flags) -> list[Any]:
    value = f["cp-comm-type"]
    return list(value) if isinstance(value, (list, tuple)) else [value]


RULES: tuple[Rule, ...] = (
    Rule(
        "first-last-layers-bf16",
        lambda f: _fp8_bf16_edges(f) and f["fp8-recipe"] in (None, "delayed"),
        "with FP8 training (fp8-format) needs an fp8-recipe other than delayed (the default): delayed "
        "scaling does not keep the first / last layers in BF16",
        "set fp8-recipe: tensorwise (or another recipe than delayed), or remove first-last-layers-bf16",
        CONFIG,
        versions=V26,
    ),
    *(
        Rule(
            key,
            lambda f, key=key: _bf16_layers_out_of_range(f, key),
            "must be from 0 to the layers of one pipeline stage (num-layers / pipeline-model-parallel-size) "
            "with FP8 training (fp8-format) and first-last-layers-bf16",
            f"set {key} from 0 to num-layers / pipeline-model-parallel-size (or remove it: 1)",
            CONFIG,
            versions=V26,
        )
        for key in ("num-layers-at-start-in-bf16", "num-layers-at-end-in-bf16")
    ),
    Rule(
        "fp8-recipe",
        lambda f: f.given("fp8-format") and f["fp8-recipe"] == "mxfp8" and f.given("fp8-param-gather"),
        "mxfp8 does not support fp8-param-gather",
        "remove fp8-param-gather, or set another fp8-recipe (tensorwise, delayed, ...)",
        CONFIG,
        versions=V26,
    ),
    Rule(
        "recompute-modules",
        lambda f: _selective(f, "mla_up_proj") and not _mla(f),
        "mla_up_proj (with recompute-granularity selective) needs multi-latent attention "
        "(multi-latent-attention, a DeepSeek-style model)",
        "remove mla_up_proj from recompute-modules",
        CONFIG,
        versions=V26,
    ),
    Rule(
        "recompute-modules",
        lambda f: _selective(f, "moe_act") and not f.given("moe-grouped-gemm"),
        "moe_act (with recompute-granularity selective) needs moe-grouped-gemm (a MoE model's grouped "
        "experts)",
        "remove moe_act from recompute-modules, or set moe-grouped-gemm: true on a MoE model",
        CONFIG,
        versions=V26,
    ),
    Rule(
        "moe-layer-recompute",
        lambda f: f.given("moe-layer-recompute") and f["recompute-granularity"] == "full",
        "cannot be used with recompute-granularity full (it is deprecated: it means selective "
        "recomputation of the MoE layer)",
        "remove moe-layer-recompute (or use recompute-granularity: selective with recompute-modules: [moe])",
        CONFIG,
        versions=V26,
    ),
    *(
        Rule(
            key,
            lambda f, key=key: f.given(key) and _accounted_split(f),
            "cannot be used with decoder-first-pipeline-num-layers / decoder-last-pipeline-num-layers; "
            "otherwise num-layers plus the embedding / loss stage it adds must split evenly over "
            "pipeline-model-parallel-size, and each stage's share over num-virtual-stages-per-pipeline-rank",
            f"remove {key}, or choose pipeline-model-parallel-size (and "
            "num-virtual-stages-per-pipeline-rank) that divide the layers with the stages it adds",
            "Megatron-LM {megatron} megatron/training/arguments.py validate_args and "
            "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__",
            versions=V26,
        )
        for key in ACCOUNT
    ),
    Rule(
        "num-virtual-stages-per-pipeline-rank",
        _uneven_stages_split_by_vpp,
        "must divide decoder-first-pipeline-num-layers, decoder-last-pipeline-num-layers and the layers of "
        "each pipeline stage between them",
        "choose num-virtual-stages-per-pipeline-rank dividing those layer counts, or set "
        "decoder-first-pipeline-num-layers / decoder-last-pipeline-num-layers that it divides",
        CONFIG,
        versions=V26,
    ),
    Rule(
        "rotary-interleaved",
        lambda f: f.given("rotary-interleaved") and _mla(f),
        "does not work with multi-latent attention (multi-latent-attention, a DeepSeek-style model)",
        "remove rotary-interleaved",
        CONFIG,
        versions=V26,
    ),
    Rule(
        "cp-comm-type",
        lambda f: (
            f.num("context-parallel-size") > 1
            and len(_cp_comm_types(f)) > 1
            and len(_cp_comm_types(f)) != f.num("num-layers")
        ),
        "with context-parallel-size above 1 takes one type for every layer or one per layer: a list "
        "of as many types as num-layers",
        "give one type (cp-comm-type: [p2p]) or one per layer (num-layers of them)",
        CONFIG,
        versions=V26,
    ),
    Rule(
        "use-checkpoint-args",
        lambda f: f.given("use-checkpoint-args") and f["non-persistent-ckpt-type"] == "local",
        "is not supported with non-persistent-ckpt-type local (the arguments would be loaded after the "
        "local checkpoint manager is set up)",
        "remove non-persistent-ckpt-type (or use-checkpoint-args)",
        INITIALIZE,
        versions=V26,
    ),
    Rule(
        "use-checkpoint-args",
        without("use-checkpoint-args", "load"),
        "needs a checkpoint to load its arguments from (load), and the plan passes none (ckpt_load_type 0: "
        "random weights)",
        "remove use-checkpoint-args, or load a checkpoint (ckpt_load_type 1 or 2, or set load)",
        INITIALIZE,
        versions=V26,
    ),
)
