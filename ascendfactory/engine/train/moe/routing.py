"""Top-k routing and the router's auxiliary losses, as MindSpeed-LLM 2.1.0 runs Megatron's TopKRouter.

- `topk_with_capacity`: MindSpeed-LLM's `topk_softmax_with_capacity` (`core/transformer/moe/moe_utils.py`,
  which replaces Megatron core_r0.8.0's): softmax after the top-k of the logits (Megatron's default) or
  before it (`--moe-router-pre-softmax`), or sigmoid scores renormalised over the top-k; optional
  group-limited selection and scaling; with `--moe-expert-capacity-factor` each expert keeps at most
  ceil(tokens x k / experts x factor) tokens, chosen by probability or position, the others dropped
  (index set past the last expert, probability 0) or, with `--moe-pad-expert-input-to-capacity`, every
  expert gets exactly that many token slots ([experts, capacity] indices and probabilities).
- `route`: Megatron's `TopKRouter.routing` as MindSpeed-LLM patches it (`core/transformer/moe/router.py`
  `topk_router_routing`): `aux_loss` (the Switch load-balancing loss on the softmax of every logit, then
  `--norm-topk-prob` renormalisation), `none` (MindSpeed-LLM's options, plus the sequence-level loss of
  `--seq-aux`), `softmax_topk` (softmax, then top-k, no loss); the z-loss (`--moe-z-loss-coeff`) on the
  logits first.
- The losses: `switch_load_balancing_loss` (Megatron's `switch_load_balancing_loss_func`),
  `seq_aux_loss` (MindSpeed-LLM's `apply_seq_aux_loss`, per sequence), `z_loss` (MindSpeed-LLM's
  `z_loss_func`: logsumexp in fp32).

Tokens are batch-first here ([batch x sequence] rows); `seq_aux_loss` reshapes them per sequence.
MindSpeed-LLM's reshape of its sequence-first tokens to [micro-batch, sequence] mixes the sequences of a
micro-batch larger than one; this computes DeepSeek's per-sequence loss in every case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ascendfactory.engine.train.moe.spec import MoESpec

DROPPED = torch.iinfo(torch.long).max  # the index of a dropped token slot (sorted after every expert)


@dataclass
class Routing:
    """The router's decision for N tokens. Without padding `probs`/`indices` are [N, k] (a dropped slot:
    index DROPPED, probability 0); with `--moe-pad-expert-input-to-capacity` they are [experts, capacity]
    (the tokens each expert takes). `losses`: (name, loss already multiplied by its coefficient,
    coefficient) to attach to the backward and log."""

    probs: torch.Tensor
    indices: torch.Tensor
    tokens_per_expert: torch.Tensor
    padded: bool = False
    losses: list[tuple[str, torch.Tensor, float]] = field(default_factory=list)


def capacity(num_tokens: int, num_experts: int, factor: float) -> int:
    """Megatron's `get_capacity`: ceil(tokens / experts x factor) (tokens counted once per top-k slot)."""
    return math.ceil(num_tokens / num_experts * factor)


def group_limited_topk(
    scores: torch.Tensor, topk: int, num_groups: int, group_topk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k among the experts of each token's `group_topk` best groups (a group's score: the sum of its
    two best experts' scores), MindSpeed-LLM's `group_limited_topk`."""
    n, e = scores.shape
    group_scores = scores.view(n, num_groups, -1).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=group_topk, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(n, num_groups, e // num_groups).reshape(n, -1)
    masked = scores.masked_fill(~score_mask.bool(), float("-inf"))
    return torch.topk(masked, k=topk, dim=-1)


def topk_with_capacity(
    logits: torch.Tensor,
    topk: int,
    *,
    capacity_factor: float | None = None,
    pad_to_capacity: bool = False,
    drop_policy: str = "probs",
    pre_softmax: bool = False,
    num_groups: int | None = None,
    group_topk: int | None = None,
    scaling_factor: float | None = None,
    score_function: str = "softmax",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(probs, indices, tokens per expert) for logits [N, E]; see the module docstring for the shapes."""
    n, e = logits.shape

    def select(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if group_topk:
            return group_limited_topk(scores, topk, num_groups or 1, group_topk)
        return torch.topk(scores, k=topk, dim=1)

    if score_function == "softmax":
        if pre_softmax:
            scores = torch.softmax(logits, dim=-1, dtype=torch.float32).type_as(logits)
            probs, top = select(scores)
        else:
            top_logits, top = select(logits)
            probs = torch.softmax(top_logits, dim=-1, dtype=torch.float32).type_as(logits)
    else:  # sigmoid, renormalised over the top-k
        top_scores, top = select(torch.sigmoid(logits))
        probs = top_scores / (top_scores.sum(dim=-1, keepdim=True) + 1e-20) if topk > 1 else top_scores
    if scaling_factor:
        probs = probs * scaling_factor
    if capacity_factor is None:
        return probs, top, torch.bincount(top.reshape(-1), minlength=e)
    cap = capacity(n * topk, e, capacity_factor)
    gates = torch.zeros_like(logits).scatter(1, top, probs)  # [N, E]: each token's kept probabilities
    chosen = torch.zeros_like(logits).scatter(1, top, 1)
    if drop_policy == "probs":
        cap_probs, cap_idx = torch.topk(gates, k=min(cap, n), dim=0, sorted=False)
    else:  # position: each expert keeps the first `cap` tokens that chose it (Megatron's help text; its
        # topk over a 0/1 mask leaves the choice among the ties to the device's topk kernel)
        rank_in_expert = torch.where(chosen > 0, chosen.cumsum(dim=0), torch.full_like(chosen, n + 1))
        cap_idx = torch.topk(-rank_in_expert, k=min(cap, n), dim=0, sorted=False)[1]
        cap_probs = torch.gather(gates, 0, cap_idx)
    kept_slots = torch.zeros_like(logits).scatter(0, cap_idx, 1)
    if pad_to_capacity:
        return cap_probs.T.contiguous(), cap_idx.T.contiguous(), chosen.sum(dim=0)
    kept = torch.logical_and(chosen, kept_slots)
    dropped = torch.gather(torch.logical_not(kept), 1, top)
    probs = probs * torch.logical_not(dropped)
    indices = top.clone().masked_fill_(dropped, DROPPED)
    return probs, indices, kept.sum(dim=0)


def switch_load_balancing_loss(
    scores: torch.Tensor, tokens_per_expert: torch.Tensor, topk: int, coeff: float
) -> torch.Tensor:
    """Megatron's `switch_load_balancing_loss_func`: sum_e (P_e / N) (f_e / (N k)) x E x coeff, P_e the
    summed softmax probability of expert e over the N tokens, f_e its token count."""
    n, e = scores.shape
    return torch.sum(scores.sum(dim=0) * tokens_per_expert) * (e * coeff / (n * n * topk))


def seq_aux_loss(
    logits: torch.Tensor, indices: torch.Tensor, *, batch: int, topk: int, coeff: float, score_function: str
) -> torch.Tensor:
    """DeepSeek's sequence-wise balance loss (MindSpeed-LLM `apply_seq_aux_loss`): per sequence,
    sum_e P_e f_e with P_e the mean score of expert e over its tokens and f_e = count_e / (s k / E); the
    mean over sequences, times coeff."""
    n, e = logits.shape
    seq = n // batch
    if score_function == "softmax":
        scores = torch.softmax(logits, dim=-1)
    else:
        scores = torch.sigmoid(logits)
        scores = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)
    counts = torch.zeros(batch, e, dtype=scores.dtype, device=scores.device)
    per_seq = indices.view(batch, -1)
    kept = per_seq < e  # a dropped slot (capacity) counts for no expert, as in MindSpeed-LLM's histc
    counts.scatter_add_(1, per_seq.clamp(max=e - 1), kept.to(scores.dtype))
    fi = counts / (seq * topk / e)
    pi = scores.view(batch, seq, e).mean(dim=1)
    return (pi * fi).sum(dim=1).mean() * coeff


def z_loss(logits: torch.Tensor, coeff: float) -> torch.Tensor:
    """ST-MoE's router z-loss: mean over tokens of logsumexp(logits)^2, times coeff (logsumexp in fp32)."""
    return torch.mean(torch.square(torch.logsumexp(logits.float(), dim=-1).to(logits.dtype))) * coeff


def route(logits: torch.Tensor, spec: MoESpec, *, batch: int, training: bool) -> Routing:
    """The routing of N tokens' logits [N, E] (`batch` sequences of N / batch tokens)."""
    losses: list[tuple[str, torch.Tensor, float]] = []
    tp = spec.tp
    if spec.z_loss_coeff is not None and training:
        coeff = spec.z_loss_coeff / tp
        losses.append(("z_loss", z_loss(logits, coeff), coeff))
    common = dict(
        capacity_factor=spec.capacity_factor,
        pad_to_capacity=spec.pad_to_capacity,
        drop_policy=spec.drop_policy,
        pre_softmax=spec.pre_softmax,
    )
    coeff = spec.effective_aux_coeff
    if spec.load_balancing == "aux_loss":
        probs, indices, counts = topk_with_capacity(logits, spec.topk, **common)
        if training and coeff:
            scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
            aux = switch_load_balancing_loss(scores, counts, spec.topk, coeff)
            losses.append(("load_balancing_loss", aux, coeff))
        if spec.norm_topk_prob:
            probs = probs / probs.sum(dim=-1, keepdim=True)
    elif spec.load_balancing == "none":
        probs, indices, counts = topk_with_capacity(
            logits,
            spec.topk,
            **common,
            num_groups=spec.num_groups or spec.ep,  # MindSpeed-LLM's default: the expert-parallel size
            group_topk=spec.group_topk,
            scaling_factor=spec.scaling_factor,
            score_function=spec.score_function,
        )
        if training and spec.seq_aux and coeff:
            aux = seq_aux_loss(
                logits, indices, batch=batch, topk=spec.topk, coeff=coeff, score_function=spec.score_function
            )
            losses.append(("load_balancing_loss", aux, coeff))
    else:  # softmax_topk
        scores = torch.softmax(logits, dim=-1, dtype=torch.float32).type_as(logits)
        probs, indices = torch.topk(scores, k=spec.topk, dim=1)
        counts = torch.bincount(indices.reshape(-1), minlength=logits.shape[1])
    padded = (
        spec.pad_to_capacity and spec.capacity_factor is not None and spec.load_balancing != "softmax_topk"
    )
    return Routing(probs, indices, counts, padded=padded, losses=losses)
