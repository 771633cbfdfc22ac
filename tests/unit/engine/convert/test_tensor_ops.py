"""Pure tensor maths: merge/split inverses, TP chunk identities, shape errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.engine.convert import tensor_ops as ops


@st.composite
def qkv_shapes(draw):
    ng = draw(st.integers(1, 4))
    per_group = draw(st.integers(1, 4))
    d = draw(st.integers(1, 8))
    h = draw(st.integers(1, 12))
    bias = draw(st.booleans())
    return ng * per_group, ng, d, h, bias


def _qkv(nq, ng, d, h, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    tail = () if bias else (h,)
    return (
        torch.randn((nq * d, *tail), generator=g),
        torch.randn((ng * d, *tail), generator=g),
        torch.randn((ng * d, *tail), generator=g),
    )


@settings(max_examples=60, deadline=None)
@given(qkv_shapes())
def test_merge_then_split_is_identity(shape):
    nq, ng, d, h, bias = shape
    q, k, v = _qkv(nq, ng, d, h, bias)
    qkv = ops.merge_qkv(q, k, v, num_heads=nq, num_kv_heads=ng, head_dim=d)
    assert qkv.shape[0] == (nq // ng + 2) * ng * d
    q2, k2, v2 = ops.split_qkv(qkv, num_heads=nq, num_kv_heads=ng, head_dim=d)
    assert torch.equal(q, q2) and torch.equal(k, k2) and torch.equal(v, v2)


@settings(max_examples=40, deadline=None)
@given(qkv_shapes(), st.sampled_from([1, 2, 4]))
def test_row_chunk_of_merged_is_merge_of_row_chunks(shape, tp):
    nq, ng, d, h, bias = shape
    if ng % tp:
        return
    q, k, v = _qkv(nq, ng, d, h, bias)
    full = ops.merge_qkv(q, k, v, num_heads=nq, num_kv_heads=ng, head_dim=d)
    for r in range(tp):
        local = ops.merge_qkv(
            ops.chunk(q, tp, r),
            ops.chunk(k, tp, r),
            ops.chunk(v, tp, r),
            num_heads=nq // tp,
            num_kv_heads=ng // tp,
            head_dim=d,
        )
        assert torch.equal(local, ops.chunk(full, tp, r))


def test_merge_qkv_group_layout_is_q_heads_then_k_then_v():
    # 4 query heads, 2 groups, head dim 1: rows are [q0 q1 k0 v0 q2 q3 k1 v1]
    q = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    k = torch.tensor([[10.0], [11.0]])
    v = torch.tensor([[20.0], [21.0]])
    qkv = ops.merge_qkv(q, k, v, num_heads=4, num_kv_heads=2, head_dim=1)
    assert qkv.flatten().tolist() == [0, 1, 10, 20, 2, 3, 11, 21]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.sampled_from([1, 2, 4]), st.integers(1, 8))
def test_gate_up_merge_split_inverse(ffn_per_rank, tp, h):
    gate, up = torch.randn(ffn_per_rank * tp, h), torch.randn(ffn_per_rank * tp, h)
    gates, ups = [], []
    for r in range(tp):
        fc1 = ops.merge_gate_up(gate, up, tp=tp, rank=r)
        assert torch.equal(fc1, torch.cat([gate.chunk(tp)[r], up.chunk(tp)[r]]))
        g, u = ops.split_gate_up(fc1, tp=tp)
        gates.append(g)
        ups.append(u)
    assert torch.equal(torch.cat(gates), gate) and torch.equal(torch.cat(ups), up)


def test_split_gate_up_without_tp_keyword():
    g, u = ops.split_gate_up(torch.arange(8.0).reshape(4, 2))
    assert g.tolist() == [[0, 1], [2, 3]] and u.tolist() == [[4, 5], [6, 7]]


def test_pad_and_unpad_vocab():
    t = torch.randn(5, 3)
    p = ops.pad_vocab(t, 8)
    assert p.shape == (8, 3) and torch.equal(p[:5], t) and not p[5:].any()
    assert ops.pad_vocab(t, padded=5) is t
    assert torch.equal(ops.unpad_vocab(p, 5), t)
    with pytest.raises(ValueError, match="cannot pad 5 rows down to 4"):
        ops.pad_vocab(t, 4)


def test_chunk_owns_its_memory_and_rejects_uneven():
    t = torch.arange(12.0).reshape(4, 3)
    c = ops.chunk(t, 2, 1, dim=0)
    assert c.tolist() == [[6, 7, 8], [9, 10, 11]]
    assert c.untyped_storage().nbytes() == c.numel() * c.element_size()
    assert ops.chunk(t, 3, 2, dim=1).flatten().tolist() == [2, 5, 8, 11]
    with pytest.raises(ValueError, match="not divisible by 3"):
        ops.chunk(t, 3, 0, dim=0)
    with pytest.raises(ValueError, match="outside"):
        ops.chunk(t, 2, 2)


def test_shape_errors_name_the_shapes():
    q, k, v = _qkv(4, 2, 3, 5, False)
    with pytest.raises(ValueError, match=r"q \(12, 5\)"):
        ops.merge_qkv(q, k, v, num_heads=4, num_kv_heads=2, head_dim=4)
    with pytest.raises(ValueError, match="expected"):
        ops.split_qkv(torch.zeros(10, 5), num_heads=4, num_kv_heads=2, head_dim=3)
    with pytest.raises(ValueError, match="not a multiple"):
        ops.merge_qkv(q, k, v, num_heads=3, num_kv_heads=2, head_dim=3)
    with pytest.raises(ValueError, match="odd"):
        ops.split_gate_up(torch.zeros(3, 2))
