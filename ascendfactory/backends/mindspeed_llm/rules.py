"""Rules across training flags that MindSpeed-LLM 2.1.0 and its Megatron-LM core_r0.8.0 enforce before any
device is used, as data: each names the flag a user sets to break it, says why in the framework's terms,
and cites the code that refuses it. Found by the differential harness (tests/diffval, issue 25): each was a
case we accepted and the framework refused.

The rules read the flags the plan hands the training program (the architecture flags filled from the
model, the user's flags, the plan's own), with the framework's defaults for flags not given. A rule whose
flags hold a value of the wrong kind is skipped (that value is refused by the argparse check already).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# argparse defaults of the flags the rules read (Megatron-LM core_r0.8.0 megatron/training/arguments.py,
# MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py and features_manager/common/moe_router.py)
DEFAULTS: dict[str, Any] = {
    "lr-warmup-iters": 0,
    "lr-warmup-samples": 0,
    "min-lr": 0.0,
    "weight-decay-incr-style": "constant",
    "expert-model-parallel-size": 1,
    "context-parallel-size": 1,
    "pipeline-model-parallel-size": 1,
    "tensor-model-parallel-size": 1,
    "output-layer-slice-num": 1,
    "moe-zero-memory": "disable",
    "moe-token-dispatcher-type": "allgather",
    "overlap-p2p-comm": True,
    "position-embedding-type": "learned_absolute",
    "normalization": "LayerNorm",
    "moe-router-load-balancing-type": "aux_loss",
    "padded-base-length": 128,
    "num-dataset-builder-threads": 1,
}
MEGATRON = "Megatron-LM core_r0.8.0 megatron/training/arguments.py validate_args"
LLM = "MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py"
# dist_checkpointing/validation.py StrictHandling: argparse's choices for --dist-ckpt-strictness
STRICT_HANDLING = (
    "assume_ok_unexpected",
    "log_unexpected",
    "log_all",
    "raise_unexpected",
    "raise_all",
    "return_unexpected",
    "return_all",
    "ignore_all",
)


class Flags:
    """The training flags as the program sees them: given (a value; true for a switch) or the default."""

    def __init__(self, flags: Mapping[str, Any]) -> None:
        self.flags = {k: v for k, v in flags.items() if v is not None and v is not False}

    def given(self, key: str) -> bool:
        return key in self.flags

    def __getitem__(self, key: str) -> Any:
        return self.flags.get(key, DEFAULTS.get(key))

    def num(self, key: str) -> float:
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(key)
        return float(value)


@dataclass(frozen=True)
class Rule:
    key: str  # the flag the problem names (the one set to break the rule)
    # called with the Flags; a rule made in a loop binds its loop variables as the lambda's defaults
    broken: Callable[..., Any]
    message: str  # the framework's refusal, in our words; names the other flags involved
    fix: str
    source: str  # the framework code that refuses it


def _moe(f: Flags) -> bool:
    """A MoE model: num-experts given and not 0 (Megatron's validate_args turns 0 into None)."""
    return f.given("num-experts") and f["num-experts"] != 0


def _vpp_pp(f: Flags) -> bool:
    # PP 2 with VPP passes: MindSpeed-LLM's _store_variables hides VPP from Megatron's check
    return f.given("num-layers-per-virtual-pipeline-stage") and f.num("pipeline-model-parallel-size") < 2


RULES: tuple[Rule, ...] = (
    *(
        Rule(
            old,
            lambda f, old=old: f.given(old),
            f"--{old} is no longer valid in Megatron-LM; use --{new}",
            f"remove {old}; set {new} instead",
            MEGATRON + " (deprecated arguments)",
        )
        for old, new in (
            ("batch-size", "micro-batch-size"),
            ("warmup", "lr-warmup-fraction"),
            ("model-parallel-size", "tensor-model-parallel-size"),
        )
    ),
    *(
        Rule(
            key,
            lambda f, key=key: f.given("train-iters") and f.given(key) and f[key] != 0,
            f"iteration-based training (train-iters) takes no {key}",
            f"remove {key}, or train by samples (remove train-iters, set train-samples)",
            MEGATRON + " (iteration-based training)",
        )
        for key in ("train-samples", "lr-decay-samples", "lr-warmup-samples", "rampup-batch-size")
    ),
    Rule(
        "lr-warmup-iters",
        lambda f: f.given("lr-warmup-fraction") and f.num("lr-warmup-iters") != 0,
        "only one of lr-warmup-fraction and lr-warmup-iters can be given",
        "remove one of them",
        MEGATRON,
    ),
    Rule(
        "encoder-num-layers",
        lambda f: f.given("encoder-num-layers") and f.given("num-layers"),
        "cannot be given with num-layers (filled from the model)",
        "remove encoder-num-layers",
        MEGATRON,
    ),
    Rule(
        "encoder-seq-length",
        lambda f: f.given("encoder-seq-length") and f.given("seq-length"),
        "cannot be given with seq-length (Megatron sets it from seq-length)",
        "remove encoder-seq-length; set seq-length",
        MEGATRON,
    ),
    Rule(
        "min-lr",
        lambda f: f.given("lr") and f.num("min-lr") > f.num("lr"),
        "min-lr must not exceed lr",
        "set min-lr at most lr",
        MEGATRON + " (assert args.min_lr <= args.lr)",
    ),
    Rule(
        "weight-decay-incr-style",
        lambda f: (
            f["weight-decay-incr-style"] != "constant"
            and not (f.given("start-weight-decay") and f.given("end-weight-decay"))
        ),
        "a weight-decay-incr-style other than constant needs start-weight-decay and end-weight-decay",
        "set start-weight-decay and end-weight-decay, or weight-decay-incr-style: constant",
        MEGATRON,
    ),
    *(
        Rule(
            key,
            lambda f, key=key: f["weight-decay-incr-style"] == "constant" and f.given(key),
            f"{key} needs a weight-decay-incr-style other than constant (with it, weight-decay is used)",
            f"remove {key}, or set weight-decay-incr-style: linear or cosine",
            MEGATRON,
        )
        for key in ("start-weight-decay", "end-weight-decay")
    ),
    Rule(
        "expert-model-parallel-size",
        lambda f: f.num("expert-model-parallel-size") > 1 and not _moe(f),
        "expert parallelism needs num-experts (a MoE model)",
        "remove expert-model-parallel-size, or set num-experts",
        MEGATRON,
    ),
    *(
        Rule(
            key,
            lambda f, key=key: f.given(key) and f[key] != [] and f.given("data-path"),
            f"{key} with data-path (the plan's, from the experiment's data): one data source only",
            f"remove {key}",
            MEGATRON + " (data blend checks)",
        )
        for key in ("train-data-path", "valid-data-path", "test-data-path")
    ),
    Rule(
        "num-layers-per-virtual-pipeline-stage",
        _vpp_pp,
        "the interleaved schedule needs pipeline-model-parallel-size 2 or more",
        "remove num-layers-per-virtual-pipeline-stage, or raise pipeline-model-parallel-size",
        MEGATRON,
    ),
    Rule(
        "defer-embedding-wgrad-compute",
        lambda f: (
            f.given("defer-embedding-wgrad-compute")
            and (f.num("pipeline-model-parallel-size") < 2 or f.given("no-gradient-accumulation-fusion"))
        ),
        "needs pipeline-model-parallel-size 2 or more and gradient accumulation fusion "
        "(no no-gradient-accumulation-fusion)",
        "remove defer-embedding-wgrad-compute",
        "Megatron-LM core_r0.8.0 megatron/core/model_parallel_config.py __post_init__",
    ),
    Rule(
        "output-layer-slice-num",
        lambda f: (
            f.num("output-layer-slice-num") < 1
            or (
                f.num("output-layer-slice-num") > 1
                and (
                    f.num("tensor-model-parallel-size") > 1
                    or (
                        f.given("padded-vocab-size")
                        and f.num("padded-vocab-size") % f.num("output-layer-slice-num")
                    )
                )
            )
        ),
        "must be 1 or more; above 1 it needs tensor-model-parallel-size 1 and must divide padded-vocab-size",
        "set output-layer-slice-num: 1 (the default), or a divisor of the vocabulary with TP 1",
        LLM + " _validate_output_layer_slice_num",
    ),
    Rule(
        "neat-pack",
        lambda f: f.given("neat-pack") and not f.given("reset-position-ids"),
        "needs reset-position-ids",
        "set reset-position-ids: true",
        LLM + " _validate_create_attention_mask_in_dataloader",
    ),
    *(
        Rule(
            key,
            lambda f, key=key: (
                f.given(key) and not (f.given("moe-permutation-async-comm") and f.given("moe-grouped-gemm"))
            ),
            "needs moe-permutation-async-comm and moe-grouped-gemm",
            "set both, or remove " + key,
            LLM + " _validate_moe_args",
        )
        for key in ("moe-alltoall-overlap-comm", "moe-allgather-overlap-comm")
    ),
    Rule(
        "moe-zero-memory-num-layers",
        lambda f: f.given("moe-zero-memory-num-layers") and f["moe-zero-memory"] == "disable",
        "needs moe-zero-memory enabled",
        "set moe-zero-memory (level0 or level1), or remove moe-zero-memory-num-layers",
        LLM + " _validate_moe_args",
    ),
    *(
        Rule(
            key,
            lambda f, key=key: f.given(key) and not _moe(f),
            "first-k-dense-replace and moe-layer-freq are for MoE models (num-experts)",
            f"remove {key}, or set num-experts",
            LLM + " _validate_transformer_block_build_layers",
        )
        for key in ("first-k-dense-replace", "moe-layer-freq")
    ),
    Rule(
        "schedules-method",
        lambda f: f["schedules-method"] == "dualpipev" and not f.given("moe-fb-overlap"),
        "dualpipev needs moe-fb-overlap (1f1b overlap)",
        "set moe-fb-overlap: true, or remove schedules-method",
        LLM + " _validate_dualpipe_args",
    ),
    Rule(
        "swiglu",
        lambda f: f.given("use-fused-swiglu") and not f.given("swiglu"),
        "use-fused-swiglu needs swiglu",
        "remove use-fused-swiglu, or keep swiglu: true",
        LLM + " _validate_fused_opts",
    ),
    Rule(
        "tp-2d",
        lambda f: (
            f.given("tp-2d")
            and (
                f.given("sequence-parallel")
                or f.given("use-fused-rmsnorm")
                or f.num("expert-model-parallel-size") > 1
            )
        ),
        "2D tensor parallelism supports neither sequence-parallel, use-fused-rmsnorm nor expert parallelism",
        "remove tp-2d, or those flags",
        LLM + " _valid_tp_2d_args",
    ),
    Rule(
        "use-fused-ring-attention-update",
        lambda f: f.given("use-fused-ring-attention-update") and f.num("context-parallel-size") <= 1,
        "works only with context-parallel-size 2 or more",
        "remove use-fused-ring-attention-update",
        LLM + " _validate_cp_args",
    ),
    Rule(
        "moe-router-load-balancing-type",
        lambda f: f["moe-router-load-balancing-type"] == "group_limited_greedy" and not f.given("topk-group"),
        "group_limited_greedy needs topk-group",
        "set topk-group (and routed-scaling-factor)",
        "MindSpeed-LLM 2.1.0 mindspeed_llm/features_manager/common/moe_router.py",
    ),
    Rule(
        "dist-ckpt-strictness",
        lambda f: f.given("dist-ckpt-strictness") and str(f["dist-ckpt-strictness"]) not in STRICT_HANDLING,
        "is not one of its choices: " + ", ".join(STRICT_HANDLING),
        "use one of: " + ", ".join(STRICT_HANDLING),
        MEGATRON + " (argparse choices from dist_checkpointing StrictHandling)",
    ),
    Rule(
        "micro-batch-size",
        lambda f: not f.given("micro-batch-size"),
        "required (Megatron has no default)",
        "set micro-batch-size",
        MEGATRON + " (assert args.micro_batch_size is not None)",
    ),
    Rule(
        "save-interval",
        lambda f: f.given("save") and not f.given("save-interval"),
        "required: the plan always passes save (af_output_dir/saved_checkpoints)",
        "set save-interval",
        MEGATRON + " (assert args.save_interval is not None when args.save)",
    ),
    Rule(
        "hidden-size",
        lambda f: (
            not f.given("kv-channels")
            and f.num("num-attention-heads") >= 1
            and f.num("hidden-size") % f.num("num-attention-heads") != 0
        ),
        "must be a multiple of num-attention-heads (without kv-channels)",
        "set hidden-size to a multiple of num-attention-heads, or set kv-channels",
        MEGATRON + " (assert args.hidden_size % args.num_attention_heads == 0)",
    ),
    Rule(
        "tp-comm-overlap",
        lambda f: f.given("tp-comm-overlap") and not f.given("sequence-parallel"),
        "needs sequence-parallel",
        "set sequence-parallel: true, or remove tp-comm-overlap",
        MEGATRON,
    ),
    Rule(
        "yaml-cfg",
        lambda f: f.given("yaml-cfg") and not os.path.isfile(str(f["yaml-cfg"])),
        "names no file (Megatron opens it before anything else)",
        "give an existing YAML file, or remove yaml-cfg",
        MEGATRON + " parse_args",
    ),
    Rule(
        "retro-project-dir",
        lambda f: (
            f.given("retro-project-dir")
            and not os.path.isfile(os.path.join(str(f["retro-project-dir"]), "config.json"))
        ),
        "holds no config.json (load_retro_args reads it)",
        "give a Retro project directory, or remove retro-project-dir",
        MEGATRON + " load_retro_args",
    ),
    Rule(
        "retro-add-retriever",
        lambda f: f.given("retro-add-retriever") and not f.given("retro-project-dir"),
        "needs retro-project-dir (train-samples is loaded from the Retro config)",
        "remove retro-add-retriever",
        MEGATRON,
    ),
    *(
        Rule(
            key,
            lambda f, key=key, want=want, flag=flag: f.given(flag) and f[key] != want,
            f"{flag} needs {key}: {want}",
            f"set {key}: {want}, or remove {flag}",
            LLM + " _validate_fused_opts",
        )
        for key, want, flag in (
            ("normalization", "RMSNorm", "use-fused-rmsnorm"),
            ("position-embedding-type", "rope", "use-fused-rotary-pos-emb"),
        )
    ),
    Rule(
        "use-glm-rope",
        lambda f: f.given("use-glm-rope") and f.given("use-fused-rotary-pos-emb"),
        "fused rotary embedding (use-fused-rotary-pos-emb) is not supported with glm rope",
        "remove use-fused-rotary-pos-emb, or use-glm-rope",
        LLM + " _validate_position_embedding",
    ),
    Rule(
        "use-fused-mlp",
        lambda f: (
            f.given("use-fused-mlp")
            and not (
                f.given("swiglu")
                and (
                    f.given("lora-fusion")
                    or (f.given("sequence-parallel") and f.num("tensor-model-parallel-size") > 1)
                )
            )
        ),
        "needs swiglu, and sequence-parallel (with tensor-model-parallel-size 2 or more) or lora-fusion",
        "remove use-fused-mlp",
        LLM + " _validate_mlp_fusion",
    ),
    Rule(
        "multi-head-latent-attention",
        lambda f: (
            f.given("multi-head-latent-attention")
            and (
                f.num("padded-base-length") < 1
                or not all(
                    f.given(k) for k in ("kv-lora-rank", "v-head-dim", "qk-rope-head-dim", "qk-nope-head-dim")
                )
            )
        ),
        "needs kv-lora-rank, v-head-dim, qk-rope-head-dim and qk-nope-head-dim "
        "(and padded-base-length 1 or more)",
        "set them, or remove multi-head-latent-attention",
        LLM + " _validate_mla",
    ),
    Rule(
        "mla-fa-divide-qk",
        lambda f: (
            f.given("mla-fa-divide-qk")
            and (f.num("context-parallel-size") > 1 or not f.given("reset-position-ids"))
        ),
        "needs reset-position-ids (TND layout) and context-parallel-size 1",
        "remove mla-fa-divide-qk",
        LLM + " _valid_fa_div_args",
    ),
    Rule(
        "rope-scaling-type",
        lambda f: (
            f["rope-scaling-type"] in ("yarn", "longrope")
            and not f.given("rope-scaling-original-max-position-embeddings")
        ),
        "yarn and longrope need rope-scaling-original-max-position-embeddings",
        "set rope-scaling-original-max-position-embeddings, or remove rope-scaling-type",
        LLM + " _validate_yarn / _validate_long_rope",
    ),
    Rule(
        "num-experts",
        lambda f: (
            _moe(f) and f.given("variable-seq-lengths") and f["moe-token-dispatcher-type"] == "allgather"
        ),
        "a MoE model with variable-seq-lengths needs moe-token-dispatcher-type: alltoall",
        "set moe-token-dispatcher-type: alltoall, or remove variable-seq-lengths",
        LLM + " _validate_instruction_finetune",
    ),
    Rule(
        "recompute-granularity",
        lambda f: f["recompute-granularity"] == "full" and not f.given("recompute-method"),
        "full recomputation needs recompute-method (uniform or block)",
        "set recompute-method: uniform or block, or recompute-granularity: selective",
        "Megatron-LM core_r0.8.0 megatron/core/transformer/transformer_config.py __post_init__",
    ),
    Rule(
        "num-dataset-builder-threads",
        lambda f: f.num("num-dataset-builder-threads") < 1,
        "must be 1 or more",
        "set num-dataset-builder-threads: 1 (the default) or more",
        MEGATRON,
    ),
    Rule(
        "moe-expert-capacity-factor",
        lambda f: f.given("moe-expert-capacity-factor") and f["moe-token-dispatcher-type"] != "alltoall",
        "works only with moe-token-dispatcher-type: alltoall",
        "set moe-token-dispatcher-type: alltoall, or remove moe-expert-capacity-factor",
        "Megatron-LM core_r0.8.0 megatron/core/transformer/transformer_config.py __post_init__",
    ),
    Rule(
        "num-layers",
        lambda f: f.num("num-layers") < 1,
        "must be 1 or more (TransformerConfig takes the square root of 2 x num-layers)",
        "set num-layers to the model's layer count (or remove it: it is read from the model)",
        "Megatron-LM core_r0.8.0 megatron/core/transformer/transformer_config.py",
    ),
    Rule(
        "moe-fb-overlap",
        lambda f: (
            f.given("moe-fb-overlap")
            and (
                any(
                    f.given(k)
                    for k in (
                        "moe-alltoall-overlap-comm",
                        "overlap-grad-reduce",
                        "moe-zero-memory-num-layers",
                        "moe-expert-capacity-factor",
                    )
                )
                or f["moe-token-dispatcher-type"] == "allgather"
                or f["moe-zero-memory"] == "level1"
            )
        ),
        "cannot be used with moe-alltoall-overlap-comm, overlap-grad-reduce, moe-zero-memory-num-layers or "
        "moe-expert-capacity-factor, and needs moe-token-dispatcher-type: alltoall (moe-zero-memory level0)",
        "remove moe-fb-overlap, or those flags",
        "MindSpeed 2c085cc9 mindspeed/features_manager/pipeline_parallel/fb_overlap_feature.py",
    ),
    Rule(
        "rotary-interleaved",
        lambda f: f.given("rotary-interleaved") and not f.given("no-rope-fusion"),
        "does not work with rope fusion (on unless no-rope-fusion)",
        "set no-rope-fusion: true, or remove rotary-interleaved",
        MEGATRON,
    ),
    Rule(
        "deterministic-mode",
        lambda f: f.given("deterministic-mode") and f.given("use-flash-attn"),
        "cannot be used with flash attention (use-flash-attn)",
        "remove deterministic-mode, or use-flash-attn",
        MEGATRON + " (deterministic mode)",
    ),
    Rule(
        "num-attention-heads",
        lambda f: f.num("num-attention-heads") < 1,
        "must be 1 or more",
        "set num-attention-heads to the model's head count (or remove it: it is read from the model)",
        MEGATRON + " (hidden-size % num-attention-heads)",
    ),
    Rule(
        "init-method-xavier-uniform",
        lambda f: f.given("init-method-xavier-uniform"),
        "makes Megatron-LM core_r0.8.0 pass TransformerConfig a keyword it does not take "
        "(scaled_init_method): "
        "the job fails building the model",
        "remove init-method-xavier-uniform",
        "Megatron-LM core_r0.8.0 megatron/training/arguments.py core_transformer_config_from_args",
    ),
    Rule(
        "enable-recompute-layers-per-pp-rank",
        lambda f: (
            f.given("enable-recompute-layers-per-pp-rank")
            and not (
                f.given("num-layers-per-virtual-pipeline-stage")
                and (
                    (f.given("recompute-granularity") and f["recompute-method"] == "block")
                    or f.given("swap-attention")
                    or f.given("recompute-activation-function")
                )
            )
        ),
        "needs num-layers-per-virtual-pipeline-stage and recomputation (recompute-method: block, "
        "swap-attention or recompute-activation-function)",
        "remove enable-recompute-layers-per-pp-rank",
        LLM + " _validate_recompute_args",
    ),
    Rule(
        "fp16-lm-cross-entropy",
        lambda f: f.given("fp16-lm-cross-entropy") and not f.given("fp16"),
        "needs fp16",
        "remove fp16-lm-cross-entropy",
        MEGATRON,
    ),
    Rule(
        "fp16",
        lambda f: f.given("fp16") and f.given("bf16"),
        "fp16 and bf16 cannot both be set",
        "keep one of fp16 and bf16",
        MEGATRON + " (assert not args.bf16)",
    ),
    Rule(
        "timing-log-level",
        lambda f: f.given("timing-log-level") and f["timing-log-level"] not in (0, 1, 2),
        "is not one of its choices: 0, 1, 2",
        "use 0, 1 or 2",
        MEGATRON + " (argparse choices=range(0, 3))",
    ),
    Rule(
        "enable-share-memory",
        lambda f: f.given("enable-share-memory") and not f.given("reset-position-ids"),
        "needs reset-position-ids",
        "set reset-position-ids: true, or remove enable-share-memory",
        "MindSpeed-LLM 2.1.0 mindspeed_llm/features_manager/common/data.py",
    ),
    Rule(
        "moe-pad-expert-input-to-capacity",
        lambda f: f.given("moe-pad-expert-input-to-capacity") and not f.given("moe-expert-capacity-factor"),
        "needs moe-expert-capacity-factor",
        "set moe-expert-capacity-factor, or remove moe-pad-expert-input-to-capacity",
        "MindSpeed-LLM 2.1.0 mindspeed_llm/features_manager/common/moe_router.py",
    ),
    Rule(
        "recompute-in-advance",
        lambda f: (
            f.given("recompute-in-advance")
            and (
                f["recompute-method"] == "uniform"
                or f["recompute-granularity"] == "selective"
                or not f.given("recompute-num-layers")
                or f.num("pipeline-model-parallel-size") <= 1
                or f["num-layers-per-virtual-pipeline-stage"] != 1
            )
        ),
        "needs recompute-num-layers, recompute-method block (not selective granularity), "
        "pipeline-model-parallel-size 2 or more and num-layers-per-virtual-pipeline-stage 1",
        "remove recompute-in-advance, or set those flags",
        LLM + " _validate_recompute_in_advance",
    ),
    Rule(
        "moe-zero-memory",
        lambda f: (
            f["moe-zero-memory"] != "disable"
            and (
                not (f.given("moe-alltoall-overlap-comm") or f.given("moe-fb-overlap"))
                or f.given("recompute-method")
            )
        ),
        "needs moe-alltoall-overlap-comm or moe-fb-overlap, and no recompute-method",
        "remove moe-zero-memory (disable), or set moe-alltoall-overlap-comm",
        LLM + " _validate_moe_args",
    ),
    Rule(
        "checkpoint-activations",
        lambda f: f.given("checkpoint-activations"),
        "is no longer valid in Megatron-LM (it prints so and exits); use recompute-activations, or "
        "recompute-granularity with recompute-method",
        "remove checkpoint-activations; set recompute-activations: true instead",
        MEGATRON,
    ),
    Rule(
        "distribute-saved-activations",
        lambda f: (
            f.given("distribute-saved-activations")
            and (
                f.num("tensor-model-parallel-size") <= 1
                or f["recompute-granularity"] != "full"
                or not f.given("recompute-method")
            )
        ),
        "needs tensor-model-parallel-size 2 or more, recompute-granularity: full and a recompute-method",
        "remove distribute-saved-activations, or set those flags",
        MEGATRON,
    ),
    Rule(
        "history-turns",
        lambda f: f.given("history-turns") and f.num("history-turns") < 0,
        "must be 0 or more",
        "set history-turns to 0 or more",
        LLM + " _validate_inference_args",
    ),
    Rule(
        "hf-chat-template",
        lambda f: f.given("hf-chat-template") and f.given("prompt-type"),
        "cannot be used with prompt-type",
        "remove prompt-type (here and in preprocess_data), or hf-chat-template",
        LLM + " _validate_inference_args",
    ),
    Rule(
        "decoder-seq-length",
        lambda f: (
            f.given("decoder-seq-length") and f.num("decoder-seq-length") > f.num("max-position-embeddings")
        ),
        "must not exceed max-position-embeddings",
        "lower decoder-seq-length, or remove it",
        MEGATRON + " (assert args.max_position_embeddings >= args.decoder_seq_length)",
    ),
)


def broken_rules(flags: Mapping[str, Any], skip: frozenset[str] | set[str] = frozenset()) -> list[Rule]:
    """The rules the flags break (a rule naming a key in `skip`, already refused, is not checked): these and
    the mixture-of-experts ones (`moe_rules.py`)."""
    from ascendfactory.backends.mindspeed_llm.moe_rules import MOE_RULES

    view = Flags(flags)
    out = []
    for rule in (*RULES, *MOE_RULES):
        if rule.key in skip:
            continue
        try:
            if rule.broken(view):
                out.append(rule)
        except (TypeError, ValueError):  # a value of the wrong kind: refused by the argparse check
            continue
    return out
