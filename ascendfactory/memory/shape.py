"""A decoder-only transformer's dimensions and parameter counts, as the memory models need them.

Counts follow Megatron's own accounting (`megatron/training/theoretical_memory_usage.py`,
`compute_weight_and_optimizer_memory`): Q, K, V and O projections with grouped-query attention, a gated
(SwiGLU) MLP of three matrices, RMSNorm weights, the word embedding and, when untied, an output layer of the
same size over the padded vocabulary. Biases are counted too (Qwen2's QKV bias), which Megatron leaves out.

Mixture of experts (Qwen3-MoE, DeepSeek): the first `dense_layers` layers have the dense MLP, the others a
router (`hidden x experts`), `experts` routed SwiGLU experts of `moe_ffn` and, for DeepSeek, shared experts
(one SwiGLU MLP of `shared_ffn` = n_shared_experts x moe_ffn). Multi-head latent attention (DeepSeek,
`MLAShape`): the query latent (or a full query projection), the KV latent with the shared rotary key, their
RMSNorms, the up-projections and the output projection, as Megatron's MLA holds them.
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
class MLAShape:
    """Multi-head latent attention's sizes (HF config: q_lora_rank, kv_lora_rank, qk_nope_head_dim,
    qk_rope_head_dim, v_head_dim)."""

    q_lora: int | None
    kv_lora: int
    qk_nope: int
    qk_rope: int
    v_head: int

    def params(self, hidden: int, heads: int) -> int:
        qk = heads * (self.qk_nope + self.qk_rope)
        if self.q_lora:  # q_a_proj, q_a_layernorm, q_b_proj
            q = hidden * self.q_lora + self.q_lora + self.q_lora * qk
        else:
            q = hidden * qk
        kv = hidden * (self.kv_lora + self.qk_rope) + self.kv_lora  # kv_a_proj_with_mqa, kv_a_layernorm
        kv += self.kv_lora * heads * (self.qk_nope + self.v_head)  # kv_b_proj
        return q + kv + heads * self.v_head * hidden  # o_proj


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
    shared_ffn: int = 0  # MoE: the shared experts as one MLP (n_shared_experts x moe_ffn)
    dense_layers: int = 0  # MoE: the first layers are dense (first_k_dense_replace)
    qk_norm: bool = False  # per-head RMSNorm of q and k (Qwen3: `ModelArch.qk_norm`)
    mla: MLAShape | None = None
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
        if self.mla is not None:
            return self.mla.params(self.hidden, self.heads)
        qkv = self.hidden * (self.q_size + 2 * self.kv_size)
        bias = (self.q_size + 2 * self.kv_size) if self.qkv_bias else 0
        return qkv + bias + self.q_size * self.hidden

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    def _mlp(self, ffn: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * ffn

    def dense_mlp_params(self) -> int:
        return self._mlp(self.ffn)

    def shared_params(self) -> int:
        """The shared experts of one MoE layer (one SwiGLU MLP of shared_ffn; DeepSeek)."""
        return self._mlp(self.shared_ffn) if self.shared_ffn else 0

    def expert_params(self) -> int:
        """The routed experts of one MoE layer (sharded by EP)."""
        return self._mlp(self.moe_ffn) * self.experts

    def moe_mlp_params(self) -> int:
        """One MoE layer's MLP: the router, the shared experts and every routed expert."""
        return self.hidden * self.experts + self.shared_params() + self.expert_params()

    def mlp_params(self) -> int:
        """The MLP of a MoE layer for a MoE model (every expert), else the dense MLP."""
        return self.moe_mlp_params() if self.experts else self.dense_mlp_params()

    def layer_params(self) -> int:
        """One decoder layer: attention, MLP (all experts of a MoE layer), two RMSNorm weights."""
        return self.attention_params() + self.mlp_params() + 2 * self.hidden

    def decoder_params(self) -> int:
        """Every decoder layer: the dense first layers and the MoE layers."""
        dense = self.attention_params() + self.dense_mlp_params() + 2 * self.hidden
        return (self.layers - self.moe_layers) * dense + self.moe_layers * self.layer_params()

    def active_decoder_params(self) -> int:
        """The decoder parameters one token passes through: a MoE layer's router, shared experts and top-k
        routed experts (the N of 6N training FLOPs per token for a MoE model)."""
        if not self.experts:
            return self.decoder_params()
        dense = self.attention_params() + self.dense_mlp_params() + 2 * self.hidden
        routed = self._mlp(self.moe_ffn) * self.moe_topk
        moe = self.attention_params() + self.hidden * self.experts + self.shared_params() + routed
        return (self.layers - self.moe_layers) * dense + self.moe_layers * (moe + 2 * self.hidden)

    def padded_vocab(self, tp: int, divisible_by: int = 128) -> int:
        """Megatron pads the vocabulary to a multiple of `make-vocab-size-divisible-by` x TP."""
        multiple = max(divisible_by, 1) * max(tp, 1)
        return int(math.ceil(self.vocab / multiple) * multiple)

    def params(self, *, tp: int = 1, divisible_by: int = 128) -> int:
        """Total parameters (embedding and output layer over the padded vocabulary)."""
        emb = self.padded_vocab(tp, divisible_by) * self.hidden
        return self.decoder_params() + self.hidden + emb * (1 if self.tied else 2)

    def active_params(self, *, tp: int = 1, divisible_by: int = 128) -> int:
        """`params` with a MoE layer's unrouted experts left out (equal to `params` for a dense model)."""
        return (
            self.params(tp=tp, divisible_by=divisible_by)
            - self.decoder_params()
            + self.active_decoder_params()
        )

    def largest_layer(self) -> int:
        return max(self.layer_params(), self.vocab * self.hidden)

    def with_layers(self, layers: int) -> ModelShape:
        return replace(self, layers=layers)


def shape_from_arch(arch: Any, *, config: dict[str, Any] | None = None) -> ModelShape:
    """A `ModelShape` from the catalog's / config.json's `ModelArch` (`config`: the raw HF config, for the
    vision fields the arch record does not carry)."""
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
    fields: dict[str, Any] = dict(
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
        qk_norm=bool(getattr(arch, "qk_norm", False)),
        vision=vision,
    )
    return ModelShape(**(fields | moe_shape(arch)))


def moe_shape(arch: Any) -> dict[str, Any]:
    """The MoE and MLA fields of a `ModelShape` from a `ModelArch` ({} for a dense, standard model)."""
    out: dict[str, Any] = {}
    if getattr(arch, "experts", 0):
        out = dict(
            experts=int(arch.experts),
            moe_topk=int(arch.topk),
            moe_ffn=int(arch.moe_ffn),
            shared_ffn=int(arch.shared_experts) * int(arch.moe_ffn),
            dense_layers=int(arch.dense_layers),
        )
    if getattr(arch, "kv_lora", 0):
        out["mla"] = MLAShape(
            q_lora=arch.q_lora,
            kv_lora=arch.kv_lora,
            qk_nope=arch.qk_nope,
            qk_rope=arch.qk_rope,
            v_head=arch.v_head,
        )
        out["head_dim"] = None  # MLA's head dims are its own
    return out
