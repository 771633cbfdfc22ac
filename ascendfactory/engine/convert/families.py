"""HF <-> Megatron-core weight names, one table per model family, as data.

Each `Family` has one-to-one names (HF pattern -> Megatron pattern, `*` = layer number, `#` = expert number;
`None` = an HF key that is dropped on purpose, e.g. rotary `inv_freq`), plus a short list of named transforms
that fuse several HF tensors into one Megatron tensor (`QKVMapping`, `GatedMLPMapping`, `ConcatMapping`). The
reverse direction is computed from the same tables. Nothing here imports torch.

The mixture-of-experts families (`qwen3-moe`, `deepseek2-lite`, `deepseek2`, `deepseek3`, MindSpeed-LLM's
`--model-type-hf` spellings) follow MindSpeed-LLM 26.1.0's `convert_ckpt_v2.py`
(`mindspeed_llm/tasks/checkpoint/model_builder.py` `MegatronModel.get_module_mapping` for the Megatron
names, `configs/checkpoint/model_cfg.json` for the HF ones). Expert numbers are global on the HF side and
local to the expert-parallel rank on the Megatron side (`local_experts.J`); `shard_map` renumbers them, and
fuses the local experts into Megatron's grouped-GEMM `weight1` / `weight2` when asked.
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


@dataclass(frozen=True)
class ConcatMapping:
    """HF tensors stacked row-wise into one Megatron tensor, the same on every TP rank (MLA's `linear_qkv` =
    [q_proj or q_a_proj; kv_a_proj_with_mqa], MindSpeed-LLM's `LinearNoTP`). `rows` names the `ModelDims`
    properties that give each part's row count, so the reverse split needs no stored sizes."""

    megatron: str
    parts: tuple[str, ...]
    rows: tuple[str, ...]

    @property
    def hf(self) -> tuple[str, ...]:
        return self.parts


Transform = QKVMapping | GatedMLPMapping | ConcatMapping


def _pattern(p: str) -> re.Pattern[str]:
    rx = re.escape(p).replace(r"\*", r"(?P<layer>\d+)").replace(r"\#", r"(?P<expert>\d+)")
    return re.compile("^" + rx + "$")


@dataclass(frozen=True)
class NameMatch:
    """A tensor name matched against a family table: its pattern, layer and expert numbers, and target."""

    pattern: str
    layer: int | None
    expert: int | None
    target: Any


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
        m = self.match_hf(name)
        return m.pattern, m.layer, m.target

    def lookup_megatron(self, name: str) -> tuple[str, int | None, str | Transform]:
        """Megatron name -> (matched Megatron pattern, layer number or None, HF pattern | transform)."""
        m = self.match_megatron(name)
        return m.pattern, m.layer, m.target

    def match_hf(self, name: str) -> NameMatch:
        """`lookup_hf` with the expert number too (None outside the experts)."""
        return self._lookup(name, self._hf_rules, self.hf_patterns, "HF")

    def match_megatron(self, name: str) -> NameMatch:
        """`lookup_megatron` with the (EP-local) expert number too."""
        return self._lookup(name, self._mg_rules, self.megatron_patterns, "Megatron")

    @property
    def moe(self) -> bool:
        """Whether the family has routed experts."""
        return any("#" in p for p in self.names) or any("#" in h for t in self.transforms for h in t.hf)

    def _lookup(self, name: str, rules: list, patterns: list[str], side: str) -> NameMatch:
        for rx, pat, target in rules:
            m = rx.match(name)
            if m:
                groups = m.groupdict()
                layer, expert = groups.get("layer"), groups.get("expert")
                return NameMatch(
                    pat,
                    None if layer is None else int(layer),
                    None if expert is None else int(expert),
                    target,
                )
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


def hf_name(pattern: str, layer: int | None, expert: int | None = None) -> str:
    """Fill the `*` of a pattern with a layer number and its `#` with an expert number."""
    out = pattern if layer is None else pattern.replace("*", str(layer), 1)
    return out if expert is None else out.replace("#", str(expert), 1)


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


# ---- mixture of experts (MindSpeed-LLM 26.1.0 convert_ckpt_v2.py's names; see the module docstring)
X = L + "mlp.experts.#."  # HF routed expert prefix (global expert number)
MX = M + "mlp.experts.local_experts.#."  # Megatron local expert prefix (EP-local number)
_ROUTER_NAMES: dict[str, str | None] = {
    L + "mlp.gate.weight": M + "mlp.router.weight",
    X + "down_proj.weight": MX + "linear_fc2.weight",
}
_EXPERT_FC1 = GatedMLPMapping(MX + "linear_fc1.weight", gate=X + "gate_proj.weight", up=X + "up_proj.weight")
_SHARED_NAMES: dict[str, str | None] = {
    L + "mlp.shared_experts.down_proj.weight": M + "mlp.shared_experts.linear_fc2.weight",
}
_SHARED_FC1 = GatedMLPMapping(
    M + "mlp.shared_experts.linear_fc1.weight",
    gate=L + "mlp.shared_experts.gate_proj.weight",
    up=L + "mlp.shared_experts.up_proj.weight",
)
_MOE_TP_DIMS: dict[str, int | None] = {
    L + "mlp.gate.weight": REPLICATED,
    L + "mlp.gate.e_score_correction_bias": REPLICATED,
    X + "gate_proj.weight": ROW,
    X + "up_proj.weight": ROW,
    X + "down_proj.weight": COL,
    L + "mlp.shared_experts.gate_proj.weight": ROW,
    L + "mlp.shared_experts.up_proj.weight": ROW,
    L + "mlp.shared_experts.down_proj.weight": COL,
}
# Multi-head latent attention (DeepSeek-V2/V3): linear_qkv is not TP-sharded (MindSpeed-LLM's LinearNoTP);
# the up-projections are column-parallel (row chunks of the HF weight), the output projection row-parallel.
_MLA_NAMES: dict[str, str | None] = {
    L + "self_attn.kv_b_proj.weight": M + "self_attention.linear_kv_up_proj.weight",
    L + "self_attn.kv_a_layernorm.weight": M + "self_attention.kv_layernorm.weight",
}
_MLA_Q_LORA_NAMES: dict[str, str | None] = {
    L + "self_attn.q_b_proj.weight": M + "self_attention.linear_q_up_proj.weight",
    L + "self_attn.q_a_layernorm.weight": M + "self_attention.q_layernorm.weight",
}
_MLA_QKV = ConcatMapping(
    M + "self_attention.linear_qkv.weight",
    parts=(L + "self_attn.q_proj.weight", L + "self_attn.kv_a_proj_with_mqa.weight"),
    rows=("mla_q_rows", "mla_kv_a_rows"),
)
_MLA_QKV_Q_LORA = ConcatMapping(
    M + "self_attention.linear_qkv.weight",
    parts=(L + "self_attn.q_a_proj.weight", L + "self_attn.kv_a_proj_with_mqa.weight"),
    rows=("mla_q_rows", "mla_kv_a_rows"),
)
_MLA_TP_DIMS: dict[str, int | None] = {
    L + "self_attn.q_proj.weight": REPLICATED,
    L + "self_attn.q_a_proj.weight": REPLICATED,
    L + "self_attn.kv_a_proj_with_mqa.weight": REPLICATED,
    L + "self_attn.q_a_layernorm.weight": REPLICATED,
    L + "self_attn.kv_a_layernorm.weight": REPLICATED,
    L + "self_attn.q_b_proj.weight": ROW,
    L + "self_attn.kv_b_proj.weight": ROW,
}

QWEN3_MOE = Family(
    name="qwen3-moe",
    hf_model_types=("qwen3_moe",),
    # Qwen3-MoE's dense layers (mlp_only_layers, decoder_sparse_step > 1) keep the dense MLP names
    names={**_COMMON_NAMES, **_QK_NORM_NAMES, **_ROUTER_NAMES},
    transforms=(_QKV_WEIGHT, _GATED_MLP, _EXPERT_FC1),
    tp_dims={**_TP_DIMS, **_MOE_TP_DIMS},
    qk_norm=True,
)
# DeepSeek's first_k_dense_replace layers keep the dense MLP names (_COMMON_NAMES, _GATED_MLP)
_DEEPSEEK_NAMES = {**_COMMON_NAMES, **_MLA_NAMES, **_ROUTER_NAMES, **_SHARED_NAMES}
_DEEPSEEK_TP_DIMS = {**_TP_DIMS, **_MOE_TP_DIMS, **_MLA_TP_DIMS}
DEEPSEEK2_LITE = Family(
    name="deepseek2-lite",
    hf_model_types=("deepseek_v2",),
    names=_DEEPSEEK_NAMES,
    transforms=(_MLA_QKV, _GATED_MLP, _SHARED_FC1, _EXPERT_FC1),
    tp_dims=_DEEPSEEK_TP_DIMS,
)
DEEPSEEK2 = Family(
    name="deepseek2",
    hf_model_types=("deepseek_v2",),
    names={**_DEEPSEEK_NAMES, **_MLA_Q_LORA_NAMES},
    transforms=(_MLA_QKV_Q_LORA, _GATED_MLP, _SHARED_FC1, _EXPERT_FC1),
    tp_dims=_DEEPSEEK_TP_DIMS,
)
DEEPSEEK3 = Family(
    name="deepseek3",
    hf_model_types=("deepseek_v3",),
    names={
        **_DEEPSEEK_NAMES,
        **_MLA_Q_LORA_NAMES,
        L + "mlp.gate.e_score_correction_bias": M + "mlp.router.expert_bias",
    },
    transforms=(_MLA_QKV_Q_LORA, _GATED_MLP, _SHARED_FC1, _EXPERT_FC1),
    tp_dims=_DEEPSEEK_TP_DIMS,
)
# MindSpeed-LLM 2.1.0 (v1 convert_ckpt.py, its deepseek_spec.py MLASelfAttentionSubmodules) names three MLA
# tensors differently; checkpoints trained there are read with these names too.
V1_MLA_ALIASES = {
    "self_attention.linear_qb.weight": "self_attention.linear_q_up_proj.weight",
    "self_attention.linear_kvb.weight": "self_attention.linear_kv_up_proj.weight",
    "self_attention.k_layernorm.weight": "self_attention.kv_layernorm.weight",
}

FAMILIES: dict[str, Family] = {
    f.name: f for f in (LLAMA2, QWEN25, QWEN3, QWEN3_MOE, DEEPSEEK2_LITE, DEEPSEEK2, DEEPSEEK3)
}
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
        if model_type == "deepseek_v2" and get("q_lora_rank"):
            fam = DEEPSEEK2  # DeepSeek-V2 (q_lora_rank 1536) vs V2-Lite (null): MindSpeed-LLM's two tables
    if hf_config is not None and fam.name in ("llama2", "qwen3", "qwen3-moe"):
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
