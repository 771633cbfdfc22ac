"""Small random HF models built locally from transformers configs (tests, benchmark, --verify-logits demos).

No model hub: the config is written inline, weights are random with a fixed seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_MODEL_TYPES = {
    "llama2": "llama",
    "qwen25": "qwen2",
    "qwen3": "qwen3",
    "qwen3-moe": "qwen3_moe",
    "deepseek2-lite": "deepseek_v2",
    "deepseek2": "deepseek_v2",
    "deepseek3": "deepseek_v3",
}
MOE_FAMILIES = ("qwen3-moe", "deepseek2-lite", "deepseek2", "deepseek3")


def _moe_kwargs(family: str, num_experts: int, moe_intermediate_size: int, num_heads: int) -> dict[str, Any]:
    """The MoE (and, for DeepSeek, MLA) fields of a tiny config: top-2 routing; DeepSeek with one dense
    first layer and two shared experts, 16/8/16 nope/rope/v head dims, a 32-wide KV latent (V2-Lite: no q
    latent)."""
    kw: dict[str, Any] = dict(
        moe_intermediate_size=moe_intermediate_size, num_experts_per_tok=2, norm_topk_prob=True
    )
    if family == "qwen3-moe":
        return kw | dict(num_experts=num_experts, decoder_sparse_step=1, mlp_only_layers=[])
    kw |= dict(
        n_routed_experts=num_experts,
        n_shared_experts=2,
        first_k_dense_replace=1,
        moe_layer_freq=1,
        kv_lora_rank=32,
        q_lora_rank=None if family == "deepseek2-lite" else 24,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        num_key_value_heads=num_heads,
    )
    if family == "deepseek3":
        kw |= dict(n_group=2, topk_group=1)
    return kw


def hub_config_keys(path: Path) -> None:
    """Add the keys the Hub's config.json files carry that transformers 5 writes under other names
    (`torch_dtype` for `dtype`, `rope_theta` beside `rope_parameters`, Qwen3-MoE's `num_experts` for
    `num_local_experts`): MindSpeed-LLM's converters read the Hub's names."""
    import json

    cfg = json.loads((path / "config.json").read_text())
    cfg.setdefault("torch_dtype", cfg.get("dtype", "float32"))
    cfg.setdefault("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    if cfg.get("model_type") == "qwen3_moe":
        cfg.setdefault("num_experts", cfg.get("num_local_experts"))
    (path / "config.json").write_text(json.dumps(cfg, indent=2))


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
    num_experts: int = 4,
    moe_intermediate_size: int = 32,
) -> Any:
    """A transformers config of the family (`llama2`, `qwen25`, `qwen3`, or a mixture-of-experts family of
    `MOE_FAMILIES`) with GQA and the given sizes."""
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
    if head_dim is not None or family in ("qwen3", "qwen3-moe"):
        kwargs["head_dim"] = head_dim or hidden_size // num_heads
    if family in MOE_FAMILIES:
        kwargs |= _moe_kwargs(family, num_experts, moe_intermediate_size, num_heads)
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
    for name, module in model.named_modules():  # DeepSeek-V3's router bias: fp32 in the Hub's bf16 files
        bias = getattr(module, "e_score_correction_bias", None)
        if isinstance(bias, torch.Tensor):
            with torch.no_grad():
                fp32 = torch.randn(bias.shape, generator=gen) * 0.02
            if isinstance(bias, torch.nn.Parameter):
                module.e_score_correction_bias = torch.nn.Parameter(fp32, requires_grad=False)
            else:
                module.e_score_correction_bias = fp32
    out = Path(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    hub_config_keys(out)
    return out
