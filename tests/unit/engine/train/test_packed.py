"""Packed sequences (`packed.py`): position ids and documents as MindSpeed-LLM / Megatron lay them out, the
attention mask and cumulative lengths, and a packed row giving each document the logits it has alone."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch
import transformers

from ascendfactory.engine.train import packed
from ascendfactory.engine.train.model import build_stage, init_random
from ascendfactory.engine.train.packed import Packing, PackingSpec, neat_positions, reset_positions

EOD = 9


def _megatron_positions(tokens: list[int], eod: int) -> list[int]:
    """Megatron's description: positions count from 0 and, after each EOD at index i, every later
    position is lowered by i + 1 - (the previous document's start)."""
    positions = list(range(len(tokens)))
    prev = 0
    for i, t in enumerate(tokens):
        if t == eod:
            for j in range(i + 1, len(tokens)):
                positions[j] -= i + 1 - prev
            prev = i + 1
    return positions


@pytest.mark.parametrize(
    "tokens",
    [[1, 2, EOD, 3, 4, 5, EOD, 6], [EOD, EOD, 1], [1, 2, 3], [1, EOD], [EOD, 1, 2, EOD, EOD, 3, 4, 5, 6]],
)
def test_reset_positions_follow_megatron(tokens):
    got = reset_positions(np.array(tokens), EOD)
    assert got.tolist() == _megatron_positions(tokens, EOD)


def test_neat_pack_positions_count_within_each_sample_then_zero_padding():
    mask = np.array([1, 1, 1, 2, 2, 3, 0, 0])
    assert neat_positions(mask).tolist() == [0, 1, 2, 0, 1, 0, 0, 0]


def _spec(**kw) -> PackingSpec:
    args = argparse.Namespace(reset_position_ids=False, reset_attention_mask=False, neat_pack=False)
    for k, v in kw.items():
        setattr(args, k, v)
    spec = PackingSpec.from_args(args, None if args.neat_pack else EOD)
    assert spec is not None
    return spec


def test_documents_from_positions_or_from_eod():
    tokens = np.array([1, 2, EOD, 3, 4, EOD, 5])
    pos, doc = _spec(reset_position_ids=True).layout(tokens)
    assert pos.tolist() == [0, 1, 2, 0, 1, 2, 0] and doc.tolist() == [0, 0, 0, 1, 1, 1, 2]
    pos, doc = _spec(reset_attention_mask=True).layout(tokens)  # positions go on, attention is cut
    assert pos.tolist() == list(range(7)) and doc.tolist() == [0, 0, 0, 1, 1, 1, 2]
    pos, doc = _spec(reset_position_ids=True, neat_pack=True).layout(tokens, np.array([1, 1, 1, 2, 2, 0, 0]))
    assert pos.tolist() == [0, 1, 2, 0, 1, 0, 0] and doc.tolist() == [0, 0, 0, 1, 1, 2, 3]
    assert (
        PackingSpec.from_args(argparse.Namespace(reset_position_ids=False, reset_attention_mask=False), 1)
        is None
    )


def test_mask_and_cumulative_lengths():
    doc = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 2, 2]])
    p = Packing(torch.zeros_like(doc), doc)
    m = p.mask()
    assert m.shape == (2, 1, 5, 5)
    for b in range(2):
        for i in range(5):
            for j in range(5):
                assert bool(m[b, 0, i, j]) == (j <= i and doc[b, i] == doc[b, j])
    cu, longest = p.cumulative_lengths()
    assert cu.tolist() == [0, 2, 5, 6, 8, 10] and cu.dtype == torch.int32 and longest == 3
    kw = Packing(torch.zeros_like(doc), doc, varlen=True).layer_kwargs()
    assert kw["attention_mask"] is None and kw["cu_seq_lens_q"].tolist() == cu.tolist()


def _model():
    cfg = transformers.Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
    )
    stage = build_stage(cfg, layers=[2], pp_rank=0, device=torch.device("cpu"))
    init_random(stage, std=0.1, num_layers=2, seed=1, rank_seed=0)
    packed.use_packed_attention(cfg)
    return stage.eval()


@pytest.mark.parametrize("flags", [{"reset_position_ids": True}, {"reset_attention_mask": True}])
def test_a_packed_row_gives_each_document_its_own_logits(flags):
    """Documents packed into one row (and a second row) see only themselves: the logits of each equal
    those of the document run alone (with --reset-attention-mask alone the positions go on, which RoPE's
    relative positions do not see)."""
    model = _model()
    g = torch.Generator().manual_seed(0)
    docs = [torch.randint(10, 64, (n,), generator=g).tolist() + [EOD] for n in (4, 7, 2, 5)]
    rows = [docs[0] + docs[1] + docs[2], docs[3] + docs[0] + docs[2][:1]]
    width = max(len(r) for r in rows)
    rows = [r + [EOD] * (width - len(r)) for r in rows]
    tokens = torch.tensor(rows)
    spec = _spec(**flags)
    layouts = [spec.layout(np.array(r)) for r in rows]
    pos = torch.from_numpy(np.stack([p for p, _ in layouts]))
    doc = torch.from_numpy(np.stack([d for _, d in layouts]))
    with torch.no_grad():
        model.set_packing([Packing(pos, doc)])
        out = model(tokens)
        model.set_packing([])
        for r, row in enumerate(rows):
            start = 0
            for d in docs[:3] if r == 0 else docs[3:4] + docs[:1]:
                alone = model(torch.tensor([d]))[0]
                assert torch.allclose(out[r, start : start + len(d)], alone, atol=1e-5), (r, start)
                start += len(d)


def test_the_varlen_call_matches_the_masked_one(monkeypatch):
    """The CUDA varlen kernel's glue (flattening the rows, grouped-query heads, the causal window) against
    SDPA with the block mask, the kernel stood in for by per-document causal SDPA on the CPU."""
    import torch.nn.attention.varlen as varlen_mod

    def reference(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False):
        assert window_size == (-1, 0) and max_q == max_k
        out = torch.empty_like(q)
        for a, b in zip(cu_q.tolist(), cu_q.tolist()[1:]):
            qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))
            out[a:b] = torch.nn.functional.scaled_dot_product_attention(
                qs, ks, vs, is_causal=True, scale=scale, enable_gqa=enable_gqa
            ).transpose(0, 1)
        return out

    monkeypatch.setattr(varlen_mod, "varlen_attn", reference)
    model = _model()
    attn = model.model.layers["0"].self_attn
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, h, 9, 8, generator=g) for h in (4, 2, 2))
    doc = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0, 1, 1, 1]])
    masked = Packing(torch.zeros_like(doc), doc).layer_kwargs()
    flat = Packing(torch.zeros_like(doc), doc, varlen=True).layer_kwargs()
    want, _ = packed.attention_forward(attn, q, k, v, masked.pop("attention_mask"), scaling=0.3)
    got, _ = packed.attention_forward(attn, q, k, v, flat.pop("attention_mask"), scaling=0.3, **flat)
    assert got.shape == want.shape == (2, 9, 4, 8)
    assert torch.allclose(got, want, atol=1e-6)
