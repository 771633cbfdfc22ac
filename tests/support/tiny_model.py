"""Small random HF models built locally from transformers configs (tests, benchmark, --verify-logits demos).

No model hub: the config is written inline, weights are random with a fixed seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_MODEL_TYPES = {"llama2": "llama", "qwen25": "qwen2", "qwen3": "qwen3"}


def tiny_config(
    family: str,
    *,
    tied: bool = False,
    num_layers: int = 4,
    hidden_size: int = 64,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 96,
    vocab_size: int = 250,
    head_dim: int | None = None,
) -> Any:
    """A transformers config of the family (`llama2`, `qwen25`, `qwen3`) with GQA and the given sizes."""
    from transformers import AutoConfig

    kwargs: dict[str, Any] = dict(
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        vocab_size=vocab_size,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-6,
    )
    if head_dim is not None or family == "qwen3":
        kwargs["head_dim"] = head_dim or hidden_size // num_heads
    return AutoConfig.for_model(_MODEL_TYPES[family], **kwargs)


def build_tiny_model(
    out_dir: str | Path,
    family: str,
    *,
    seed: int = 0,
    dtype: str = "float32",
    tied: bool = False,
    **sizes: Any,
) -> Path:
    """Save a random model of the family to `out_dir` (config.json + safetensors); returns `out_dir`.

    Every parameter is drawn from N(0, 0.02) with `seed` (norms and biases too, so that no two tensors
    are equal by accident and a swapped mapping is caught by the round-trip tests).
    """
    import torch
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(family, tied=tied, **sizes)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02 + (1.0 if p.ndim == 1 else 0.0))
    model = model.to(getattr(torch, dtype))
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    return out
