"""The model-architecture flags MindSpeed-LLM training needs, filled from the catalog or the HF config.

The example scripts spell every architecture fact on the command line (`--num-layers 28 --hidden-size 3584
... --add-qkv-bias --untie-embeddings-and-output-weights`). These come from `ModelArch`, so an experiment
file only carries what the user chooses. User values under `backend_config.training` win.
"""

from __future__ import annotations

from typing import Any

from ascendfactory.backends.common.megatron.moe_flags import moe_flags
from ascendfactory.config.catalog import ModelArch


def _number(value: float) -> float | int:
    """1000000.0 -> 1000000 (as the example scripts write rotary bases); other floats unchanged."""
    return int(value) if float(value).is_integer() else value


def architecture_flags(
    arch: ModelArch, *, tp: int, pp: int, seq_length: int, version: str = "2.1.0"
) -> dict[str, Any]:
    """Ordered flag mapping (to_flags style) for a Llama / Qwen2 / Qwen2.5 / Qwen3 style decoder, plus the
    mixture-of-experts and latent-attention flags of Qwen3-MoE and DeepSeek (`moe_flags`).

    `--max-position-embeddings` is the sequence length, as in the MindSpeed-LLM examples (the rotary
    table only needs to cover the trained length), or with YaRN rope scaling the factor times the original
    length (what 2.1.0's _validate_yarn requires); set it in `training` to change it.
    Dropouts are 0.0: HF checkpoints are trained without dropout, and Megatron's default is 0.1.
    """
    gqa = arch.kv_heads != arch.heads
    head_dim_differs = (
        arch.head_dim is not None and arch.head_dim != arch.hidden // max(arch.heads, 1) and not arch.mla
    )  # MLA's head dims are its own flags (transformers 5 writes head_dim = qk_rope_head_dim for DeepSeek)
    flags = {
        "use-mcore-models": True,
        "tensor-model-parallel-size": tp,
        "pipeline-model-parallel-size": pp,
        "num-layers": arch.layers,
        "hidden-size": arch.hidden,
        "ffn-hidden-size": arch.ffn,
        "num-attention-heads": arch.heads,
        "kv-channels": arch.head_dim if head_dim_differs else None,
        "max-position-embeddings": seq_length,
        "seq-length": seq_length,
        "disable-bias-linear": True,
        "add-qkv-bias": arch.qkv_bias,
        "qk-layernorm": arch.qk_norm,
        "group-query-attention": gqa,
        "num-query-groups": arch.kv_heads if gqa else None,
        "swiglu": True,
        "normalization": "RMSNorm",
        "norm-epsilon": arch.eps,
        "position-embedding-type": "rope",
        "rotary-base": _number(arch.rope),
        "untie-embeddings-and-output-weights": not arch.tied,
        "make-vocab-size-divisible-by": 1,
        "padded-vocab-size": arch.vocab,
        "attention-dropout": 0.0,
        "hidden-dropout": 0.0,
        **moe_flags(arch, version),
    }
    if flags.get("rope-scaling-type") == "yarn":
        # 2.1.0's _validate_yarn (training/arguments.py) requires max-position-embeddings / original == the
        # factor; the YaRN examples of both versions pass it so (DeepSeek-V2-Lite: 40 x 4096 = 163840)
        factor = flags.get("rope-scaling-factor")
        original = flags.get("rope-scaling-original-max-position-embeddings")
        if factor and original:
            flags["max-position-embeddings"] = _number(float(factor) * original)
    return flags
