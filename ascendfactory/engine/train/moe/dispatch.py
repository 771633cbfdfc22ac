"""Token dispatch to the experts and back: Megatron core_r0.8.0's `MoEAlltoAllTokenDispatcher`
(`transformer/moe/token_dispatcher.py`) with its `permute` / `unpermute` (`moe_utils.py`).

1. Permutation 1: the N x k (token, expert) slots sorted by expert (stable, so each expert sees its tokens
   in order); dropped slots (capacity) sort last and are cut off.
2. Expert parallelism: each rank sends the slots of the experts rank j holds to rank j (`all_to_all_single`
   with uneven splits, gloo on CPU, NCCL / HCCL on devices); the token counts per expert are all-gathered
   first so every rank knows what it receives.
3. Permutation 2: the received slots (ordered by source rank, then expert) regrouped by local expert.
4. The experts run; then the same steps backwards, and each token's outputs are summed weighted by its
   routing probabilities (`unpermute` with probs).

With `--moe-pad-expert-input-to-capacity` every expert takes exactly `capacity` slots per rank (the router's
[experts, capacity] token indices), so the splits are equal and the combine is a scatter-add.
Gradients flow through the all-to-alls (their backward is the reverse all-to-all).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from ascendfactory.engine.train.moe.routing import Routing

ExpertsFn = Callable[[torch.Tensor, list[int]], torch.Tensor]


class _AllToAll(torch.autograd.Function):
    """`all_to_all_single` whose backward is the all-to-all with the splits swapped."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, out_splits: list[int], in_splits: list[int]) -> Any:
        ctx.group, ctx.out_splits, ctx.in_splits = group, out_splits, in_splits
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        return _AllToAll.apply(grad, ctx.group, ctx.in_splits, ctx.out_splits), None, None, None


def all_to_all(x: torch.Tensor, group: Any, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
    """Rows `in_splits[j]` of `x` go to rank j; returns the rows received, `out_splits[j]` from rank j."""
    return _AllToAll.apply(x, group, out_splits, in_splits)


class TokenDispatcher:
    """Dispatch to and combine from the experts of an expert-parallel group (`ep` ranks, this one
    `ep_rank`, holding experts [ep_rank x E/ep, (ep_rank + 1) x E/ep))."""

    def __init__(self, num_experts: int, *, ep: int = 1, ep_rank: int = 0, group: Any = None):
        self.num_experts, self.ep, self.ep_rank, self.group = num_experts, ep, ep_rank, group
        self.num_local = num_experts // ep

    def run(self, tokens: torch.Tensor, routing: Routing, experts: ExpertsFn) -> torch.Tensor:
        """tokens [N, H] -> sum over each token's kept slots of prob x expert(token), [N, H]."""
        if routing.padded:
            return self._run_padded(tokens, routing, experts)
        probs, indices = routing.probs, routing.indices
        n, k = indices.shape
        flat = indices.reshape(-1)
        order = torch.argsort(flat, stable=True)
        kept = int((flat < self.num_experts).sum())
        if kept < flat.numel():  # dropped slots sort last (index DROPPED)
            order = order[:kept]
        x = tokens.index_select(0, order // k)
        counts = torch.bincount(flat.index_select(0, order), minlength=self.num_experts)
        regroup = None
        if self.ep > 1:
            everyone = self._gather_counts(counts)  # [ep, E]
            lo = self.ep_rank * self.num_local
            mine = everyone[:, lo : lo + self.num_local]  # [ep, E_local]: what each rank sends here
            in_splits = counts.view(self.ep, self.num_local).sum(dim=1).tolist()
            out_splits = mine.sum(dim=1).tolist()
            x = all_to_all(x, self.group, out_splits, in_splits)
            if self.num_local > 1:
                expert_of = torch.arange(self.num_local, device=x.device).repeat(self.ep)
                regroup = torch.argsort(expert_of.repeat_interleave(mine.reshape(-1)), stable=True)
                x = x.index_select(0, regroup)
            per_expert = mine.sum(dim=0).tolist()
        else:
            per_expert = counts.tolist()
        y = experts(x, per_expert)
        if self.ep > 1:
            if regroup is not None:
                y = torch.zeros_like(y).index_copy(0, regroup, y)
            y = all_to_all(y, self.group, in_splits, out_splits)
        slots = torch.zeros((n * k, y.shape[-1]), dtype=y.dtype, device=y.device).index_copy(0, order, y)
        out = (slots.view(n, k, -1) * probs.unsqueeze(-1)).sum(dim=1)
        return out.to(tokens.dtype)

    def _run_padded(self, tokens: torch.Tensor, routing: Routing, experts: ExpertsFn) -> torch.Tensor:
        probs, indices = routing.probs, routing.indices  # [E, capacity]
        cap, hidden = indices.shape[1], tokens.shape[-1]
        x = tokens.index_select(0, indices.reshape(-1))  # grouped by expert
        ep, local = self.ep, self.num_local
        if ep > 1:
            splits = [local * cap] * ep
            x = all_to_all(x, self.group, splits, splits)
            x = x.view(ep, local, cap, hidden).transpose(0, 1).reshape(-1, hidden)
        y = experts(x, [ep * cap] * local)
        if ep > 1:
            y = y.view(local, ep, cap, hidden).transpose(0, 1).reshape(-1, hidden)
            y = all_to_all(y, self.group, splits, splits)
        weighted = probs.reshape(-1, 1).to(y.dtype) * y
        out = torch.zeros((tokens.shape[0], hidden), dtype=y.dtype, device=y.device)
        out = out.scatter_add(0, indices.reshape(-1, 1).expand(-1, hidden), weighted)
        return out.to(tokens.dtype)

    def _gather_counts(self, counts: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(counts) for _ in range(self.ep)]
        dist.all_gather(parts, counts.contiguous(), group=self.group)
        return torch.stack(parts)
