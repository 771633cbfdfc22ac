"""Opt-in: the MoE router functions against Megatron-LM's own (core_r0.8.0 `transformer/moe/moe_utils.py`,
the Megatron of MindSpeed-LLM 2.1.0) on the CPU. Set AF_MEGATRON_LM to a checkout of that branch.

Megatron's `topk_softmax_with_capacity` and `switch_load_balancing_loss_func` run on the same logits as
`routing.topk_with_capacity` / `routing.switch_load_balancing_loss`: the same probabilities, experts and
loss; with a capacity factor and the `probs` policy the same kept slots (the token counts differ by
design: MindSpeed-LLM 2.1.0 counts the kept tokens, r0.8.0 the chosen ones, `routing`'s docstring)."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import torch

from ascendfactory.engine.train.moe import routing as R

ROOT = os.environ.get("AF_MEGATRON_LM", "")
pytestmark = pytest.mark.skipif(
    not (ROOT and (Path(ROOT) / "megatron" / "core").is_dir()),
    reason="set AF_MEGATRON_LM to a Megatron-LM core_r0.8.0 checkout to compare with Megatron's own code",
)


@pytest.fixture(scope="module")
def upstream():
    import packaging.version  # noqa: F401

    sys.path.insert(0, ROOT)
    if "pkg_resources" not in sys.modules:
        shim = types.ModuleType("pkg_resources")
        shim.packaging = sys.modules["packaging"]  # type: ignore[attr-defined]
        sys.modules["pkg_resources"] = shim
    from megatron.core.transformer.moe import moe_utils

    yield moe_utils
    sys.path.remove(ROOT)


@pytest.mark.parametrize("pre_softmax", [False, True])
@pytest.mark.parametrize("topk", [2, 3])
def test_topk_and_switch_loss_are_megatrons(upstream, pre_softmax, topk):
    logits = torch.randn(37, 8, generator=torch.Generator().manual_seed(topk + 10 * pre_softmax))
    theirs = upstream.topk_softmax_with_capacity(logits, topk, use_pre_softmax=pre_softmax)
    ours = R.topk_with_capacity(logits, topk, pre_softmax=pre_softmax)
    assert torch.equal(ours[1], theirs[1]) and torch.allclose(ours[0], theirs[0], atol=0, rtol=0)
    assert torch.equal(ours[2], theirs[2])
    scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
    a = upstream.switch_load_balancing_loss_func(scores, theirs[2], topk, 0.01)
    b = R.switch_load_balancing_loss(scores, ours[2], topk, 0.01)
    assert float(a) == pytest.approx(float(b), rel=1e-6)


@pytest.mark.parametrize("pad", [False, True])
def test_capacity_dropping_by_probability_is_megatrons(upstream, pad):
    logits = torch.randn(40, 4, generator=torch.Generator().manual_seed(3 + pad))
    kw = dict(capacity_factor=0.75, pad_to_capacity=pad, drop_policy="probs")
    theirs = upstream.topk_softmax_with_capacity(logits, 2, **kw)
    ours = R.topk_with_capacity(logits, 2, **kw)
    if pad:  # [experts, capacity]: the same set of tokens per expert (topk's order within is unsorted)
        for e in range(4):
            assert sorted(ours[1][e].tolist()) == sorted(theirs[1][e].tolist())
    else:
        assert torch.equal(ours[1], theirs[1]) and torch.equal(ours[0], theirs[0])


def test_z_loss_is_megatrons(upstream):
    logits = torch.randn(9, 5, generator=torch.Generator().manual_seed(5))
    assert float(R.z_loss(logits, 1e-3)) == pytest.approx(float(upstream.z_loss_func(logits, 1e-3)), rel=1e-6)
