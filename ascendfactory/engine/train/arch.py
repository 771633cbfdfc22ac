"""Architecture flags vs the HF config.json: every mismatch reported at once, as one ConfigError."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.errors import ConfigError, Problem

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v2")


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
    problems = [
        *_dimension_problems(args, cfg),
        *_layout_problems(args, cfg, str(model_type)),
        *_moe_problems(args, cfg),
        *_deepseek_problems(args, cfg),
    ]
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
        *_mismatch("--num-attention-heads", args.num_attention_heads, heads, "num_attention_heads"),
        *_mismatch("--kv-channels", args.kv_channels, head_dim, "head_dim"),
        *_mismatch("--norm-epsilon", args.norm_epsilon, float(cfg.rms_norm_eps), "rms_norm_eps"),
        *_mismatch("--rotary-base", args.rotary_base, _rope_theta(cfg), "rope_theta"),
    ]
    if _has_dense_layers(cfg):  # a model of MoE layers only never uses it (MindSpeed-LLM passes any value)
        problems += _mismatch(
            "--ffn-hidden-size", args.ffn_hidden_size, cfg.intermediate_size, "intermediate_size"
        )
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
    if args.qk_layernorm and model_type not in ("qwen3", "qwen3_moe", "deepseek_v2"):
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


def _moe_problems(args: argparse.Namespace, cfg: Any) -> list[Problem]:
    """The MoE shape flags against config.json, and the rules that need to know the model is MoE."""
    from ascendfactory.engine.train.moe.spec import HFMoE

    hf = HFMoE.from_config(cfg)
    ep = args.expert_model_parallel_size
    if hf is None:
        given = [
            f for f in ("--num-experts", "--moe-router-topk", "--moe-intermediate-size") if _value(args, f)
        ]
        problems = [
            _flag(f, f"given, but config.json describes a dense model ({cfg.model_type})", "remove the flag")
            for f in given
        ]
        if ep > 1:
            problems.append(
                _flag(
                    "--expert-model-parallel-size",
                    "num_experts must be non None to use expert model parallelism (a dense model)",
                    "use --expert-model-parallel-size 1",
                )
            )
        return problems
    problems = [
        *_mismatch("--num-experts", args.num_experts, hf.num_experts, "num_experts"),
        *_mismatch("--moe-router-topk", args.moe_router_topk, hf.topk, "num_experts_per_tok"),
        *_mismatch(
            "--moe-intermediate-size", args.moe_intermediate_size, hf.ffn_hidden_size, "moe_intermediate_size"
        ),
    ]
    shared = hf.shared_ffn_hidden_size // hf.ffn_hidden_size
    problems += _mismatch("--n-shared-experts", args.n_shared_experts, shared, "n_shared_experts")
    if args.first_k_dense_replace is not None and args.moe_layer_freq is not None:
        only = tuple(getattr(cfg, "mlp_only_layers", None) or ())
        layers = range(cfg.num_hidden_layers)
        theirs = [i for i in layers if hf.is_moe_layer(i, only)]
        ours = [i for i in layers if i >= args.first_k_dense_replace and i % args.moe_layer_freq == 0]
        if ours != theirs:
            problems.append(
                _flag(
                    "--first-k-dense-replace",
                    f"--first-k-dense-replace {args.first_k_dense_replace} --moe-layer-freq "
                    f"{args.moe_layer_freq} make layers {ours} MoE, config.json layers {theirs}",
                    f"pass --first-k-dense-replace {hf.first_k_dense_replace} --moe-layer-freq "
                    f"{hf.moe_layer_freq}",
                )
            )
    if hf.num_experts % ep:
        problems.append(
            _flag(
                "--expert-model-parallel-size",
                "Number of experts should be a multiple of expert model parallel_size "
                f"({hf.num_experts} % {ep})",
                "choose an EP size dividing the number of experts",
            )
        )
    if args.tensor_model_parallel_size > 1 and not args.sequence_parallel:
        problems.append(  # Megatron core_r0.8.0 MoELayer.forward raises it in training
            _flag(
                "--sequence-parallel",
                "missing: During training, performance may degrade if MoE and tensor parallelism are enabled "
                "without also enabling sequence parallelism. (Megatron's MoE layer refuses to train so)",
                "add --sequence-parallel",
            )
        )
    return problems


_MLA_FIELDS = {  # flag -> config.json field (MindSpeed-LLM 2.1.0 `_add_mla_args`)
    "--q-lora-rank": "q_lora_rank",
    "--kv-lora-rank": "kv_lora_rank",
    "--qk-nope-head-dim": "qk_nope_head_dim",
    "--qk-rope-head-dim": "qk_rope_head_dim",
    "--v-head-dim": "v_head_dim",
}
_YARN_FIELDS = {  # flag -> rope_scaling field (MindSpeed-LLM 2.1.0 `_add_yarn_args`)
    "--rope-scaling-factor": "factor",
    "--rope-scaling-beta-fast": "beta_fast",
    "--rope-scaling-beta-slow": "beta_slow",
    "--rope-scaling-mscale": "mscale",
    "--rope-scaling-mscale-all-dim": "mscale_all_dim",
    "--rope-scaling-original-max-position-embeddings": "original_max_position_embeddings",
}


def _deepseek_problems(args: argparse.Namespace, cfg: Any) -> list[Problem]:
    """DeepSeek's multi-head latent attention and YaRN rotary flags against config.json (the HF modules
    compute both), the vocabulary size, and what the embedded trainer does not run with MLA."""
    mla = bool(getattr(cfg, "kv_lora_rank", None))
    problems = _mismatch("--vocab-size", args.vocab_size, cfg.vocab_size, "vocab_size")
    if args.multi_head_latent_attention and not mla:
        problems.append(
            _flag(
                "--multi-head-latent-attention", f"given, but {cfg.model_type} has no MLA", "remove the flag"
            )
        )
    for flag, field in _MLA_FIELDS.items():
        if mla:
            problems += _mismatch(flag, _value(args, flag), getattr(cfg, field, None), field)
        elif _value(args, flag) is not None:
            problems.append(_flag(flag, f"given, but {cfg.model_type} has no MLA", "remove the flag"))
    rope = dict(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if args.rope_scaling_type is not None and args.rope_scaling_type != kind:
        fix = f"pass --rope-scaling-type {kind}" if kind != "default" else "remove the flag"
        message = f"{args.rope_scaling_type} but config.json's rotary scaling is {kind}"
        problems.append(_flag("--rope-scaling-type", message, fix))
    for flag, field in _YARN_FIELDS.items():
        if _value(args, flag) is not None:
            if field in rope:
                problems += _mismatch(flag, _value(args, flag), rope[field], f"rope_scaling.{field}")
            else:
                problems.append(
                    _flag(flag, f"given, but config.json's rope_scaling has no {field}", "remove the flag")
                )
    if mla and args.tensor_model_parallel_size > 1:
        problems.append(
            _flag(
                "--tensor-model-parallel-size",
                f"{args.tensor_model_parallel_size}: multi-head latent attention (DeepSeek) with tensor "
                "parallelism is not supported by the embedded trainer",
                "use --tensor-model-parallel-size 1 (spread the ranks over EP/PP/DP), or the mindspeed-llm "
                "backend",
            )
        )
    experts = {"linear_fc1", "linear_fc2"} & set(args.lora_target_modules)
    if mla and args.lora_target_modules:
        message = "LoRA on multi-head latent attention (DeepSeek) is not supported by the embedded trainer"
        problems.append(
            _flag("--lora-target-modules", message, "drop LoRA, or use the mindspeed-llm backend")
        )
    elif getattr(cfg, "model_type", "") == "qwen3_moe" and experts:
        message = "LoRA on the experts is not supported by the embedded trainer"
        fix = "target linear_qkv / linear_proj only, or use the mindspeed-llm backend"
        problems.append(_flag("--lora-target-modules", message, fix))
    return problems


def _has_dense_layers(cfg: Any) -> bool:
    from ascendfactory.engine.train.moe.spec import HFMoE

    hf = HFMoE.from_config(cfg)
    if hf is None:
        return True
    only = tuple(getattr(cfg, "mlp_only_layers", None) or ())
    return not all(hf.is_moe_layer(i, only) for i in range(cfg.num_hidden_layers))


def _value(args: argparse.Namespace, flag: str) -> Any:
    return getattr(args, flag.lstrip("-").replace("-", "_"), None)


def padded_vocab_size(args: argparse.Namespace, cfg: Any) -> int:
    """`--padded-vocab-size`, else vocab_size rounded up to make-vocab-size-divisible-by x TP (Megatron)."""
    if args.padded_vocab_size is not None:
        return int(args.padded_vocab_size)
    return ModelDims.from_hf_config(cfg).padded_vocab_size(
        args.tensor_model_parallel_size, args.make_vocab_size_divisible_by
    )
