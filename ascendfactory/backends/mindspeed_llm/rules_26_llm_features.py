"""MindSpeed-LLM 26.1.0 rules read from MindSpeed-LLM 26.1.0's own features (features_manager/)
(mindspeed_llm/features_manager/), as data: each a statement of the 26.1.0 coverage map
(tests/diffval/maps/) that refuses a job our other rules accepted. `rules.py` adds them to its table; the
record and the source texts are `rule_types.py`'s.

MindSpeed-LLM 26.1.0 validates in this order (mindspeed_llm/training/arguments.py validate_args_v2_decorator):
every feature's pre_validate_args, Megatron's validate_args, every post_validate_args, then every
validate_args; the features read the flags as argparse left them (core_v0.12.1's defaults where not given).
"""

from __future__ import annotations

from ascendfactory.backends.mindspeed_llm.rule_types import LLM26, V26, Flags, Rule

# the 26.1.0 argparse defaults these rules read where a flag is not given (rule_types.DEFAULTS holds
# 2.1.0's for the keys whose default changed): MindSpeed-LLM 26.1.0
# features_manager/context_parallel/context_parallel_feature.py register_args
CP_ALGO_26 = "megatron_cp_algo"
# the algorithms MHC and the DSA indexer run under with context parallelism (mhc_feature.py and
# dsa_indexer_feature.py validate_args)
SPARSE_CP_ALGOS = ("ulysses_cp_algo", "kvallgather_cp_algo")

CP_FEATURE = LLM26 + "context_parallel/context_parallel_feature.py ContextParallelFeature.validate_args"
MAMBA_CP = LLM26 + "context_parallel/mamba_context_parallel.py MambaContextParallelFeature.validate_args"
ROTARY = LLM26 + "common/rotary.py RotaryPositionEmbeddingFeature.validate_args"
CHECKPOINT = LLM26 + "convert_checkpoint/convert_checkpoint.py CheckpointFeature.validate_args"
LORA = LLM26 + "finetune/lora.py LoraFeature.validate_args"
LOW_PRECISION = LLM26 + "low_precision/low_precision_optimizer_feature.py validate_args"
TE_BASIC = LLM26 + "megatron_basic/transformer_engine_basic.py validate_args"
MOE_ROUTER = LLM26 + "moe/moe_router.py MoERouter._validate_moe_args"
MUON = LLM26 + "optimizer/muon_optimizer_feature.py validate_args"
NUM_LAYER_LIST = LLM26 + "pipeline_parallel/num_layer_list.py NumLayerListFeature.validate_args"
MHC = LLM26 + "transformer/mhc_feature.py MHCFeature.validate_args"
MTP = LLM26 + "transformer/mtp.py MultiTokenPredictionFeature.validate_args"
DSA = LLM26 + "transformer/multi_latent_attention/dsa_indexer_feature.py DSAIndexerFeature.validate_args"
BLOCK = LLM26 + "transformer/transformer_block.py TransformerBlockFeature.validate_args"


def _cp(f: Flags) -> bool:
    return f.num("context-parallel-size") > 1


def _cp_algo(f: Flags) -> str:
    return str(f.flags.get("context-parallel-algo", CP_ALGO_26))


def _longrope_missing(f: Flags) -> bool:
    """rotary.py: longrope needs its original length and both factor lists; the two mscales go together
    (`bool(short_mscale) ^ bool(long_mscale)`: a 0 counts as unset)."""
    if f["rope-scaling-type"] != "longrope":
        return False
    needed = ("rope-scaling-original-max-position-embeddings", "long-factor", "short-factor")
    if not all(f.given(k) for k in needed):
        return True
    return bool(f.flags.get("short-mscale")) != bool(f.flags.get("long-mscale"))


def _fp8(f: Flags) -> bool:
    return f.given("fp8-format")  # --fp8-format's dest is args.fp8 (core_v0.12.1 arguments.py)


def _fp8_recipe(f: Flags) -> str:
    return str(f.flags.get("fp8-recipe", "delayed"))  # core_v0.12.1's default


def _flash(f: Flags) -> bool:
    """args.use_flash_attn when MHC and the DSA indexer read it: given, or turned on by MindSpeed's Ulysses
    context parallelism, whose validate_args runs first (MindSpeed 26.1.0_core_r0.12.1
    mindspeed/features_manager/context_parallel/ulysses_context_parallel.py line 34; the 26.1.0 judge accepts
    enable-mhc with context-parallel-algo ulysses_cp_algo and no use-flash-attn)."""
    return f.given("use-flash-attn") or (_cp(f) and _cp_algo(f) == "ulysses_cp_algo")


def _mhc_broken(f: Flags) -> bool:
    if not f.given("enable-mhc"):
        return False
    return not _flash(f) or (_cp(f) and _cp_algo(f) not in SPARSE_CP_ALGOS)


def _dsa_broken(f: Flags) -> bool:
    if not f.given("enable-dsa-indexer"):
        return False
    if not _flash(f) or (_cp(f) and _cp_algo(f) not in SPARSE_CP_ALGOS):
        return True
    # validate_args turns both fused lightning-indexer flags on when only one is given, before this check
    fused = f.given("use-fused-lightning-indexer") or f.given("use-fused-lightning-indexer-loss")
    return f.given("reset-attention-mask") and not (fused and f.given("use-sparse-flash-attn"))


RULES: tuple[Rule, ...] = (
    Rule(
        "rope-scaling-type",
        _longrope_missing,
        "longrope needs rope-scaling-original-max-position-embeddings, long-factor and short-factor, and "
        "long-mscale and short-mscale both set or both unset",
        "set those flags (long-mscale with short-mscale), or remove rope-scaling-type",
        ROTARY,
        versions=V26,
    ),
    # context parallelism (context-parallel-size above 1): the function's alibi and kvallgather-mask checks
    # are rules_26_mindspeed_pp_cp.py's (MindSpeed's copies run first); its kvallgather seq-length checks
    # need what Megatron's validate_args already requires (seq-length divisible by 2 x context-parallel-size)
    Rule(
        "use-kv-cache",
        lambda f: _cp(f) and f.given("use-kv-cache"),
        "is not supported with context parallelism (context-parallel-size above 1)",
        "remove use-kv-cache, or set context-parallel-size: 1",
        CP_FEATURE,
        versions=V26,
    ),
    Rule(
        "sliding-window",
        lambda f: _cp(f) and f.given("sliding-window") and f.num("seq-length") > f.num("sliding-window"),
        "below seq-length is not supported with context parallelism (context-parallel-size above 1)",
        "remove sliding-window (or make it at least seq-length), or set context-parallel-size: 1",
        CP_FEATURE,
        versions=V26,
    ),
    Rule(
        "spec",
        lambda f: _cp(f) and "deepseek4_spec" in str(f["spec"]) and _cp_algo(f) != "kvallgather_cp_algo",
        "a deepseek4_spec model with context parallelism (context-parallel-size above 1) needs "
        "context-parallel-algo: kvallgather_cp_algo",
        "set context-parallel-algo: kvallgather_cp_algo, or context-parallel-size: 1",
        CP_FEATURE,
        versions=V26,
    ),
    Rule(
        "context-parallel-algo",
        lambda f: (
            _cp(f)
            and _cp_algo(f) == "mamba_cp_algo"
            and f.num("num-attention-heads")
            % (f.num("context-parallel-size") * f.num("tensor-model-parallel-size"))
            != 0
        ),
        "mamba_cp_algo needs num-attention-heads divisible by context-parallel-size x "
        "tensor-model-parallel-size",
        "lower context-parallel-size (or tensor-model-parallel-size) to divide num-attention-heads",
        MAMBA_CP,
        versions=V26,
    ),
    Rule(
        "enable-mg2hf-convert",
        lambda f: f.given("enable-mg2hf-convert") and bool(f["lora-target-modules"]),
        "cannot be used with LoRA (lora-target-modules)",
        "remove enable-mg2hf-convert (the plan converts the weights back to HF after training)",
        CHECKPOINT,
        versions=V26,
    ),
    Rule(
        "moe-tp-extend-ep",
        lambda f: f.given("moe-tp-extend-ep") and bool(f["lora-target-modules"]),
        "cannot be used with LoRA (lora-target-modules)",
        "remove moe-tp-extend-ep, or train without LoRA",
        LORA,
        versions=V26,
    ),
    Rule(
        "quant-grads",
        lambda f: f.given("swap-optimizer") and (f.given("quant-grads") or f.given("quant-states")),
        "quant-grads and quant-states cannot be used with swap-optimizer",
        "remove quant-grads / quant-states, or swap-optimizer",
        LOW_PRECISION,
        versions=V26,
    ),
    Rule(
        "moe-fb-overlap",
        lambda f: (
            f.given("quant-grads")
            and f.given("moe-fb-overlap")
            and not f.given("no-gradient-accumulation-fusion")
        ),
        "with quant-grads needs no-gradient-accumulation-fusion (gradient accumulation fusion is on "
        "by default)",
        "set no-gradient-accumulation-fusion: true, or remove quant-grads",
        LOW_PRECISION,
        versions=V26,
    ),
    Rule(
        "fp8-recipe",
        lambda f: (
            _fp8(f)
            and (
                (f["fp8-format"] == "hif8" and _fp8_recipe(f) != "tensorwise")
                or (f.given("use-ascend-mc2") and _fp8_recipe(f) != "mxfp8")
            )
        ),
        "must be tensorwise with fp8-format hif8, and mxfp8 with FP8 (fp8-format) and use-ascend-mc2 "
        "(it defaults to delayed)",
        "set fp8-recipe: tensorwise (hif8) or mxfp8 (use-ascend-mc2), or remove fp8-format",
        TE_BASIC,
        versions=V26,
    ),
    Rule(
        "transformer-impl",
        lambda f: (
            f.flags.get("transformer-impl", "transformer_engine") == "transformer_engine"
            and f.given("use-legacy-models")
        ),
        "transformer_engine works only with MCore models (no use-legacy-models)",
        "remove use-legacy-models (or set transformer-impl: local)",
        TE_BASIC,
        versions=V26,
    ),
    Rule(
        "moe-expert-capacity-factor",
        lambda f: f.given("moe-expert-capacity-factor") and f["moe-token-dispatcher-type"] == "allgather",
        "does not work with moe-token-dispatcher-type allgather (its default)",
        "set moe-token-dispatcher-type: alltoall (or alltoall_seq), or remove moe-expert-capacity-factor",
        MOE_ROUTER,
        versions=V26,
    ),
    Rule(
        "moe-expert-capacity-factor",
        lambda f: f.given("moe-expert-capacity-factor") and f.num("moe-expert-capacity-factor") < 0,
        "below 0 stops MindSpeed-LLM 26.1.0 with a TypeError: its check of a negative factor calls "
        "print_rank0_by_args without the args it needs",
        "remove moe-expert-capacity-factor (no factor drops no tokens, what a negative one means)",
        MOE_ROUTER + " (its print_rank0_by_args call for a factor below 0)",
        versions=V26,
    ),
    Rule(
        "optimizer",
        lambda f: f["optimizer"] == "muon" and f.given("fp16"),
        "muon does not support fp16 (use bf16 or fp32)",
        "replace fp16 with bf16, or use another optimizer",
        MUON,
        versions=V26,
    ),
    Rule(
        "num-layer-list",
        lambda f: f.given("num-layer-list") and f["schedules-method"] == "dualpipev",
        "cannot be used with schedules-method dualpipev",
        "remove num-layer-list, or schedules-method",
        NUM_LAYER_LIST,
        versions=V26,
    ),
    Rule(
        "enable-mhc",
        _mhc_broken,
        "needs use-flash-attn (ulysses_cp_algo turns it on), and with context-parallel-size above 1 "
        "context-parallel-algo ulysses_cp_algo or kvallgather_cp_algo",
        "set use-flash-attn (and context-parallel-algo: ulysses_cp_algo with context parallelism), or remove "
        "enable-mhc",
        MHC,
        versions=V26,
    ),
    Rule(
        "use-fused-mhc",
        lambda f: (
            f.given("enable-mhc")
            and f.given("use-fused-mhc")
            and (f.flags.get("hc-mult", 4) != 4 or f.flags.get("hc-sinkhorn-iters", 20) != 20)
        ),
        "supports only hc-mult 4 and hc-sinkhorn-iters 20 (their defaults)",
        "remove hc-mult and hc-sinkhorn-iters (or set 4 and 20), or remove use-fused-mhc",
        MHC,
        versions=V26,
    ),
    Rule(
        "mtp-num-layers",
        lambda f: (
            f.given("mtp-num-layers")
            and f.num("mtp-num-layers") != 0
            and _cp(f)
            and f.given("reset-attention-mask")
        ),
        "multi-token prediction is not supported with context parallelism (context-parallel-size above 1) "
        "on packed data (reset-attention-mask)",
        "remove mtp-num-layers, or reset-attention-mask, or set context-parallel-size: 1",
        MTP,
        versions=V26,
    ),
    Rule(
        "enable-dsa-indexer",
        _dsa_broken,
        "needs use-flash-attn (ulysses_cp_algo turns it on); with context-parallel-size above 1 "
        "context-parallel-algo ulysses_cp_algo or "
        "kvallgather_cp_algo; with reset-attention-mask (TND) use-fused-lightning-indexer, "
        "use-fused-lightning-indexer-loss and use-sparse-flash-attn",
        "set those flags, or remove enable-dsa-indexer",
        DSA,
        versions=V26,
    ),
    Rule(
        "moe-grouped-gemm",
        lambda f: f.given("num-experts") and f.given("use-ascend-mc2") and f.given("moe-grouped-gemm"),
        "is not supported with use-ascend-mc2 on a mixture-of-experts model (num-experts)",
        "remove moe-grouped-gemm, or use-ascend-mc2",
        BLOCK,
        versions=V26,
    ),
)
