"""The output layer and its cross-entropy in chunks of tokens, never holding the full-vocabulary logits.

`linear_cross_entropy(hidden, weight, labels)` is `F.cross_entropy((hidden @ weight.T).float(), labels,
ignore_index=-100)` (the token mean of one micro-batch, `model.loss_fn`) computed `chunk` tokens at a time:
each chunk's logits are made, turned into its losses and, when gradients are wanted, at once into its
gradients with respect to the hidden states and the weight (softmax minus one-hot, over the token count),
and dropped. The backward only scales the gradients kept. The peak is one chunk's logits (16-bit, their
fp32 softmax and its 16-bit gradient) plus an fp32 gradient of the weight, instead of the logits of every
token and their fp32 log-softmax, its gradient and the logits' gradient (the full path: about 12 bytes per
token per vocabulary entry). The arithmetic is the full path's: 16-bit matmuls, fp32 softmax, the logits'
gradient rounded to the weights' dtype before its two matmuls; only the weight's gradient is summed over
chunks in fp32 (the full path sums inside one matmul).

Under tensor parallelism the weight is vocab-sharded (`lm_head` is ColwiseParallel) and the logits stay
sharded (Megatron's `vocab_parallel_cross_entropy`, core_r0.8.0 `tensor_parallel/cross_entropy.py`): the
maximum, the sum of exponentials and the target's logit are all-reduced over TP, each rank keeps the
softmax of its own vocabulary slice, and the hidden states' gradient (a partial sum over the slices) is
all-reduced over TP in the backward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

IGNORE_INDEX = -100
CHUNK_ELEMENTS = 1 << 27  # logits per chunk (tokens x local vocabulary): 256 MiB of bf16, 512 MiB of fp32


def chunk_tokens(vocab_local: int) -> int:
    """Tokens per chunk: CHUNK_ELEMENTS logits, at least 256 tokens (a wide enough matmul)."""
    return max(256, CHUNK_ELEMENTS // max(1, vocab_local))


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,  # [N, H]
        weight: torch.Tensor,  # [V_local, H]
        labels: torch.Tensor,  # [N]
        vocab_start: int,
        group: Any,
        chunk: int,
    ) -> torch.Tensor:
        n, v_local = hidden.shape[0], weight.shape[0]
        valid = labels != IGNORE_INDEX
        count = valid.sum().to(torch.float32)  # 0: the loss is 0 / 0 = NaN, as F.cross_entropy's
        local = labels - vocab_start
        here = valid & (local >= 0) & (local < v_local)  # this rank holds the target's logit
        local = torch.where(here, local, 0)
        wants_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        if not ctx.needs_input_grad[1]:
            grad_weight = None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        rows = torch.arange(min(chunk, n), device=hidden.device)
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            h = hidden[lo:hi]
            logits = (h @ weight.t()).float()  # the 16-bit matmul, its output in fp32 (Megatron's .float())
            target = logits[rows[: hi - lo], local[lo:hi]] * here[lo:hi]
            peak = logits.max(dim=1).values
            if group is not None:
                dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=group)
                dist.all_reduce(target, group=group)
            logits -= peak.unsqueeze(1)
            logits.exp_()  # exp(logit - max), in place
            sum_exp = logits.sum(dim=1)
            if group is not None:
                dist.all_reduce(sum_exp, group=group)
            lse = sum_exp.log() + peak
            total += ((lse - target) * valid[lo:hi]).sum()
            if not wants_grad:
                continue
            # d loss / d logits = (softmax - one_hot) * valid / count, rounded to the weights' dtype; a
            # micro-batch without labels gets zero gradients, as the full path's
            weight_per_token = valid[lo:hi] / count.clamp(min=1.0)
            logits *= (weight_per_token / sum_exp).unsqueeze(1)  # softmax x weight, one pass
            logits[rows[: hi - lo], local[lo:hi]] -= weight_per_token * here[lo:hi]
            grad_logits = logits.to(weight.dtype)
            del logits
            if grad_hidden is not None:
                torch.matmul(grad_logits, weight, out=grad_hidden[lo:hi])
            if grad_weight is not None:
                if weight.dtype == torch.float32:
                    grad_weight.addmm_(grad_logits.t(), h)
                else:
                    grad_weight += (grad_logits.t() @ h).float()
        if grad_hidden is not None and group is not None:
            dist.all_reduce(grad_hidden, group=group)  # the partial sums of every vocabulary slice
        ctx.save_for_backward(
            grad_hidden if grad_hidden is not None else torch.empty(0),
            grad_weight.to(weight.dtype) if grad_weight is not None else torch.empty(0),
        )
        return total / count

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_output.to(torch.float32)
        out_h = grad_hidden * scale.to(grad_hidden.dtype) if ctx.needs_input_grad[0] else None
        out_w = grad_weight * scale.to(grad_weight.dtype) if ctx.needs_input_grad[1] else None
        return out_h, out_w, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, *, chunk: int | None = None
) -> torch.Tensor:
    """Token-mean cross-entropy of `hidden @ weight.T` [.., V] against `labels` (-100 ignored).

    `hidden` [B, S, H] (a plain tensor, or a DTensor sharded along the sequence with sequence parallelism);
    `weight` [V, H] (plain, or a DTensor vocab-sharded over the TP mesh)."""
    group, vocab_start = None, 0
    if hasattr(weight, "to_local"):
        mesh = weight.device_mesh
        if mesh.size() > 1:
            group = mesh.get_group()
        local_weight = weight.to_local()
        vocab_start = mesh.get_local_rank() * local_weight.shape[0]
        weight = local_weight
    if hasattr(hidden, "to_local"):  # sequence parallel: the whole sequence (its gradient comes back whole)
        from torch.distributed.tensor import Replicate

        hidden = hidden.redistribute(hidden.device_mesh, [Replicate()]).to_local()
    flat = hidden.reshape(-1, hidden.shape[-1])
    return _LinearCrossEntropy.apply(
        flat, weight, labels.reshape(-1), vocab_start, group, chunk or chunk_tokens(weight.shape[0])
    )
