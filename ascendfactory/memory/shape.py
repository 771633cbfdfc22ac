"""A decoder-only transformer's dimensions and parameter counts, as the memory models need them.

Counts follow Megatron's own accounting (`megatron/training/theoretical_memory_usage.py`,
`compute_weight_and_optimizer_memory`): Q, K, V and O projections with grouped-query attention, a gated
(SwiGLU) MLP of three matrices, RMSNorm weights, the word embedding and, when untied, an output layer of the
same size over the padded vocabulary. Biases are counted too (Qwen2's QKV bias), which Megatron leaves out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class VisionShape:
    """A ViT encoder (MindSpeed-MM's vision tower): `layers` blocks of width `hidden`, `patches` tokens."""

    layers: int
    hidden: int
    ffn: int
    heads: int
    patches: int = 1024  # tokens per sample the encoder sees (an assumption the estimate states)
    frozen: bool = False  # not trained: 16-bit weights only, no gradients, optimizer or saved activations

    @property
    def params(self) -> int:
        per_layer = 4 * self.hidden * self.hidden + 2 * self.hidden * self.ffn + 4 * self.hidden
        return self.layers * per_layer


@dataclass(frozen=True)
class ModelShape:
    """Dimensions of one model; `vocab` is the tokenizer's, `padded_vocab(t)` what Megatron allocates."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    head_dim: int | None = None
    qkv_bias: bool = False
    gated_mlp: bool = True  # SwiGLU: gate and up projections (every model of the catalog)
    experts: int = 0  # MoE: routed experts per MoE layer (0: dense)
    moe_topk: int = 0
    moe_ffn: int = 0
    vision: VisionShape | None = None

    @property
    def kv_channels(self) -> int:
        return self.head_dim or self.hidden // max(self.heads, 1)

    @property
    def q_size(self) -> int:
        return self.heads * self.kv_channels

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.kv_channels

    def attention_params(self) -> int:
        qkv = self.hidden * (self.q_size + 2 * self.kv_size)
        bias = (self.q_size + 2 * self.kv_size) if self.qkv_bias else 0
        return qkv + bias + self.q_size * self.hidden

    def mlp_params(self) -> int:
        ffn = self.moe_ffn if self.experts else self.ffn
        matrices = 3 if self.gated_mlp else 2
        per_expert = matrices * self.hidden * ffn
        return per_expert * self.experts + self.hidden * self.experts if self.experts else per_expert

    def layer_params(self) -> int:
        """One decoder layer: attention, MLP (all experts), two RMSNorm weights."""
        return self.attention_params() + self.mlp_params() + 2 * self.hidden

    def padded_vocab(self, tp: int, divisible_by: int = 128) -> int:
        """Megatron pads the vocabulary to a multiple of `make-vocab-size-divisible-by` x TP."""
        multiple = max(divisible_by, 1) * max(tp, 1)
        return int(math.ceil(self.vocab / multiple) * multiple)

    def params(self, *, tp: int = 1, divisible_by: int = 128) -> int:
        """Total parameters (embedding and output layer over the padded vocabulary)."""
        emb = self.padded_vocab(tp, divisible_by) * self.hidden
        return self.layers * self.layer_params() + self.hidden + emb * (1 if self.tied else 2)

    def largest_layer(self) -> int:
        return max(self.layer_params(), self.vocab * self.hidden)

    def with_layers(self, layers: int) -> ModelShape:
        return replace(self, layers=layers)


def shape_from_arch(arch: Any, *, config: dict[str, Any] | None = None) -> ModelShape:
    """A `ModelShape` from the catalog's / config.json's `ModelArch` (`config`: the raw HF config, for MoE
    and vision fields the arch record does not carry)."""
    cfg = config or {}
    vision = None
    if getattr(arch, "vit_layers", None):
        given = cfg.get("vision_config")
        vc = given if isinstance(given, dict) else {}
        hidden = int(vc.get("hidden_size") or vc.get("embed_dim") or 1280)
        vision = VisionShape(
            layers=int(arch.vit_layers),
            hidden=hidden,
            ffn=int(vc.get("intermediate_size") or 4 * hidden),
            heads=int(arch.vit_heads or 16),
        )
    return ModelShape(
        name=arch.name,
        layers=int(arch.layers),
        hidden=int(arch.hidden),
        ffn=int(arch.ffn),
        heads=int(arch.heads),
        kv_heads=int(arch.kv_heads),
        vocab=int(arch.vocab),
        tied=bool(arch.tied),
        head_dim=arch.head_dim,
        qkv_bias=bool(arch.qkv_bias),
        experts=int(cfg.get("num_experts") or cfg.get("n_routed_experts") or 0),
        moe_topk=int(cfg.get("num_experts_per_tok") or 0),
        moe_ffn=int(cfg.get("moe_intermediate_size") or 0),
        vision=vision,
    )
