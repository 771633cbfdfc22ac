"""GRPO's arithmetic, as pure tensor functions with MindSpeed-RL's semantics (my own code).

- `group_norm_advantages`: per prompt group of `n` samples, (score - mean) / (unbiased std + 1e-6), in
  float64, broadcast over each response's tokens (`adv_estimator: group_norm`).
- `kl_penalty`: `kl` (log p - log p_ref), `abs`, `mse` (half squared difference) or `low_var_kl`
  (Schulman's k3 estimator, clamped like MindSpeed-RL's `compute_kl_penalty`).
- `grpo_loss`: the clipped surrogate, averaged over the response tokens of a micro-batch, plus the KL term
  times the KL coefficient, minus the entropy bonus; the statistics MindSpeed-RL logs with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ascendfactory.engine.rl.subset import KL_PENALTIES


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def group_norm_advantages(scores: torch.Tensor, n: int) -> torch.Tensor:
    """[B] sequence scores, B a multiple of `n` (groups contiguous) -> [B] normalised advantages (float32)."""
    s = scores.to(torch.float64).reshape(-1, n)
    std = s.std(dim=1, keepdim=True) if n > 1 else torch.zeros_like(s[:, :1])
    adv = (s - s.mean(dim=1, keepdim=True)) / (std + 1e-6)
    return adv.reshape(-1).to(torch.float32)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "kl":
        return logprob - ref_logprob
    if kind == "abs":
        return (logprob - ref_logprob).abs()
    if kind == "mse":
        return 0.5 * (logprob - ref_logprob).square()
    if kind == "low_var_kl":
        kl = (ref_logprob - logprob).clamp(min=-20, max=20)
        return (torch.exp(kl) - kl - 1).clamp(min=-10, max=10)
    raise ValueError(f"unknown kl_penalty '{kind}' (known: {', '.join(KL_PENALTIES)})")


def token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[tokens] in float32; logits [..., V], tokens [...]."""
    logits = logits.float()
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


@dataclass(frozen=True)
class LossStats:
    pg_loss: float  # |clipped surrogate| as MindSpeed-RL logs it
    pg_clipfrac: float
    ppo_kl: float
    kl_loss: float
    entropy: float


def grpo_loss(
    *,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor | None,
    ref_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    clip_ratio: float,
    kl_coef: float,
    kl_kind: str,
    entropy_coeff: float,
) -> tuple[torch.Tensor, LossStats]:
    """One micro-batch's GRPO loss; every tensor [B, R] over response tokens (mask 1 on real tokens).

    `old_log_prob` None: the first (and only) update on this rollout, where the old policy is the current
    one (MindSpeed-RL skips its old-log-prob pass then)."""
    old = log_prob.detach() if old_log_prob is None else old_log_prob
    neg_kl = log_prob - old
    ratio = torch.exp(neg_kl)
    surrogate = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio)
    pg = masked_mean(torch.maximum(surrogate, clipped), mask)
    kl = masked_mean(kl_penalty(log_prob, ref_log_prob, kl_kind), mask)
    ent = masked_mean(entropy, mask)
    loss = pg + kl * kl_coef - entropy_coeff * ent
    with torch.no_grad():
        stats = LossStats(
            pg_loss=abs(float(pg)),
            pg_clipfrac=float(masked_mean((clipped > surrogate).float(), mask)),
            ppo_kl=float(masked_mean(-neg_kl, mask)),
            kl_loss=float(kl),
            entropy=float(ent),
        )
    return loss, stats
