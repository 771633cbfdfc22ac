"""MindSpeed-LLM 26.1.0 rules read from Megatron-LM core_v0.12.1's validate_args and the micro-batch
calculator, and MindSpeed-LLM 26.1.0's own arguments.py (megatron/training/arguments.py,
megatron/core/num_microbatches_calculator.py, mindspeed_llm/training/arguments.py), as data: each a
statement of the 26.1.0 coverage map (tests/diffval/maps/) that refuses a job our other rules accepted.
`rules.py` adds them to its table; the record and the source texts are `rule_types.py`'s.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ascendfactory.backends.mindspeed_llm.rule_types import MEGATRON, V26, Flags, Rule, together

HETEROGENEOUS = MEGATRON + " (validate_model_config_args_from_heterogeneous_config)"


def _words(value: Any) -> list[str]:
    """A flag of nargs='+' as the words argparse collects (one text given: one word)."""
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _heterogeneous_config(f: Flags) -> dict[str, Any] | None:
    """The heterogeneous layer config validate_args reads: the encoded JSON, else the file of
    heterogeneous-layers-config-path (None when neither is given or it is not a JSON object: other rules
    refuse those)."""
    if f.given("heterogeneous-layers-config-encoded-json"):
        text = str(f["heterogeneous-layers-config-encoded-json"])
    elif f.given("heterogeneous-layers-config-path") and os.path.isfile(
        str(f["heterogeneous-layers-config-path"])
    ):
        with open(str(f["heterogeneous-layers-config-path"]), encoding="utf-8") as handle:
            text = handle.read()
    else:
        return None
    try:
        tree = json.loads(text)
    except ValueError:
        return None
    return tree if isinstance(tree, dict) else None


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _heterogeneous_mismatch(f: Flags) -> list[str]:
    """What core_v0.12.1's validate_model_config_args_from_heterogeneous_config refuses in the config it reads
    against the flags (megatron/training/arguments.py:101-172): hidden_act silu, one n_heads_in_group over the
    layers, and the model flags it expects (empty: it passes)."""
    config = _heterogeneous_config(f)
    if config is None:
        return []
    if config.get("hidden_act") != "silu":
        return [f"hidden_act {config.get('hidden_act')!r} (silu expected)"]
    blocks = config.get("block_configs")
    if not isinstance(blocks, list):
        return ["no block_configs list"]
    try:
        groups = [
            b["attention"]["n_heads_in_group"]
            for b in blocks
            if b["attention"]["n_heads_in_group"] is not None
        ]
    except (KeyError, TypeError):
        return ["block_configs without attention.n_heads_in_group"]
    if not groups:
        return ["no block_config gives attention.n_heads_in_group"]
    if any(g != groups[0] for g in groups):
        return [f"n_heads_in_group differs between the layers ({sorted(set(map(str, groups)))})"]
    try:
        heads = config["num_attention_heads"]
        expected: dict[str, Any] = {
            "swiglu": True,
            "normalization": "RMSNorm",
            "group-query-attention": True,
            "position-embedding-type": "rope",
            "rotary-percent": 1.0,
            "use-rope-scaling": True,
            "use-rotary-position-embeddings": True,
            "num-layers": config["num_hidden_layers"],
            "hidden-size": config["hidden_size"],
            "num-attention-heads": heads,
            "untie-embeddings-and-output-weights": not config["tie_word_embeddings"],
            "rotary-base": config["rope_theta"],
            "rope-scaling-factor": config["rope_scaling"]["factor"],
            "num-query-groups": heads // groups[0],
        }
    except (KeyError, TypeError, ZeroDivisionError):
        return [
            "a field validate_args reads is missing (num_hidden_layers, hidden_size, num_attention_heads, "
            "tie_word_embeddings, rope_theta, rope_scaling.factor)"
        ]
    # argparse's defaults of the flags it compares (core_v0.12.1 _add_network_size_args and others)
    defaults = {
        "rotary-percent": 1.0,
        "rotary-base": 10000,
        "rope-scaling-factor": 8.0,
        "num-query-groups": 1,
    }
    out = []
    for key, want in expected.items():
        if isinstance(want, bool):
            have: Any = f.given(key)
        elif isinstance(want, str):
            have = f[key]
        else:
            have = f.flags.get(key, defaults.get(key))
            if _number(have) == _number(want) and _number(want) is not None:
                continue
        if have != want:
            out.append(f"{key}: {have} (given) != {want} (the config's)")
    return out


RULES: tuple[Rule, ...] = (
    # megatron/training/arguments.py:355 (core_v0.12.1): the a2a+p2p CP communication splits CP into the
    # hierarchical sizes it needs
    Rule(
        "cp-comm-type",
        lambda f: (
            f.given("cp-comm-type")
            and "a2a+p2p" in _words(f["cp-comm-type"])
            and not f.given("hierarchical-context-parallel-sizes")
        ),
        "a2a+p2p needs hierarchical-context-parallel-sizes (the a2a and p2p parts of context-parallel-size)",
        "set hierarchical-context-parallel-sizes (e.g. [2, 2] for context-parallel-size 4), or use another "
        "cp-comm-type (p2p, all_gather, a2a)",
        MEGATRON,
        versions=V26,
    ),
    # megatron/training/arguments.py:899-903: without Gloo process groups the distributed optimizer saves
    # through distributed checkpointing only, and the plan's checkpoints are ckpt-format torch (the HF
    # conversion back reads that layout; MindSpeedLLMBackend refuses the others)
    Rule(
        "disable-gloo-process-groups",
        together("disable-gloo-process-groups", "use-distributed-optimizer"),
        "cannot be used with use-distributed-optimizer: without Gloo groups the distributed optimizer needs "
        "a distributed checkpoint format, and the plan saves ckpt-format torch",
        "remove disable-gloo-process-groups (or use-distributed-optimizer)",
        MEGATRON,
        versions=V26,
    ),
    # megatron/training/arguments.py:878: deterministic mode refuses the fused cross-entropy
    Rule(
        "cross-entropy-loss-fusion",
        together("cross-entropy-loss-fusion", "deterministic-mode"),
        "is not deterministic: it cannot be used with deterministic-mode",
        "remove cross-entropy-loss-fusion, or deterministic-mode",
        MEGATRON,
        versions=V26,
    ),
    # megatron/training/arguments.py:132-172 (validate_args' first step): the heterogeneous layer config must
    # match the model flags
    *(
        Rule(
            key,
            lambda f, key=key: (
                f.given(key)
                and (key.endswith("encoded-json") or not f.given("heterogeneous-layers-config-encoded-json"))
                and bool(_heterogeneous_mismatch(f))
            ),
            "does not agree with the flags validate_args compares it with: the config needs hidden_act silu, "
            "one attention.n_heads_in_group over its block_configs, and num_hidden_layers, hidden_size, "
            "num_attention_heads, tie_word_embeddings, rope_theta, rope_scaling.factor equal to num-layers, "
            "hidden-size, num-attention-heads, not untie-embeddings-and-output-weights, rotary-base, "
            "rope-scaling-factor; num-query-groups must be the heads over n_heads_in_group",
            "set swiglu, normalization: RMSNorm, group-query-attention, position-embedding-type: rope, "
            "rotary-percent: 1.0, use-rope-scaling and use-rotary-position-embeddings, and the model sizes "
            f"to the config's, or remove {key}",
            HETEROGENEOUS,
            versions=V26,
        )
        for key in ("heterogeneous-layers-config-encoded-json", "heterogeneous-layers-config-path")
    ),
    # megatron/training/arguments.py:1002-1003 (core_transformer_config_from_args)
    Rule(
        "multi-latent-attention",
        together("multi-latent-attention", "heterogeneous-layers-config-path"),
        "cannot be used with heterogeneous-layers-config-path (no heterogeneous latent-attention layers)",
        "remove multi-latent-attention, or heterogeneous-layers-config-path",
        "Megatron-LM {megatron} megatron/training/arguments.py core_transformer_config_from_args",
        versions=V26,
    ),
)
