"""The MoE flags of Megatron core_r0.8.0 (`training/arguments.py` `_add_moe_args`) and MindSpeed-LLM 2.1.0
(`features_manager/common/moe_router.py`, `training/arguments.py` `_add_moe_args`,
`_add_deepseek_moe_args`), sorted into the trainer's four lists (`engine/train/flags.py` merges them), and
their rules. No torch import.
"""

from __future__ import annotations

import argparse
from typing import Any

from ascendfactory.engine.train.moe.spec import DISPATCHERS, DROP_POLICIES, LOAD_BALANCING, SCORE_FUNCTIONS
from ascendfactory.errors import Problem

BOOL, VALUE = "bool", "value"

HONOURED: dict[str, tuple[str, Any, Any, str]] = {
    "--expert-model-parallel-size": (
        VALUE,
        1,
        int,
        "expert parallelism: the experts of each MoE layer split over this many data-parallel ranks, tokens "
        "exchanged by all-to-all",
    ),
    "--moe-router-load-balancing-type": (
        VALUE,
        "aux_loss",
        str,
        "aux_loss (Switch load-balancing loss) | none (optionally --seq-aux) | softmax_topk",
    ),
    "--moe-aux-loss-coeff": (VALUE, 0.0, float, "coefficient of the load-balancing loss"),
    "--moe-z-loss-coeff": (VALUE, None, float, "coefficient of the router z-loss"),
    "--seq-aux": (
        BOOL,
        False,
        None,
        "DeepSeek's sequence-level balance loss (with load balancing type none)",
    ),
    "--moe-router-pre-softmax": (BOOL, False, None, "softmax over all experts, then top-k (default: after)"),
    "--moe-router-score-function": (VALUE, "softmax", str, "softmax | sigmoid (load balancing type none)"),
    "--norm-topk-prob": (BOOL, False, None, "renormalise the top-k probabilities to sum to 1"),
    "--routed-scaling-factor": (VALUE, None, float, "scale the top-k probabilities (type none)"),
    "--n-group": (VALUE, None, int, "expert groups for group-limited routing (default: EP)"),
    "--topk-group": (VALUE, None, int, "groups each token may use (group-limited routing)"),
    "--moe-expert-capacity-factor": (
        VALUE,
        None,
        float,
        "expert capacity factor: tokens past it are dropped",
    ),
    "--moe-pad-expert-input-to-capacity": (BOOL, False, None, "pad every expert's input to its capacity"),
    "--moe-token-drop-policy": (VALUE, "probs", str, "probs | position: which tokens a full expert drops"),
    "--moe-token-dispatcher-type": (VALUE, "allgather", str, "allgather | alltoall (the same numerics here)"),
    "--moe-grouped-gemm": (BOOL, False, None, "experts saved in Megatron's GroupedMLP layout (weight1/2)"),
    "--router-gating-in-fp32": (BOOL, False, None, "router logits in float32"),
    "--moe-input-jitter-eps": (
        VALUE,
        None,
        float,
        "multiply the router input by U(1-eps, 1+eps) in training",
    ),
    "--moe-layer-recompute": (BOOL, False, None, "recompute the MoE layers in the backward"),
    "--moe-per-layer-logging": (BOOL, False, None, "per-layer load-balancing losses to TensorBoard"),
}

# Model shape, checked against config.json (arch.check_architecture)
ARCHITECTURE: dict[str, tuple[str, Any, Any, str]] = {
    "--num-experts": (VALUE, None, int, "== num_experts (Qwen3-MoE) / n_routed_experts (DeepSeek)"),
    "--moe-router-topk": (VALUE, None, int, "== num_experts_per_tok"),
    "--moe-intermediate-size": (VALUE, None, int, "== moe_intermediate_size"),
    "--n-shared-experts": (VALUE, None, int, "== n_shared_experts"),
    "--first-k-dense-replace": (VALUE, None, int, "the first dense layers (with --moe-layer-freq)"),
    "--moe-layer-freq": (VALUE, None, int, "every N-th layer is MoE (with --first-k-dense-replace)"),
}

# DeepSeek's attention and rotary embedding (MindSpeed-LLM 2.1.0 `training/arguments.py` `_add_mla_args`,
# `_add_yarn_args`), checked against config.json: the HF model computes them (`arch._deepseek_problems`)
ARCHITECTURE.update(
    {
        "--multi-head-latent-attention": (BOOL, False, None, "kv_lora_rank in config.json (DeepSeek MLA)"),
        "--q-lora-rank": (VALUE, None, int, "== q_lora_rank"),
        "--kv-lora-rank": (VALUE, None, int, "== kv_lora_rank"),
        "--qk-nope-head-dim": (VALUE, None, int, "== qk_nope_head_dim"),
        "--qk-rope-head-dim": (VALUE, None, int, "== qk_rope_head_dim"),
        "--v-head-dim": (VALUE, None, int, "== v_head_dim"),
        "--vocab-size": (VALUE, None, int, "== vocab_size"),
        "--rope-scaling-type": (VALUE, None, str, "== rope_scaling.type (yarn)"),
        "--rope-scaling-factor": (VALUE, None, float, "== rope_scaling.factor"),
        "--rope-scaling-beta-fast": (VALUE, None, float, "== rope_scaling.beta_fast"),
        "--rope-scaling-beta-slow": (VALUE, None, float, "== rope_scaling.beta_slow"),
        "--rope-scaling-mscale": (VALUE, None, float, "== rope_scaling.mscale"),
        "--rope-scaling-mscale-all-dim": (VALUE, None, float, "== rope_scaling.mscale_all_dim"),
        "--rope-scaling-original-max-position-embeddings": (
            VALUE,
            None,
            int,
            "== rope_scaling.original_max_position_embeddings",
        ),
    }
)

IGNORED: dict[str, str] = {
    "--spec": "list",
    "--shape-order": VALUE,
    "--no-shared-storage": BOOL,
    "--dataloader-type": VALUE,
    "--moe-permutation-async-comm": BOOL,
    "--moe-alltoall-overlap-comm": BOOL,
    "--moe-allgather-overlap-comm": BOOL,
    "--use-fused-moe-token-permute-and-unpermute": BOOL,
    "--gemm-gradient-accumulation-fusion": BOOL,
    "--moe-zero-memory": VALUE,
    "--moe-zero-memory-num-layers": VALUE,
    "--moe-train-capacity-factor": VALUE,
    "--moe-unperm2-mem-optim": BOOL,
}

IGNORED_WHY: dict[str, str] = {
    "--spec": "MindSpeed-LLM builds its layers from this module spec; this trainer builds the HF model's own "
    "modules (the spec's names are the checkpoint's, which the checkpoint bridge maps)",
    "--dataloader-type": "Megatron's cyclic sampler reshuffles the samples every epoch; this trainer feeds "
    "its own shuffled order of the same samples (engine/train/dataset.py) with either value",
    "--moe-zero-memory": "MindSpeed recomputes the MoE activation functions and permutations in the backward "
    "to hold fewer activations (the same values); use --moe-layer-recompute for that here",
    "--moe-train-capacity-factor": "MindSpeed-LLM reads it only in the legacy (non-mcore) SwitchMLP layer; "
    "the mcore MoE layer uses --moe-expert-capacity-factor",
}

REFUSED: dict[str, str] = {
    "--moe-extended-tp": "experts sharded over TP x EP (moe-extended-tp)",
    "--moe-tp-extend-ep": "experts spread over the TP group (moe-tp-extend-ep)",
    "--shared-expert-gate": "a gated shared expert (Qwen2-MoE)",
    "--moe-router-enable-expert-bias": "aux-loss-free routing with an expert bias (DeepSeek-V3)",
    "--moe-device-level-aux-loss-coeff": "group-limited greedy routing's device-level loss",
    "--moe-comm-aux-loss-coeff": "group-limited greedy routing's communication loss",
    "--fix-router": "a fixed router",
    "--moe-revert-type-after-topk": "fp32 routing probabilities after the top-k",
}
REFUSED_KIND = {
    "--moe-extended-tp": BOOL,
    "--moe-tp-extend-ep": BOOL,
    "--shared-expert-gate": BOOL,
    "--moe-router-enable-expert-bias": BOOL,
    "--fix-router": BOOL,
    "--moe-revert-type-after-topk": BOOL,
}


def problems(args: argparse.Namespace) -> list[Problem]:
    """The MoE flags' own rules (Megatron's TransformerConfig.__post_init__ / validate_args, MindSpeed-LLM's
    `_validate_moe_args`); the ones that need the model or the world size are checked in the trainer."""
    out: list[Problem] = []

    def bad(flag: str, message: str, fix: str) -> None:
        out.append(Problem(key=flag, message=message, fix=fix, source="command line"))

    choices = {
        "--moe-router-load-balancing-type": (args.moe_router_load_balancing_type, LOAD_BALANCING),
        "--moe-token-dispatcher-type": (args.moe_token_dispatcher_type, DISPATCHERS),
        "--moe-token-drop-policy": (args.moe_token_drop_policy, DROP_POLICIES),
        "--moe-router-score-function": (args.moe_router_score_function, SCORE_FUNCTIONS),
    }
    for flag, (value, allowed) in choices.items():
        if value not in allowed:
            other = (
                " (group_limited_greedy, noaux_tc, ...: the mindspeed-llm backend)"
                if "balancing" in flag
                else ""
            )
            bad(
                flag,
                f"'{value}' is not supported by the embedded trainer",
                f"use one of: {', '.join(allowed)}{other}",
            )
    ep = args.expert_model_parallel_size
    if ep is None or ep < 1:
        bad("--expert-model-parallel-size", f"must be >= 1, got {ep}", "give 1 or more")
        ep = 1
    factor = args.moe_expert_capacity_factor
    if factor is not None and factor < 0:  # Megatron: a negative factor means no dropping
        args.moe_expert_capacity_factor = factor = None
    rules = [  # (broken, flag, Megatron's / MindSpeed-LLM's message, fix)
        (
            ep > 1 and args.fp16,
            "--expert-model-parallel-size",
            "Expert parallelism is not supported with fp16 training.",
            "use --bf16, or --expert-model-parallel-size 1",
        ),
        (
            ep > 1 and args.use_distributed_optimizer,
            "--use-distributed-optimizer",
            "the embedded trainer's distributed optimizer does not shard expert-parallel parameters "
            "(Megatron chains a second one over the data-modulo-expert-parallel group)",
            "drop --use-distributed-optimizer (the optimizer state stays replicated), or use "
            "--expert-model-parallel-size 1",
        ),
        (
            args.num_experts is not None and args.num_experts % ep != 0,
            "--expert-model-parallel-size",
            "Number of experts should be a multiple of expert model parallel_size "
            f"({args.num_experts} % {ep})",
            "choose an EP size dividing --num-experts",
        ),
        (
            factor is not None and args.moe_token_dispatcher_type != "alltoall",
            "--moe-expert-capacity-factor",
            "moe_expert_capacity_factor only works with alltoall token dispatcher",
            "add --moe-token-dispatcher-type alltoall",
        ),
        (
            factor is not None and args.moe_router_load_balancing_type not in ("aux_loss", "none"),
            "--moe-expert-capacity-factor",
            "moe_expert_capacity_factor only works with aux_loss or none load balancing",
            "use --moe-router-load-balancing-type aux_loss or none",
        ),
        (
            args.moe_pad_expert_input_to_capacity and factor is None,
            "--moe-pad-expert-input-to-capacity",
            "moe_expert_capacity_factor must be set to use moe_pad_expert_input_to_capacity",
            "add --moe-expert-capacity-factor, or drop the flag",
        ),
        (
            args.seq_aux and args.moe_pad_expert_input_to_capacity,
            "--seq-aux",
            "the sequence-level loss counts each token's experts; padded expert inputs have none",
            "drop --moe-pad-expert-input-to-capacity or --seq-aux",
        ),
        (
            None not in (args.moe_router_topk, args.num_experts) and args.moe_router_topk > args.num_experts,
            "--moe-router-topk",
            f"{args.moe_router_topk} > --num-experts {args.num_experts}",
            "route to at most --num-experts experts",
        ),
        (
            (args.first_k_dense_replace is None) != (args.moe_layer_freq is None),
            "--moe-layer-freq" if args.moe_layer_freq is None else "--first-k-dense-replace",  # missing
            "First-k-dense-replace and moe-layer-freq must be set together.",
            "give both --first-k-dense-replace and --moe-layer-freq, or neither",
        ),
        (
            args.topk_group is not None and args.moe_router_load_balancing_type != "none",
            "--topk-group",
            "group-limited routing applies with --moe-router-load-balancing-type none (MindSpeed-LLM's "
            "topk_router_routing)",
            "add --moe-router-load-balancing-type none, or drop it",
        ),
    ]
    for broken, flag, message, fix in rules:
        if broken:
            bad(flag, message, fix)
    return out


def unused(args: argparse.Namespace) -> list[str]:
    """Flags given that change nothing with the chosen routing type (MindSpeed-LLM reads them only in
    another branch of `topk_router_routing`): warned about, as MindSpeed-LLM runs them silently."""
    kind = args.moe_router_load_balancing_type
    out = []
    if args.seq_aux and kind != "none":
        out.append("--seq-aux")
    if args.routed_scaling_factor is not None and kind != "none":
        out.append("--routed-scaling-factor")
    if args.moe_router_score_function != "softmax" and kind != "none":
        out.append("--moe-router-score-function")
    if args.norm_topk_prob and kind != "aux_loss":
        out.append("--norm-topk-prob")
    return out
