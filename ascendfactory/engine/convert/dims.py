"""`ModelDims`: the few numbers conversion needs, read from an HF config or from Megatron checkpoint args.

Also the TP/vocabulary arithmetic and the validation of TP against the head counts. No torch import.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ascendfactory.engine.convert.families import Family, family_for, get_family
from ascendfactory.errors import ConfigError, Problem


@dataclass(frozen=True)
class ModelDims:
    """Shapes and options of a dense decoder (Llama / Qwen2 / Qwen3)."""

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

    @property
    def fam(self) -> Family:
        return get_family(self.family)

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
        name = model_type_hf or getattr(args, "model_type_hf", None)
        if not name:
            name = (
                "qwen3"
                if getattr(args, "qk_layernorm", False)
                else ("qwen25" if getattr(args, "add_qkv_bias", False) else "llama2")
            )
        padded = int(args.padded_vocab_size)
        return cls(
            family=get_family(name).name,
            num_layers=int(args.num_layers),
            hidden_size=hidden,
            ffn_hidden_size=int(args.ffn_hidden_size),
            num_heads=heads,
            num_kv_heads=groups,
            head_dim=int(getattr(args, "kv_channels", None) or hidden // heads),
            vocab_size=int(getattr(args, "vocab_size", None) or padded),
            tie_word_embeddings=not bool(getattr(args, "untie_embeddings_and_output_weights", False)),
            max_position_embeddings=int(getattr(args, "max_position_embeddings", None) or 4096),
            norm_epsilon=float(getattr(args, "norm_epsilon", None) or 1e-6),
            rotary_base=float(getattr(args, "rotary_base", None) or 10000.0),
        )

    def padded_vocab_size(self, tp: int, divisible_by: int = 1) -> int:
        """Vocabulary rounded up to a multiple of `divisible_by * tp` (Megatron's rule)."""
        multiple = max(1, divisible_by) * tp
        return -(-self.vocab_size // multiple) * multiple

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
    ) -> argparse.Namespace:
        """The `args` Namespace stored with every converted shard (the contract's fields and a few more).
        `virtual_stage_layers`: Megatron's --num-layers-per-virtual-pipeline-stage (None: no virtual
        pipeline); the chunk count is stored as virtual_pipeline_model_parallel_size (Megatron's)."""
        fam = self.fam
        return argparse.Namespace(
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
            # read without a default by MindSpeed-LLM 26.1.0's mg->hf (tasks/checkpoint/convert_mg2hf.py
            # Mg2HfConvert.__init__: self.load_model.expert_model_parallel_size); dense models: 1
            expert_model_parallel_size=1,
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
        )

    def hf_config_dict(self, torch_dtype: str = "bfloat16") -> dict[str, Any]:
        """A config.json for this model, used when no `--hf-cfg-dir` is given."""
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
