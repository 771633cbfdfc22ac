"""The chunked output layer + cross-entropy (`cross_entropy.py`) against the full-logits path
(`F.cross_entropy((h @ W.T).float())`), and its peak memory.

Tolerances: fp32 inputs, loss and gradients within 1e-5 relative (the same arithmetic, summed in another
order); bf16 inputs, loss within 1e-5 relative (fp32 softmax either way) and gradients within 1% of the
largest entry (both round the logits' gradient to bf16 before the same matmuls; the weight's gradient
is rounded once here against once per chunk there)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ascendfactory.engine.train import memory
from ascendfactory.engine.train.cross_entropy import linear_cross_entropy


def _inputs(n=3, s=40, h=24, v=200, dtype=torch.float32, ignored=0.3, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(n, s, h, generator=g)).to(dtype).requires_grad_()
    weight = (torch.randn(v, h, generator=g) * 0.5).to(dtype).requires_grad_()
    labels = torch.randint(0, v, (n, s), generator=g)
    labels[torch.rand(n, s, generator=g) < ignored] = -100
    return hidden, weight, labels


def _full(hidden, weight, labels):
    logits = (hidden @ weight.t()).float()
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def _grads(fn, hidden, weight, labels, scale=0.5):
    loss = fn(hidden, weight, labels)
    gh, gw = torch.autograd.grad(loss * scale, [hidden, weight])
    return loss.detach(), gh, gw


@pytest.mark.parametrize("chunk", [7, 64, 1000])  # several chunks, an uneven last one, a single chunk
def test_fp32_equals_the_full_logits_path(chunk):
    hidden, weight, labels = _inputs()
    want = _grads(_full, hidden, weight, labels)
    got = _grads(lambda h, w, y: linear_cross_entropy(h, w, y, chunk=chunk), hidden, weight, labels)
    assert got[0].dtype == torch.float32
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_bf16_equals_the_full_logits_path_to_bf16_tolerance():
    hidden, weight, labels = _inputs(dtype=torch.bfloat16)
    want = _grads(_full, hidden, weight, labels)
    got = _grads(lambda h, w, y: linear_cross_entropy(h, w, y, chunk=16), hidden, weight, labels)
    assert float(got[0]) == pytest.approx(float(want[0]), rel=1e-5)
    for a, b in zip(got[1:], want[1:]):
        assert a.dtype == b.dtype == torch.bfloat16
        assert float((a.float() - b.float()).abs().max()) <= 0.01 * float(b.float().abs().max())


def test_no_label_gives_nan_like_the_full_path():
    hidden, weight, labels = _inputs(ignored=1.0)
    loss, gh, gw = _grads(lambda h, w, y: linear_cross_entropy(h, w, y, chunk=16), hidden, weight, labels)
    ref = _grads(_full, hidden, weight, labels)
    assert torch.isnan(loss) and torch.isnan(ref[0])  # the NaN check names the micro-batch
    assert torch.equal(gh, ref[1]) and torch.equal(gw, ref[2])  # zero gradients, as the full path's


def test_without_gradients_only_the_loss_is_computed():
    hidden, weight, labels = _inputs()
    with torch.no_grad():
        got = linear_cross_entropy(hidden, weight, labels, chunk=9)
        assert not got.requires_grad
        assert float(got) == pytest.approx(float(_full(hidden, weight, labels)), rel=1e-6)


def _peak_bytes(fn, tokens: int, vocab: int, hidden: int = 32) -> int:
    hidden_states, weight, labels = _inputs(n=1, s=tokens, h=hidden, v=vocab, ignored=0.0)
    tracker = memory.start_tracker(torch.device("cpu"))
    try:
        tracker.seed([hidden_states, weight])
        base = tracker.allocated
        loss = fn(hidden_states, weight, labels)
        loss.backward()
        return tracker.peak - base
    finally:
        memory.stop_tracker(tracker)


def test_peak_does_not_grow_with_tokens_times_vocabulary():
    """The full path holds logits, fp32 log-softmax and their gradients for every token (about 12 bytes
    per token per vocabulary entry); the chunked path one chunk's worth, whatever the token count."""
    vocab, chunk = 4096, 256
    chunked = lambda h, w, y: linear_cross_entropy(h, w, y, chunk=chunk)  # noqa: E731
    small, large = (_peak_bytes(chunked, n, vocab) for n in (1024, 4096))
    full_large = _peak_bytes(_full, 4096, vocab)
    assert full_large >= 12 * 4096 * vocab
    per_token_small = 4 * 32 * 4  # hidden states, their gradient and the labels grow with the tokens only
    assert large - small <= (4096 - 1024) * per_token_small
    assert large < 16 * chunk * vocab + 2 * 4 * vocab * 32 + 4096 * per_token_small
    assert large * 10 < full_large
