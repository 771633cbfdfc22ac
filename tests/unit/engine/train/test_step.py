"""Per-step mechanics kept cheap without changing numerics: clipping, the rotary cache, the memory probes."""

import os

import pytest
import torch
import transformers

from ascendfactory.engine.train import monitor, step
from ascendfactory.engine.train.model import build_stage
from ascendfactory.engine.train.parallel import MALLOC_ENV, tune_cpu_allocator


class _Dim:
    def size(self) -> int:
        return 1


MESH = {"tp": _Dim(), "pp": _Dim()}


def _params(scale: float) -> list[torch.nn.Parameter]:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in [(64, 32), (32,), (7, 5, 3)]]
    for p in params:
        p.grad = torch.randn_like(p) * scale
    return params


def _reference(params: list[torch.nn.Parameter], clip: float) -> tuple[float, list[torch.Tensor]]:
    """The former implementation: float64 sum of squared per-tensor norms, Python-float coefficient."""
    grads = [p.grad.clone() for p in params]
    squares = torch.stack(torch._foreach_norm(grads)).to(torch.float64).pow(2)
    norm = float((torch.zeros((), dtype=torch.float64) + squares.sum()).sqrt())
    coeff = clip / (norm + 1e-6)
    if coeff < 1.0:
        torch._foreach_mul_(grads, coeff)
    return norm, grads


@pytest.mark.parametrize("scale", [0.01, 10.0])  # below / above the clip threshold
def test_grad_norm_and_clip_is_bit_identical_to_the_plain_formula(scale):
    params = _params(scale)
    norm_ref, grads_ref = _reference(params, clip=1.0)
    norm, found_inf = step.grad_norm_and_clip(params, mesh=MESH, clip=1.0, sharded=[False] * 3)
    assert not found_inf and norm == norm_ref
    assert all(torch.equal(p.grad, g) for p, g in zip(params, grads_ref))


def test_grad_norm_reports_non_finite_without_clipping():
    params = _params(1.0)
    params[1].grad[0] = float("inf")
    before = [p.grad.clone() for p in params]
    _, found_inf = step.grad_norm_and_clip(params, mesh=MESH, clip=1.0)
    assert found_inf and all(torch.equal(p.grad, b) for p, b in zip(params, before))


def test_shard_mask_of_plain_tensors():
    assert step.shard_mask([torch.zeros(2), torch.zeros(3)]) == [False, False]


def test_rotary_embeddings_are_computed_once_per_length():
    cfg = transformers.Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
    )
    stage = build_stage(cfg, layers=[1], pp_rank=0, device=torch.device("cpu"))
    h = torch.zeros(2, 12, 32)
    first = stage.rotary(h)
    assert stage.rotary(h) is first
    pos, (cos, sin) = stage.rotary(torch.zeros(2, 7, 32))
    ref = stage.model.rotary_emb(h[:, :7], torch.arange(7).unsqueeze(0))
    assert pos.shape == (1, 7) and torch.equal(cos, ref[0]) and torch.equal(sin, ref[1])
    assert not cos.requires_grad


def test_phase_without_memory_probes_times_only():
    with monitor.phase("train_step", torch.device("cpu"), memory=False) as rec:
        with rec.execute():
            pass
    assert set(rec.metrics) == {"time/train_step/execute", "time/train_step/total"}
    with monitor.phase("train_step", torch.device("cpu")) as rec:
        pass
    assert "memory/cpu/train_step/end/rss" in rec.metrics


def test_allocator_tuning_can_be_turned_off(monkeypatch):
    monkeypatch.setitem(os.environ, MALLOC_ENV, "0")
    assert tune_cpu_allocator() is False
