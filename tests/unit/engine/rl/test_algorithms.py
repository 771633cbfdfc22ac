"""GRPO arithmetic: group-normalised advantages, KL estimators, the clipped loss and its statistics."""

from __future__ import annotations

import math

import pytest
import torch

from ascendfactory.engine.rl import algorithms as A


def test_group_norm_is_per_group_with_the_unbiased_std():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = A.group_norm_advantages(scores, 4)
    g = scores[:4]
    expected = (g - g.mean()) / (g.std(unbiased=True) + 1e-6)
    assert torch.allclose(adv[:4], expected)
    assert torch.all(adv[4:] == 0)  # a group where every sample scored the same teaches nothing
    assert adv.dtype == torch.float32


def test_kl_estimators():
    lp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    assert torch.allclose(A.kl_penalty(lp, ref, "kl"), lp - ref)
    assert torch.allclose(A.kl_penalty(lp, ref, "abs"), (lp - ref).abs())
    assert torch.allclose(A.kl_penalty(lp, ref, "mse"), 0.5 * (lp - ref) ** 2)
    k3 = A.kl_penalty(lp, ref, "low_var_kl")
    d = ref - lp
    assert torch.allclose(k3, torch.exp(d) - d - 1) and bool((k3 >= 0).all())
    assert A.kl_penalty(lp, lp, "low_var_kl").abs().max() == 0
    with pytest.raises(ValueError, match="full"):
        A.kl_penalty(lp, ref, "full")


def test_loss_at_ratio_one_is_minus_the_mean_advantage_and_clipping_counts():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]]) * mask
    lp = torch.log(torch.full((2, 3), 0.5)).requires_grad_()
    loss, stats = A.grpo_loss(
        log_prob=lp,
        old_log_prob=None,
        ref_log_prob=lp.detach(),
        advantages=adv,
        mask=mask,
        entropy=torch.zeros(2, 3),
        clip_ratio=0.2,
        kl_coef=0.1,
        kl_kind="low_var_kl",
        entropy_coeff=0.0,
    )
    assert float(loss.detach()) == pytest.approx(-(1 + 1 - 2) / 3)
    assert stats.pg_clipfrac == 0 and stats.kl_loss == 0 and stats.ppo_kl == 0
    loss.backward()
    assert lp.grad[0, 2] == 0 and lp.grad[1, 1] == 0  # padding gets no gradient
    # a ratio of e^0.5 with a positive advantage is clipped at 1.2
    old = lp.detach() - 0.5
    _, stats = A.grpo_loss(
        log_prob=lp.detach(),
        old_log_prob=old,
        ref_log_prob=lp.detach(),
        advantages=mask,
        mask=mask,
        entropy=torch.zeros(2, 3),
        clip_ratio=0.2,
        kl_coef=0.0,
        kl_kind="kl",
        entropy_coeff=0.0,
    )
    assert stats.pg_clipfrac == 1.0 and stats.pg_loss == pytest.approx(1.2)
    assert stats.ppo_kl == pytest.approx(-0.5)


def test_token_log_probs_and_entropy():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    assert float(A.token_log_probs(logits, torch.tensor([[1]]))) == pytest.approx(math.log(0.75))
    h = float(A.entropy_from_logits(logits))
    assert h == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
