"""HF <-> Megatron-core weight names, one table per model family, as data.

Each `Family` has one-to-one names (HF pattern -> Megatron pattern, `*` = layer number; `None` = an HF key
that is dropped on purpose, e.g. rotary `inv_freq`), plus a short list of named transforms that fuse several
HF tensors into one Megatron tensor (`QKVMapping`, `GatedMLPMapping`). The reverse direction is computed
from the same tables. Nothing here imports torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ascendfactory.errors import ConfigError, ConversionKeyError, Problem

L = "model.layers.*."  # HF layer prefix
M = "decoder.layers.*."  # Megatron-core layer prefix

# How the trainer's TP plan shards each HF tensor (torchtitan-style): 0 = row chunk (colwise linear,
# vocab-parallel embedding), 1 = column chunk (rowwise linear), None = replicated.
ROW, COL, REPLICATED = 0, 1, None


@dataclass(frozen=True)
class QKVMapping:
    """HF q/k/v projections <-> one grouped Megatron `linear_qkv` tensor (weight or bias)."""

    megatron: str
    q: str
    k: str
    v: str

    @property
    def hf(self) -> tuple[str, ...]:
        return (self.q, self.k, self.v)


@dataclass(frozen=True)
class GatedMLPMapping:
    """HF gate/up projections <-> Megatron `linear_fc1` = [gate_r; up_r] on every TP rank."""

    megatron: str
    gate: str
    up: str

    @property
    def hf(self) -> tuple[str, ...]:
        return (self.gate, self.up)


Transform = QKVMapping | GatedMLPMapping


def _pattern(p: str) -> re.Pattern[str]:
    return re.compile("^" + re.escape(p).replace(r"\*", r"(\d+)") + "$")


@dataclass(frozen=True)
class Family:
    """One model family's naming: `names` (HF -> Megatron or None), `transforms`, and the HF TP plan."""

    name: str
    hf_model_types: tuple[str, ...]
    names: Mapping[str, str | None]
    transforms: tuple[Transform, ...]
    tp_dims: Mapping[str, int | None]
    qkv_bias: bool = False
    qk_norm: bool = False
    aliases: tuple[str, ...] = field(default=())

    @cached_property
    def reverse(self) -> dict[str, str]:
        """Megatron pattern -> HF pattern, computed from `names` (never written by hand)."""
        out: dict[str, str] = {}
        for hf, mg in self.names.items():
            if mg is not None:
                if mg in out:
                    raise ValueError(f"family {self.name}: {mg} is the target of two HF names")
                out[mg] = hf
        return out

    @cached_property
    def _hf_rules(self) -> list[tuple[re.Pattern[str], str, Any]]:
        rules: list[tuple[re.Pattern[str], str, Any]] = [(_pattern(h), h, m) for h, m in self.names.items()]
        for t in self.transforms:
            rules += [(_pattern(h), h, t) for h in t.hf]
        return rules

    @cached_property
    def _mg_rules(self) -> list[tuple[re.Pattern[str], str, Any]]:
        rules: list[tuple[re.Pattern[str], str, Any]] = [(_pattern(m), m, h) for m, h in self.reverse.items()]
        rules += [(_pattern(t.megatron), t.megatron, t) for t in self.transforms]
        return rules

    @property
    def hf_patterns(self) -> list[str]:
        return [p for _, p, _ in self._hf_rules]

    @property
    def megatron_patterns(self) -> list[str]:
        return [p for _, p, _ in self._mg_rules]

    def lookup_hf(self, name: str) -> tuple[str, int | None, str | Transform | None]:
        """HF name -> (matched HF pattern, layer number or None, Megatron pattern | transform | None)."""
        return self._lookup(name, self._hf_rules, self.hf_patterns, "HF")

    def lookup_megatron(self, name: str) -> tuple[str, int | None, str | Transform]:
        """Megatron name -> (matched Megatron pattern, layer number or None, HF pattern | transform)."""
        return self._lookup(name, self._mg_rules, self.megatron_patterns, "Megatron")

    def _lookup(self, name: str, rules: list, patterns: list[str], side: str) -> tuple[str, int | None, Any]:
        for rx, pat, target in rules:
            m = rx.match(name)
            if m:
                return pat, (int(m.group(1)) if m.groups() else None), target
        known = "\n    ".join(patterns)
        raise ConversionKeyError(
            f"{side} tensor '{name}' has no mapping in family '{self.name}'.\n"
            f"  known {side} names:\n    {known}\n"
            f"  hint: check --model-type-hf (valid: {', '.join(FAMILIES)}); a different architecture "
            "needs its own family table"
        )

    def tp_dim(self, hf_pattern: str) -> int | None:
        """How the TP plan shards the HF tensor with this pattern (ROW, COL or REPLICATED)."""
        return self.tp_dims[hf_pattern]


def hf_name(pattern: str, layer: int | None) -> str:
    """Fill the `*` of a pattern with a layer number."""
    return pattern if layer is None else pattern.replace("*", str(layer), 1)


_COMMON_NAMES: dict[str, str | None] = {
    "model.embed_tokens.weight": "embedding.word_embeddings.weight",
    L + "input_layernorm.weight": M + "input_layernorm.weight",
    L + "self_attn.o_proj.weight": M + "self_attention.linear_proj.weight",
    L + "post_attention_layernorm.weight": M + "pre_mlp_layernorm.weight",
    L + "mlp.down_proj.weight": M + "mlp.linear_fc2.weight",
    "model.norm.weight": "decoder.final_layernorm.weight",
    "lm_head.weight": "output_layer.weight",
    L + "self_attn.rotary_emb.inv_freq": None,
    "model.rotary_emb.inv_freq": None,
}
_QK_NORM_NAMES: dict[str, str | None] = {
    L + "self_attn.q_norm.weight": M + "self_attention.q_layernorm.weight",
    L + "self_attn.k_norm.weight": M + "self_attention.k_layernorm.weight",
}
_QKV_WEIGHT = QKVMapping(
    M + "self_attention.linear_qkv.weight",
    q=L + "self_attn.q_proj.weight",
    k=L + "self_attn.k_proj.weight",
    v=L + "self_attn.v_proj.weight",
)
_QKV_BIAS = QKVMapping(
    M + "self_attention.linear_qkv.bias",
    q=L + "self_attn.q_proj.bias",
    k=L + "self_attn.k_proj.bias",
    v=L + "self_attn.v_proj.bias",
)
_GATED_MLP = GatedMLPMapping(
    M + "mlp.linear_fc1.weight", gate=L + "mlp.gate_proj.weight", up=L + "mlp.up_proj.weight"
)

_TP_DIMS: dict[str, int | None] = {
    "model.embed_tokens.weight": ROW,
    "lm_head.weight": ROW,
    L + "self_attn.q_proj.weight": ROW,
    L + "self_attn.k_proj.weight": ROW,
    L + "self_attn.v_proj.weight": ROW,
    L + "self_attn.q_proj.bias": ROW,
    L + "self_attn.k_proj.bias": ROW,
    L + "self_attn.v_proj.bias": ROW,
    L + "mlp.gate_proj.weight": ROW,
    L + "mlp.up_proj.weight": ROW,
    L + "self_attn.o_proj.weight": COL,
    L + "mlp.down_proj.weight": COL,
    L + "input_layernorm.weight": REPLICATED,
    L + "post_attention_layernorm.weight": REPLICATED,
    L + "self_attn.q_norm.weight": REPLICATED,
    L + "self_attn.k_norm.weight": REPLICATED,
    "model.norm.weight": REPLICATED,
}

LLAMA2 = Family(
    name="llama2",
    hf_model_types=("llama",),
    names=_COMMON_NAMES,
    transforms=(_QKV_WEIGHT, _GATED_MLP),
    tp_dims=_TP_DIMS,
    aliases=("llama", "llama3"),
)
QWEN25 = Family(
    name="qwen25",
    hf_model_types=("qwen2",),
    names=_COMMON_NAMES,
    transforms=(_QKV_WEIGHT, _QKV_BIAS, _GATED_MLP),
    tp_dims=_TP_DIMS,
    qkv_bias=True,
    aliases=("qwen2",),
)
QWEN3 = Family(
    name="qwen3",
    hf_model_types=("qwen3",),
    names={**_COMMON_NAMES, **_QK_NORM_NAMES},
    transforms=(_QKV_WEIGHT, _GATED_MLP),
    tp_dims=_TP_DIMS,
    qk_norm=True,
)

FAMILIES: dict[str, Family] = {f.name: f for f in (LLAMA2, QWEN25, QWEN3)}
_ALL_MODEL_TYPES = [t for f in FAMILIES.values() for t in f.hf_model_types]


def get_family(name: str) -> Family:
    """Family by `--model-type-hf` value (or an alias such as `qwen2`); ConfigError listing valid names."""
    for fam in FAMILIES.values():
        if name == fam.name or name in fam.aliases:
            return fam
    raise ConfigError(
        Problem(
            key="--model-type-hf",
            message=f"unknown model family '{name}'",
            fix=f"use one of: {', '.join(FAMILIES)}",
            source="command line",
        )
    )


def family_for(hf_config: Any, model_type_hf: str | None = None) -> Family:
    """Pick the family from `--model-type-hf` when given, else from `hf_config.model_type`.

    `hf_config` may be a transformers `PretrainedConfig`, a dict (config.json) or None (then
    `model_type_hf` is required). Options the families do not cover (Llama attention/MLP bias) are refused.
    """
    get = hf_config.get if isinstance(hf_config, dict) else lambda k, d=None: getattr(hf_config, k, d)
    if model_type_hf:
        fam = get_family(model_type_hf)
    else:
        model_type = get("model_type") if hf_config is not None else None
        found = [f for f in FAMILIES.values() if model_type in f.hf_model_types]
        if not found:
            raise ConfigError(
                Problem(
                    key="model_type",
                    message=f"HF model_type '{model_type}' is not supported by the converter",
                    fix=f"supported model_type values: {', '.join(_ALL_MODEL_TYPES)}"
                    f"; or pass --model-type-hf ({', '.join(FAMILIES)})",
                )
            )
        fam = found[0]
    if hf_config is not None and fam.name in ("llama2", "qwen3"):
        for flag in ("attention_bias", "mlp_bias"):
            if get(flag, False):
                raise ConfigError(
                    Problem(
                        key=flag,
                        message=f"{flag}=true is not supported for family '{fam.name}'",
                        fix="convert a model without projection biases (or --model-type-hf qwen25 for Qwen2)",
                    )
                )
    return fam
