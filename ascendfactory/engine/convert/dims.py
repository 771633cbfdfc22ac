"""`ModelDims`: the few numbers conversion needs, read from an HF config or from Megatron checkpoint args.

Also the TP/vocabulary arithmetic and the validation of TP against the head counts. No torch import.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ascendfactory.engine.convert.families import Family, family_for, get_family
from ascendfactory.errors import ConfigError, Problem


def _int(value: Any) -> int:
    return int(value or 0)


def _moe_from_hf(get: Any) -> dict[str, Any]:
    """The MoE and MLA fields from an HF config (Qwen3-MoE: num_experts, transformers 5 also writes
    num_local_experts; DeepSeek: n_routed_experts)."""
    return dict(
        num_experts=_int(get("num_experts") or get("num_local_experts") or get("n_routed_experts")),
        moe_ffn_hidden_size=_int(get("moe_intermediate_size")),
        router_topk=_int(get("num_experts_per_tok")),
        n_shared_experts=_int(get("n_shared_experts")),
        first_k_dense=_int(get("first_k_dense_replace")),
        q_lora_rank=get("q_lora_rank") or None,
        kv_lora_rank=_int(get("kv_lora_rank")),
        qk_nope_head_dim=_int(get("qk_nope_head_dim")),
        qk_rope_head_dim=_int(get("qk_rope_head_dim")),
        v_head_dim=_int(get("v_head_dim")),
    )


def _moe_from_args(get: Any) -> dict[str, Any]:
    """The MoE and MLA fields from checkpoint args: Megatron / MindSpeed-LLM training names first
    (--moe-ffn-hidden-size, --moe-shared-expert-intermediate-size or --n-shared-experts, --qk-head-dim,
    --qk-pos-emb-head-dim), then the HF names MindSpeed-LLM's v2 converter stores (moe_intermediate_size,
    qk_nope_head_dim, ...)."""
    ffn = _int(get("moe_ffn_hidden_size") or get("moe_intermediate_size"))
    shared = _int(get("n_shared_experts"))
    if not shared and ffn and get("moe_shared_expert_intermediate_size"):
        shared = _int(get("moe_shared_expert_intermediate_size")) // ffn
    first_k = get("first_k_dense_replace")
    return dict(
        num_experts=_int(get("num_experts") or get("num_local_experts")),
        moe_ffn_hidden_size=ffn,
        router_topk=_int(get("moe_router_topk") or get("num_experts_per_tok")),
        n_shared_experts=shared,
        first_k_dense=max(_int(first_k), 0),  # MindSpeed-LLM writes -1 for "none"
        q_lora_rank=get("q_lora_rank") or None,
        kv_lora_rank=_int(get("kv_lora_rank")),
        qk_nope_head_dim=_int(get("qk_head_dim") or get("qk_nope_head_dim")),
        qk_rope_head_dim=_int(get("qk_pos_emb_head_dim") or get("qk_rope_head_dim")),
        v_head_dim=_int(get("v_head_dim")),
    )


def _family_from_args(args: Any) -> str:
    """The family of a checkpoint whose args name none (Megatron training args)."""
    get = lambda k, d=None: getattr(args, k, d)  # noqa: E731
    if get("multi_latent_attention") or get("multi_head_latent_attention") or get("kv_lora_rank"):
        if get("moe_router_enable_expert_bias") or get("router_bias"):
            return "deepseek3"
        return "deepseek2" if get("q_lora_rank") else "deepseek2-lite"
    if get("num_experts"):
        return "qwen3-moe"
    if get("qk_layernorm"):
        return "qwen3"
    return "qwen25" if get("add_qkv_bias") else "llama2"


@dataclass(frozen=True)
class ModelDims:
    """Shapes and options of a decoder: dense (Llama / Qwen2 / Qwen3) or mixture of experts (Qwen3-MoE,
    DeepSeek-V2/V3 with multi-head latent attention). The MoE and MLA fields are 0 / None for dense models."""

    family: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int = 4096
    norm_epsilon: float = 1e-6
    rotary_base: float = 10000.0
    # mixture of experts
    num_experts: int = 0  # routed experts (HF num_experts / n_routed_experts); 0 = dense
    moe_ffn_hidden_size: int = 0  # HF moe_intermediate_size
    router_topk: int = 0  # HF num_experts_per_tok
    n_shared_experts: int = 0  # DeepSeek: shared experts of moe_ffn_hidden_size each
    first_k_dense: int = 0  # DeepSeek first_k_dense_replace: the first layers are dense
    # multi-head latent attention (DeepSeek)
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0  # Megatron --qk-head-dim
    qk_rope_head_dim: int = 0  # Megatron --qk-pos-emb-head-dim
    v_head_dim: int = 0

    @property
    def fam(self) -> Family:
        return get_family(self.family)

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def mla_q_rows(self) -> int:
        """Rows of the first part of MLA's linear_qkv: q_a_proj (q_lora_rank) or q_proj (heads x head dim)."""
        return self.q_lora_rank or self.num_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)

    @property
    def mla_kv_a_rows(self) -> int:
        """Rows of kv_a_proj_with_mqa: the KV latent plus the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def shared_expert_ffn(self) -> int:
        """Megatron --moe-shared-expert-intermediate-size: all shared experts as one MLP."""
        return self.n_shared_experts * self.moe_ffn_hidden_size

    @classmethod
    def from_hf_config(cls, config: Any, model_type_hf: str | None = None) -> ModelDims:
        """From a transformers config object or a config.json dict."""
        get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
        fam = family_for(config, model_type_hf)
        heads = int(get("num_attention_heads"))
        hidden = int(get("hidden_size"))
        rope = get("rope_theta") or (get("rope_parameters") or {}).get("rope_theta") or 10000.0
        return cls(
            family=fam.name,
            num_layers=int(get("num_hidden_layers")),
            hidden_size=hidden,
            ffn_hidden_size=int(get("intermediate_size")),
            num_heads=heads,
            num_kv_heads=int(get("num_key_value_heads") or heads),
            head_dim=int(get("head_dim") or hidden // heads),
            vocab_size=int(get("vocab_size")),
            tie_word_embeddings=bool(get("tie_word_embeddings", False)),
            max_position_embeddings=int(get("max_position_embeddings") or 4096),
            norm_epsilon=float(get("rms_norm_eps") or 1e-6),
            rotary_base=float(rope),
            **_moe_from_hf(get) if fam.moe else {},
        )

    @classmethod
    def from_megatron_args(cls, args: Any, model_type_hf: str | None = None) -> ModelDims:
        """From the `args` Namespace stored in a Megatron checkpoint (ours or MindSpeed-LLM's)."""
        heads = int(args.num_attention_heads)
        hidden = int(args.hidden_size)
        groups = (
            int(getattr(args, "num_query_groups", None) or heads)
            if getattr(args, "group_query_attention", False)
            else heads
        )
        get = lambda k, d=None: getattr(args, k, d)  # noqa: E731
        if not getattr(args, "group_query_attention", False) and get("num_key_value_heads"):
            groups = int(get("num_key_value_heads"))  # MindSpeed-LLM v2 converter's args: the HF field
        name = get_family(model_type_hf or get("model_type_hf") or _family_from_args(args)).name
        padded = int(get("padded_vocab_size") or get("vocab_size"))
        moe = _moe_from_args(get) if get_family(name).moe else {}
        return cls(
            family=get_family(name).name,
            num_layers=int(args.num_layers),
            hidden_size=hidden,
            ffn_hidden_size=int(get("ffn_hidden_size") or get("intermediate_size")),
            num_heads=heads,
            num_kv_heads=groups,
            head_dim=int(getattr(args, "kv_channels", None) or hidden // heads),
            vocab_size=int(getattr(args, "vocab_size", None) or padded),
            tie_word_embeddings=not bool(getattr(args, "untie_embeddings_and_output_weights", False)),
            max_position_embeddings=int(getattr(args, "max_position_embeddings", None) or 4096),
            norm_epsilon=float(getattr(args, "norm_epsilon", None) or 1e-6),
            rotary_base=float(getattr(args, "rotary_base", None) or 10000.0),
            **moe,
        )

    def padded_vocab_size(self, tp: int, divisible_by: int = 1) -> int:
        """Vocabulary rounded up to a multiple of `divisible_by * tp` (Megatron's rule)."""
        multiple = max(1, divisible_by) * tp
        return -(-self.vocab_size // multiple) * multiple

    def check_ep(self, ep: int, key: str = "--target-expert-parallel-size") -> None:
        """ConfigError unless the routed experts divide evenly over `ep` expert-parallel ranks (Megatron's
        `num_moe_experts % expert_model_parallel_size == 0`, core_r0.8.0 megatron/core/transformer/moe/
        moe_layer.py `BaseMoELayer.__init__`); EP > 1 needs a MoE model."""
        if ep == 1:
            return
        if not self.num_experts:
            raise ConfigError(
                Problem(
                    key=key,
                    message=f"{ep}, but '{self.family}' is a dense model (no experts to distribute)",
                    fix="use 1",
                    source="command line",
                )
            )
        if ep < 1 or self.num_experts % ep:
            valid = [e for e in range(1, self.num_experts + 1) if self.num_experts % e == 0]
            raise ConfigError(
                Problem(
                    key=key,
                    message=f"EP {ep} does not divide the model's {self.num_experts} routed experts",
                    fix=f"use an EP size in {valid}",
                    source="command line",
                )
            )

    def check_tp(self, tp: int, key: str = "--target-tensor-parallel-size") -> None:
        """ConfigError unless attention heads and KV heads (query groups) are both divisible by `tp`."""
        if tp >= 1 and self.num_heads % tp == 0 and self.num_kv_heads % tp == 0:
            return
        valid = [
            t
            for t in range(1, self.num_kv_heads + 1)
            if self.num_heads % t == 0 and self.num_kv_heads % t == 0
        ]
        raise ConfigError(
            Problem(
                key=key,
                message=f"TP {tp} does not divide the model's heads: num_attention_heads ({self.num_heads}) "
                f"and "
                f"num_query_groups / KV heads ({self.num_kv_heads}) must both be multiples of TP",
                fix=f"use a TP size in {valid}",
                source="command line",
            )
        )

    def megatron_args(
        self,
        *,
        tp: int,
        pp: int,
        num_layer_list: list[int] | None,
        padded_vocab_size: int,
        params_dtype: Any,
        make_vocab_size_divisible_by: int = 1,
        iteration: int = 1,
        virtual_stage_layers: int | None = None,
        ep: int = 1,
        grouped_gemm: bool = False,
    ) -> argparse.Namespace:
        """The `args` Namespace stored with every converted shard (the contract's fields and a few more).
        `virtual_stage_layers`: Megatron's --num-layers-per-virtual-pipeline-stage (None: no virtual
        pipeline); the chunk count is stored as virtual_pipeline_model_parallel_size (Megatron's)."""
        fam = self.fam
        fields: dict[str, Any] = dict(
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            ffn_hidden_size=self.ffn_hidden_size,
            num_attention_heads=self.num_heads,
            num_query_groups=self.num_kv_heads,
            group_query_attention=self.num_kv_heads != self.num_heads,
            kv_channels=self.head_dim,
            padded_vocab_size=padded_vocab_size,
            vocab_size=self.vocab_size,
            make_vocab_size_divisible_by=make_vocab_size_divisible_by,
            max_position_embeddings=self.max_position_embeddings,
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            num_layer_list=",".join(map(str, num_layer_list)) if num_layer_list else None,
            num_layers_per_virtual_pipeline_stage=virtual_stage_layers,
            virtual_pipeline_model_parallel_size=(
                self.num_layers // pp // virtual_stage_layers if virtual_stage_layers else None
            ),
            untie_embeddings_and_output_weights=not self.tie_word_embeddings,
            add_qkv_bias=fam.qkv_bias,
            qk_layernorm=fam.qk_norm,
            params_dtype=params_dtype,
            model_type_hf=fam.name,
            norm_epsilon=self.norm_epsilon,
            rotary_base=self.rotary_base,
            normalization="RMSNorm",
            swiglu=True,
            position_embedding_type="rope",
            add_bias_linear=False,
            consumed_train_samples=0,
            iteration=iteration,
            expert_model_parallel_size=ep,
        )
        return argparse.Namespace(**(fields | self._moe_args(tp, grouped_gemm)))

    def _moe_args(self, tp: int, grouped_gemm: bool) -> dict[str, Any]:
        """Megatron / MindSpeed-LLM training names of the MoE and MLA settings, plus the HF names
        MindSpeed-LLM's v2 converter stores (its mg->hf reads those)."""
        if not self.num_experts and not self.mla:
            return {}
        out: dict[str, Any] = {}
        if self.num_experts:
            out |= dict(
                num_experts=self.num_experts,
                moe_ffn_hidden_size=self.moe_ffn_hidden_size,
                moe_intermediate_size=self.moe_ffn_hidden_size,
                moe_router_topk=self.router_topk,
                moe_grouped_gemm=grouped_gemm,
                expert_tensor_parallel_size=tp,
                first_k_dense_replace=self.first_k_dense,
                n_shared_experts=self.n_shared_experts or None,
                moe_shared_expert_intermediate_size=self.shared_expert_ffn or None,
                num_key_value_heads=self.num_kv_heads,
            )
        if self.mla:
            out |= dict(
                multi_latent_attention=True,
                q_lora_rank=self.q_lora_rank,
                kv_lora_rank=self.kv_lora_rank,
                qk_head_dim=self.qk_nope_head_dim,
                qk_pos_emb_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.v_head_dim,
                qk_layernorm=True,  # MindSpeed-LLM's deepseek examples pass --qk-layernorm (the latent norms)
                moe_router_enable_expert_bias=self.family == "deepseek3",
            )
        return out

    def hf_config_dict(self, torch_dtype: str = "bfloat16") -> dict[str, Any]:
        """A config.json for this (dense) model, used when no `--hf-cfg-dir` is given."""
        model_type = self.fam.hf_model_types[0]
        arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[
            model_type
        ]
        return {
            "architectures": [arch],
            "model_type": model_type,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.ffn_hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.norm_epsilon,
            "rope_theta": self.rotary_base,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "torch_dtype": torch_dtype,
        }


def as_dims(cfg: Any) -> ModelDims:
    """Accept a `ModelDims`, an HF config (object or dict), or Megatron checkpoint args."""
    if isinstance(cfg, ModelDims):
        return cfg
    if isinstance(cfg, argparse.Namespace) or hasattr(cfg, "padded_vocab_size"):
        return ModelDims.from_megatron_args(cfg)
    return ModelDims.from_hf_config(cfg)
