"""The fused kernels (`kernels.py`): RMSNorm through `torch.nn.functional.rms_norm` on the same weights and
names, and a compiled decoder layer against the eager one.

Tolerances: fp32, the fused RMSNorm within 1e-6 relative of HF's (the same maths); bf16 within one bf16
rounding step (HF rounds the normalised value before scaling, the fused kernel once at the end). The
compiled layers (inductor's generated kernels, other summation orders) within 1e-5 of the largest output
and 1e-4 of each gradient's largest entry of eager, fp32 (measured: 1e-6, 2e-6)."""

from __future__ import annotations

import pytest
import torch
import transformers

from ascendfactory.engine.train import kernels
from ascendfactory.engine.train.model import build_stage, init_random


def _stage(family: str = "qwen3"):
    cls = transformers.Qwen3Config if family == "qwen3" else transformers.Qwen2Config
    cfg = cls(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        vocab_size=64,
        max_position_embeddings=64,
    )
    stage = build_stage(cfg, layers=[2], pp_rank=0, device=torch.device("cpu"))
    init_random(stage, std=0.2, num_layers=2, seed=5, rank_seed=0)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for n, p in stage.named_parameters():
            if n.endswith("norm.weight"):  # not all ones: the scaling is part of what is compared
                p.copy_(torch.rand(p.shape, generator=g) + 0.5)
    return stage


def test_fused_rmsnorm_replaces_every_norm_keeping_weights_and_names():
    stage = _stage()
    names = [n for n, _ in stage.named_parameters()]
    norm_weights = {n: p for n, p in stage.named_parameters() if n.endswith("norm.weight")}
    assert kernels.use_fused_rmsnorm(stage) == 2 * 4 + 1  # per layer: input, post-attention, q, k; final
    assert [n for n, _ in stage.named_parameters()] == names
    assert all(dict(stage.named_parameters())[n] is p for n, p in norm_weights.items())
    assert not any(kernels.is_rmsnorm(m) for m in stage.modules())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rmsnorm_follows_hf(dtype):
    ref = _stage("qwen2").to(dtype)
    fused = _stage("qwen2").to(dtype)
    kernels.use_fused_rmsnorm(fused)
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    a, b = ref(tokens).float(), fused(tokens).float()
    if dtype == torch.float32:
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    else:
        assert (a - b).abs().max() <= 0.05 * a.abs().max()
    norm = ref.model.layers["0"].input_layernorm
    x = torch.randn(3, 5, 32, dtype=dtype)
    want = norm(x).float()
    got = kernels.FusedRMSNorm(norm.weight, norm.variance_epsilon)(x).float()
    step = 2.0**-7 if dtype == torch.bfloat16 else 1e-6
    assert ((got - want).abs() <= step * want.abs().clamp(min=1.0)).all()


@pytest.mark.slow
def test_a_compiled_layer_equals_the_eager_one():
    """torch.compile of the decoder layers (inductor on CPU: the first call compiles, about a minute)."""
    eager, compiled = _stage("qwen2"), _stage("qwen2")
    kernels.compile_layers(list(compiled.model.layers.values()))
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    outputs = [model(tokens) for model in (eager, compiled)]
    for out in outputs:
        out.float().square().mean().backward()
    a, b = (o.detach() for o in outputs)
    assert (a - b).abs().max() <= 1e-5 * a.abs().max()
    for (n, p), (_, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        assert (p.grad - q.grad).abs().max() <= 1e-4 * p.grad.abs().max(), n
