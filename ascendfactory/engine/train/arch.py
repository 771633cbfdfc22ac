"""Architecture flags vs the HF config.json: every mismatch reported at once, as one ConfigError."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.errors import ConfigError, Problem

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")


def _rope_theta(cfg: Any) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(getattr(cfg, "rope_theta", None) or params.get("rope_theta") or 10000.0)


def check_architecture(args: argparse.Namespace, cfg: Any) -> None:
    """ConfigError listing every architecture flag that disagrees with the HF config `cfg`."""
    problems: list[Problem] = []
    model_type = getattr(cfg, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            Problem(
                key="--tokenizer-name-or-path",
                message=f"config.json has model_type '{model_type}'",
                fix=f"the embedded trainer supports: {', '.join(SUPPORTED_MODEL_TYPES)}",
                source="command line",
            )
        )
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    qkv_bias = model_type == "qwen2" or bool(getattr(cfg, "attention_bias", False))

    def same(flag: str, given: Any, expected: Any, key: str) -> None:
        if given is None:
            return
        equal = math.isclose(given, expected, rel_tol=1e-6) if isinstance(given, float) else given == expected
        if not equal:
            problems.append(
                Problem(
                    key=flag,
                    message=f"{given} but config.json has {key} = {expected}",
                    fix=f"pass {flag} {expected}, or point --tokenizer-name-or-path at the "
                    "model the checkpoint was converted from",
                    source="command line",
                )
            )

    same("--num-layers", args.num_layers, cfg.num_hidden_layers, "num_hidden_layers")
    same("--hidden-size", args.hidden_size, cfg.hidden_size, "hidden_size")
    same("--ffn-hidden-size", args.ffn_hidden_size, cfg.intermediate_size, "intermediate_size")
    same("--num-attention-heads", args.num_attention_heads, heads, "num_attention_heads")
    same("--kv-channels", args.kv_channels, head_dim, "head_dim")
    same("--norm-epsilon", args.norm_epsilon, float(cfg.rms_norm_eps), "rms_norm_eps")
    same("--rotary-base", args.rotary_base, _rope_theta(cfg), "rope_theta")
    if args.group_query_attention:
        same("--num-query-groups", args.num_query_groups, kv, "num_key_value_heads")
    elif kv != heads and args.num_attention_heads is not None:
        problems.append(
            Problem(
                key="--group-query-attention",
                message=f"missing, but config.json has "
                f"num_key_value_heads = {kv} < num_attention_heads = {heads}",
                fix=f"add --group-query-attention --num-query-groups {kv}",
                source="command line",
            )
        )
    if args.swiglu or args.num_layers is not None:
        same("--swiglu", "silu" if args.swiglu else "gelu", cfg.hidden_act, "hidden_act")
    same("--normalization", args.normalization, "RMSNorm", "normalization (RMSNorm for Llama/Qwen)")
    if args.position_embedding_type is not None:
        same("--position-embedding-type", args.position_embedding_type, "rope", "rotary position embeddings")
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if args.untie_embeddings_and_output_weights and tied:
        problems.append(
            Problem(
                key="--untie-embeddings-and-output-weights",
                message="given, but config.json has tie_word_embeddings = true",
                fix="remove the flag",
                source="command line",
            )
        )
    if not args.untie_embeddings_and_output_weights and not tied and args.num_layers is not None:
        problems.append(
            Problem(
                key="--untie-embeddings-and-output-weights",
                message="missing, but config.json has tie_word_embeddings = false",
                fix="add the flag",
                source="command line",
            )
        )
    if args.add_qkv_bias != qkv_bias and (args.add_qkv_bias or args.num_layers is not None):
        problems.append(
            Problem(
                key="--add-qkv-bias",
                message=f"{'given' if args.add_qkv_bias else 'missing'}, "
                f"but the {model_type} model {'has' if qkv_bias else 'has no'} q/k/v bias",
                fix=("add" if qkv_bias else "remove") + " --add-qkv-bias",
                source="command line",
            )
        )
    if args.qk_layernorm and model_type != "qwen3":
        problems.append(
            Problem(
                key="--qk-layernorm",
                message=f"given, but {model_type} has no q/k norm",
                fix="remove the flag",
                source="command line",
            )
        )
    if getattr(cfg, "mlp_bias", False):
        problems.append(
            Problem(
                key="mlp_bias",
                message="config.json has mlp_bias = true",
                fix="the embedded trainer supports models without MLP bias",
            )
        )
    if args.max_position_embeddings is not None and args.seq_length > args.max_position_embeddings:
        problems.append(
            Problem(
                key="--seq-length",
                message=f"{args.seq_length} > --max-position-embeddings {args.max_position_embeddings}",
                fix="lower --seq-length",
                source="command line",
            )
        )
    if args.padded_vocab_size is not None and args.padded_vocab_size < cfg.vocab_size:
        problems.append(
            Problem(
                key="--padded-vocab-size",
                message=f"{args.padded_vocab_size} < vocab_size {cfg.vocab_size}",
                fix=f"use at least {cfg.vocab_size}",
                source="command line",
            )
        )
    if problems:
        raise ConfigError(problems)


def padded_vocab_size(args: argparse.Namespace, cfg: Any) -> int:
    """`--padded-vocab-size`, else vocab_size rounded up to make-vocab-size-divisible-by x TP (Megatron)."""
    if args.padded_vocab_size is not None:
        return int(args.padded_vocab_size)
    return ModelDims.from_hf_config(cfg).padded_vocab_size(
        args.tensor_model_parallel_size, args.make_vocab_size_divisible_by
    )
