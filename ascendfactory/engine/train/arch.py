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
    model_type = getattr(cfg, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            _flag(
                "--tokenizer-name-or-path",
                f"config.json has model_type '{model_type}'",
                f"the embedded trainer supports: {', '.join(SUPPORTED_MODEL_TYPES)}",
            )
        )
    problems = [*_dimension_problems(args, cfg), *_layout_problems(args, cfg, str(model_type))]
    if problems:
        raise ConfigError(problems)


def _flag(key: str, message: str, fix: str) -> Problem:
    """A problem with a command-line flag."""
    return Problem(key=key, message=message, fix=fix, source="command line")


def _mismatch(flag: str, given: Any, expected: Any, key: str) -> list[Problem]:
    """`flag` given with a value other than config.json's `key` (floats compared to 1e-6)."""
    if given is None:
        return []
    equal = math.isclose(given, expected, rel_tol=1e-6) if isinstance(given, float) else given == expected
    if equal:
        return []
    fix = (
        f"pass {flag} {expected}, or point --tokenizer-name-or-path at the model the checkpoint was "
        "converted from"
    )
    return [_flag(flag, f"{given} but config.json has {key} = {expected}", fix)]


def _dimension_problems(args: argparse.Namespace, cfg: Any) -> list[Problem]:
    """The sizes, norm, rotary base, query groups, activation and position embedding."""
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    problems = [
        *_mismatch("--num-layers", args.num_layers, cfg.num_hidden_layers, "num_hidden_layers"),
        *_mismatch("--hidden-size", args.hidden_size, cfg.hidden_size, "hidden_size"),
        *_mismatch("--ffn-hidden-size", args.ffn_hidden_size, cfg.intermediate_size, "intermediate_size"),
        *_mismatch("--num-attention-heads", args.num_attention_heads, heads, "num_attention_heads"),
        *_mismatch("--kv-channels", args.kv_channels, head_dim, "head_dim"),
        *_mismatch("--norm-epsilon", args.norm_epsilon, float(cfg.rms_norm_eps), "rms_norm_eps"),
        *_mismatch("--rotary-base", args.rotary_base, _rope_theta(cfg), "rope_theta"),
    ]
    if args.group_query_attention:
        problems += _mismatch("--num-query-groups", args.num_query_groups, kv, "num_key_value_heads")
    elif kv != heads and args.num_attention_heads is not None:
        problems.append(
            _flag(
                "--group-query-attention",
                f"missing, but config.json has num_key_value_heads = {kv} < num_attention_heads = {heads}",
                f"add --group-query-attention --num-query-groups {kv}",
            )
        )
    if args.swiglu or args.num_layers is not None:
        problems += _mismatch("--swiglu", "silu" if args.swiglu else "gelu", cfg.hidden_act, "hidden_act")
    problems += _mismatch(
        "--normalization", args.normalization, "RMSNorm", "normalization (RMSNorm for Llama/Qwen)"
    )
    if args.position_embedding_type is not None:
        problems += _mismatch(
            "--position-embedding-type", args.position_embedding_type, "rope", "rotary position embeddings"
        )
    return problems


def _layout_problems(args: argparse.Namespace, cfg: Any, model_type: str) -> list[Problem]:
    """Tied embeddings, q/k/v bias, q/k norm, MLP bias, the sequence length and the padded vocabulary."""
    problems = []
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    untie = "--untie-embeddings-and-output-weights"
    if args.untie_embeddings_and_output_weights and tied:
        problems.append(
            _flag(untie, "given, but config.json has tie_word_embeddings = true", "remove the flag")
        )
    if not args.untie_embeddings_and_output_weights and not tied and args.num_layers is not None:
        problems.append(
            _flag(untie, "missing, but config.json has tie_word_embeddings = false", "add the flag")
        )
    qkv_bias = model_type == "qwen2" or bool(getattr(cfg, "attention_bias", False))
    if args.add_qkv_bias != qkv_bias and (args.add_qkv_bias or args.num_layers is not None):
        problems.append(
            _flag(
                "--add-qkv-bias",
                f"{'given' if args.add_qkv_bias else 'missing'}, "
                f"but the {model_type} model {'has' if qkv_bias else 'has no'} q/k/v bias",
                ("add" if qkv_bias else "remove") + " --add-qkv-bias",
            )
        )
    if args.qk_layernorm and model_type != "qwen3":
        problems.append(
            _flag("--qk-layernorm", f"given, but {model_type} has no q/k norm", "remove the flag")
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
            _flag(
                "--seq-length",
                f"{args.seq_length} > --max-position-embeddings {args.max_position_embeddings}",
                "lower --seq-length",
            )
        )
    if args.padded_vocab_size is not None and args.padded_vocab_size < cfg.vocab_size:
        problems.append(
            _flag(
                "--padded-vocab-size",
                f"{args.padded_vocab_size} < vocab_size {cfg.vocab_size}",
                f"use at least {cfg.vocab_size}",
            )
        )
    return problems


def padded_vocab_size(args: argparse.Namespace, cfg: Any) -> int:
    """`--padded-vocab-size`, else vocab_size rounded up to make-vocab-size-divisible-by x TP (Megatron)."""
    if args.padded_vocab_size is not None:
        return int(args.padded_vocab_size)
    return ModelDims.from_hf_config(cfg).padded_vocab_size(
        args.tensor_model_parallel_size, args.make_vocab_size_divisible_by
    )
