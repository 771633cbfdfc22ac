"""The MoE router against hand-worked examples: top-k before/after the softmax, capacity and dropping, the
Switch load-balancing loss, DeepSeek's sequence loss, the z-loss; and which differences from the HF model's
routing the trainer documents."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from ascendfactory.engine.train.moe import routing as R
from ascendfactory.engine.train.moe.spec import HFMoE, MoESpec

SPEC = MoESpec(
    num_experts=4, topk=2, ffn_hidden_size=8, shared_ffn_hidden_size=0, ep=1, tp=1,
    load_balancing="aux_loss", aux_loss_coeff=0.0, z_loss_coeff=None, seq_aux=False, pre_softmax=False,
    score_function="softmax", norm_topk_prob=False, scaling_factor=None, num_groups=None, group_topk=None,
    capacity_factor=None, pad_to_capacity=False, drop_policy="probs", dispatcher="alltoall",
    grouped_gemm=False, gating_fp32=False, input_jitter_eps=None, layer_recompute=False,
    per_layer_logging=False,
)  # fmt: skip


def spec(**kw) -> MoESpec:
    return dataclasses.replace(SPEC, **kw)


def test_post_softmax_is_the_softmax_of_the_top_logits():
    probs, idx, counts = R.topk_with_capacity(torch.tensor([[1.0, 2.0, 0.0, 3.0]]), 2)
    e = math.e
    assert idx.tolist() == [[3, 1]]
    assert probs[0].tolist() == pytest.approx([e / (e + 1), 1 / (e + 1)])
    assert counts.tolist() == [0, 1, 0, 1]


def test_pre_softmax_keeps_the_full_softmax_values():
    probs, idx, _ = R.topk_with_capacity(torch.tensor([[1.0, 2.0, 0.0, 3.0]]), 2, pre_softmax=True)
    total = math.e + math.e**2 + 1 + math.e**3
    assert idx.tolist() == [[3, 1]]
    assert probs[0].tolist() == pytest.approx([math.e**3 / total, math.e**2 / total])


def test_capacity_drops_the_lowest_probabilities_or_the_last_positions():
    # pre-softmax top-1 over two experts; tokens 0..2 choose expert 0 with 0.7, 0.8, 0.9; token 3 expert 1
    p = torch.tensor([[0.7, 0.3], [0.8, 0.2], [0.9, 0.1], [0.4, 0.6]])
    logits = p.log()
    probs, idx, counts = R.topk_with_capacity(logits, 1, capacity_factor=1.0, pre_softmax=True)
    # capacity = ceil(4 tokens x 1 / 2 experts x 1.0) = 2: expert 0 keeps tokens 1 and 2
    assert idx[:, 0].tolist() == [R.DROPPED, 0, 0, 1]
    assert probs[:, 0].tolist() == pytest.approx([0.0, 0.8, 0.9, 0.6])
    assert counts.tolist() == [2, 1]
    _, idx, _ = R.topk_with_capacity(logits, 1, capacity_factor=1.0, pre_softmax=True, drop_policy="position")
    assert idx[:, 0].tolist() == [0, 0, R.DROPPED, 1]
    probs, idx, counts = R.topk_with_capacity(
        logits, 1, capacity_factor=1.0, pre_softmax=True, pad_to_capacity=True
    )
    assert idx.shape == (2, 2) and sorted(idx[0].tolist()) == [1, 2] and 3 in idx[1].tolist()
    assert counts.tolist() == [3, 1]  # before dropping (what each expert was chosen by)


def test_switch_load_balancing_loss_by_hand():
    scores = torch.tensor([[0.75, 0.25], [0.5, 0.5]])
    # sum_e P_e f_e = 1.25 x 2 + 0.75 x 0 = 2.5; x E coeff / (N^2 k) = 2 x 1 / 4
    assert float(R.switch_load_balancing_loss(scores, torch.tensor([2, 0]), 1, 1.0)) == pytest.approx(1.25)
    # perfectly balanced top-1 routing gives coeff x 1
    balanced = R.switch_load_balancing_loss(torch.full((4, 4), 0.25), torch.tensor([1, 1, 1, 1]), 1, 0.01)
    assert float(balanced) == pytest.approx(0.01)


def test_seq_aux_loss_is_per_sequence():
    # two sequences of two tokens, two experts, top-1; equal logits: scores 0.5 everywhere
    logits = torch.zeros(4, 2)
    idx = torch.tensor([[0], [0], [0], [1]])
    # seq 0: counts [2, 0] -> f = counts / (2 x 1 / 2) = [2, 0], sum P f = 0.5 x 2 = 1
    # seq 1: counts [1, 1] -> f = [1, 1], sum = 1; mean 1
    loss = R.seq_aux_loss(logits, idx, batch=2, topk=1, coeff=0.1, score_function="softmax")
    assert float(loss) == pytest.approx(0.1)
    dropped = torch.tensor([[0], [R.DROPPED], [0], [1]])  # a dropped slot counts for no expert
    loss = R.seq_aux_loss(logits, dropped, batch=2, topk=1, coeff=1.0, score_function="softmax")
    assert float(loss) == pytest.approx((0.5 * 1 + 1.0) / 2)


def test_z_loss_of_equal_logits_is_log_e_squared():
    assert float(R.z_loss(torch.zeros(3, 4), 2.0)) == pytest.approx(2.0 * math.log(4) ** 2)


def test_route_aux_loss_renormalises_and_divides_the_coefficient_by_tp():
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    out = R.route(logits, spec(aux_loss_coeff=0.01, tp=2, norm_topk_prob=True), batch=1, training=True)
    assert out.probs.sum(dim=-1).tolist() == pytest.approx([1.0] * 6)
    [(name, loss, coeff)] = out.losses
    assert name == "load_balancing_loss" and coeff == pytest.approx(0.005)
    counts = torch.bincount(out.indices.reshape(-1), minlength=4)
    ref = R.switch_load_balancing_loss(torch.softmax(logits, -1), counts, 2, 0.005)
    assert float(loss) == pytest.approx(float(ref))
    assert R.route(logits, spec(aux_loss_coeff=0.01), batch=1, training=False).losses == []


def test_route_none_scales_groups_and_adds_the_seq_loss():
    logits = torch.tensor([[4.0, 3.0, 0.0, 2.5], [0.0, 1.0, 5.0, 4.5]])
    out = R.route(
        logits,
        spec(load_balancing="none", pre_softmax=True, scaling_factor=2.0, num_groups=2, group_topk=1,
             seq_aux=True, aux_loss_coeff=0.1),
        batch=1,
        training=True,
    )  # fmt: skip
    soft = torch.softmax(logits, -1)
    # group scores: token 0 {0,1}: 4+3 vs {2,3}: 2.5 -> group 0; token 1 {2,3} -> experts 2, 3
    assert out.indices.tolist() == [[0, 1], [2, 3]]
    assert torch.allclose(out.probs, 2 * soft.gather(1, out.indices))
    assert [n for n, _, _ in out.losses] == ["load_balancing_loss"]


def test_softmax_topk_has_no_loss():
    out = R.route(
        torch.randn(5, 4), spec(load_balancing="softmax_topk", aux_loss_coeff=1.0), batch=1, training=True
    )
    assert out.losses == [] and out.tokens_per_expert.sum() == 10


def test_z_loss_is_listed_with_its_tp_share():
    out = R.route(torch.zeros(2, 4), spec(z_loss_coeff=1e-3, tp=2), batch=1, training=True)
    [(name, loss, coeff)] = out.losses
    assert name == "z_loss" and coeff == pytest.approx(5e-4)
    assert float(loss) == pytest.approx(5e-4 * math.log(4) ** 2)


def _hf(**kw) -> HFMoE:
    base = dict(
        model_type="qwen3_moe", num_experts=4, topk=2, ffn_hidden_size=8, shared_ffn_hidden_size=0,
        norm_topk_prob=True, scaling_factor=1.0, topk_method="greedy", num_groups=None, group_topk=None,
        first_k_dense_replace=0, moe_layer_freq=1, aux_loss_coeff=0.001, seq_aux=False,
    )  # fmt: skip
    return HFMoE(**{**base, **kw})


def test_routing_differences_from_the_hf_model():
    assert spec().hf_routing_differences(_hf()) == []  # Megatron's default = renormalised top-k
    assert spec(pre_softmax=True, norm_topk_prob=True).hf_routing_differences(_hf()) == []
    [why] = spec().hf_routing_differences(_hf(norm_topk_prob=False))
    assert "--moe-router-pre-softmax" in why
    assert spec(pre_softmax=True).hf_routing_differences(_hf(norm_topk_prob=False)) == []
    assert any("capacity" in w for w in spec(capacity_factor=1.0).hf_routing_differences(_hf()))


def test_moe_layers_of_qwen3_and_deepseek():
    qwen = _hf(first_k_dense_replace=1, moe_layer_freq=2)  # decoder_sparse_step 2
    assert [qwen.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert not _hf().is_moe_layer(2, mlp_only_layers=(2,))
    ds = _hf(model_type="deepseek_v2", first_k_dense_replace=1)
    assert [ds.is_moe_layer(i) for i in range(3)] == [False, True, True]
