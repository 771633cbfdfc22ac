"""One training iteration's mechanics: forward/backward over micro-batches (plain or pipelined), the DP
gradient all-reduce, the global gradient norm and clipping, the fp16 loss scaler and the AdamW optimizer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ascendfactory.engine.train.model import StageModel, local_tensor


def build_optimizer(model: StageModel, args: Any, device: torch.device) -> torch.optim.Optimizer:
    """AdamW over the trained parameters (all, or the LoRA adapters); no weight decay on biases and 1-D
    (norm) weights (Megatron's param groups).

    DTensor and plain parameters go in separate groups so each group can use the fused kernel (CPU, CUDA).
    """
    groups: dict[tuple[bool, bool], list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        no_decay = name.endswith(".bias") or p.ndim == 1
        groups.setdefault((no_decay, hasattr(p, "to_local")), []).append(p)
    param_groups = [
        {"params": ps, "weight_decay": 0.0 if no_decay else args.weight_decay}
        for (no_decay, _), ps in sorted(groups.items())
    ]
    return adamw(param_groups, args, device)


def adamw(param_groups: list[dict[str, Any]], args: Any, device: torch.device) -> torch.optim.Optimizer:
    """Adam with decoupled weight decay over `param_groups`, as Megatron's: betas and eps from the flags;
    the learning rate is set by the scheduler every step (0 until then). Fused where torch has the kernel."""
    return torch.optim.AdamW(
        param_groups,
        lr=0.0,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_eps,
        fused=True if device.type in ("cpu", "cuda") else None,
    )


@dataclass
class LossScaler:
    """Megatron's DynamicGradScaler (fp16), or a constant 1.0 (bf16 / fp32)."""

    scale: float = 1.0
    dynamic: bool = False
    min_scale: float = 1.0
    window: int = 1000
    hysteresis: int = 2
    _growth: int = 0
    _hysteresis_left: int = 2

    @classmethod
    def from_args(cls, args: Any) -> LossScaler:
        if not args.fp16:
            return cls()
        if args.loss_scale:
            return cls(scale=args.loss_scale)
        return cls(
            scale=args.initial_loss_scale,
            dynamic=True,
            min_scale=args.min_loss_scale,
            window=args.loss_scale_window,
        )

    def update(self, found_inf: bool) -> None:
        if not self.dynamic:
            return
        if found_inf:
            self._growth = 0
            self._hysteresis_left -= 1
            if self._hysteresis_left <= 0:
                self.scale = max(self.scale / 2.0, self.min_scale)
        else:
            self._growth += 1
            if self._growth == self.window:
                self._growth, self._hysteresis_left = 0, self.hysteresis
                self.scale *= 2.0

    def state_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "growth_tracker": self._growth,
            "hysteresis_tracker": self._hysteresis_left,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scale, self._growth = float(state["scale"]), int(state["growth_tracker"])
        self._hysteresis_left = int(state["hysteresis_tracker"])


class StepRunner:
    """forward_backward -> (mean micro-batch loss on the last stage, else None)."""

    def __init__(
        self,
        model: StageModel,
        *,
        mesh: Any,
        num_microbatches: int,
        device: torch.device,
        pp: int,
        pp_rank: int,
        schedule: str = "1F1B",
        chunk_spans: list[tuple[int, int]] | None = None,
    ):
        """`chunk_spans`: (first layer, count) of this rank's model chunks with a virtual pipeline: Megatron's
        interleaved 1F1B (ScheduleInterleaved1F1B), chunk c being pipeline stage c * PP + pp_rank."""
        self.model, self.mesh, self.device, self.n = model, mesh, device, num_microbatches
        self.pp, self.pp_rank = pp, pp_rank
        self.scale = 1.0
        self.pipeline = None
        if pp > 1:
            from torch.distributed.pipelining import (
                PipelineStage,
                Schedule1F1B,
                ScheduleGPipe,
                ScheduleInterleaved1F1B,
            )

            group = mesh["pp"].get_group()
            if chunk_spans and len(chunk_spans) > 1:
                vpp = len(chunk_spans)
                stages = [
                    PipelineStage(chunk, c * pp + pp_rank, pp * vpp, device, group=group)
                    for c, chunk in enumerate(model.chunks(chunk_spans))
                ]
                self.pipeline = ScheduleInterleaved1F1B(
                    stages, n_microbatches=num_microbatches, loss_fn=self._scaled_loss
                )
            else:
                stage = PipelineStage(model, pp_rank, pp, device, group=group)
                cls = ScheduleGPipe if schedule.lower() == "gpipe" else Schedule1F1B
                self.pipeline = cls(stage, n_microbatches=num_microbatches, loss_fn=self._scaled_loss)

    def _scaled_loss(self, output: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model.loss(output, labels) * self.scale

    def forward_backward(
        self, tokens: torch.Tensor, labels: torch.Tensor, packings: list[Any] | None = None
    ) -> torch.Tensor | None:
        """`packings`: each micro-batch's packed layout (`packed.Packing`), or None for plain rows."""
        moe = getattr(self.model, "moe_context", None)
        if moe is not None:  # Megatron's MoEAuxLossAutoScaler scale: the loss scale over the micro-batches
            # (torch's pipeline schedule divides every gradient by the micro-batch count itself)
            moe.backward_scale = self.scale if self.pipeline is not None else self.scale / self.n
        if self.pipeline is not None:
            self.model.set_packing(packings or [])
            losses: list[torch.Tensor] = []
            if self.pp_rank == 0:
                self.pipeline.step(tokens)
            elif self.pp_rank == self.pp - 1:
                # return_outputs=False: torch's schedule would otherwise keep every micro-batch's logits
                # on the last stage until the step ends (Megatron keeps one micro-batch's)
                self.pipeline.step(target=labels, losses=losses, return_outputs=False)
            else:
                self.pipeline.step()
            return torch.stack([x.detach() for x in losses]).mean() / self.scale if losses else None
        factor = self.scale / self.n
        if self.n == 1:  # no accumulator: the mean of one micro-batch is its loss
            self.model.set_packing(packings or [])
            loss = self.model.loss(self.model(tokens), labels)
            (loss if factor == 1.0 else loss * factor).backward()
            return loss.detach()
        total = torch.zeros((), device=self.device)
        for m, (x, y) in enumerate(zip(tokens.chunk(self.n), labels.chunk(self.n))):
            self.model.set_packing([packings[m]] if packings else [])
            loss = self.model.loss(self.model(x), y)
            (loss if factor == 1.0 else loss * factor).backward()  # x * 1.0 is x: skip the no-op multiply
            total += loss.detach()
        return total / self.n

    def forward_only(
        self, tokens: torch.Tensor, labels: torch.Tensor, packings: list[Any] | None = None
    ) -> torch.Tensor | None:
        """Evaluation: the mean micro-batch loss without a backward (last stage; None elsewhere)."""
        if self.pipeline is not None:
            self.model.set_packing(packings or [])
            losses: list[torch.Tensor] = []
            if self.pp_rank == 0:
                self.pipeline.eval(tokens)
            elif self.pp_rank == self.pp - 1:
                self.pipeline.eval(target=labels, losses=losses)
            else:
                self.pipeline.eval()
            return torch.stack([x.detach() for x in losses]).mean() / self.scale if losses else None
        total = torch.zeros((), device=self.device)
        for m, (x, y) in enumerate(zip(tokens.chunk(self.n), labels.chunk(self.n))):
            self.model.set_packing([packings[m]] if packings else [])
            total += self.model.loss(self.model(x), y).detach()
        return total / self.n


def all_reduce_grads(
    params: list[torch.nn.Parameter], group: Any, dp: int, *, divisor: int | None = None
) -> None:
    """Sum gradients over `group` (`dp` ranks) and divide by `divisor` (default `dp`): the data-parallel
    average, one flat buffer. Expert parameters are summed over their data-modulo-expert group and divided
    by the whole data-parallel size (Megatron's expert_gradient_scaling_factor)."""
    divisor = dp if divisor is None else divisor
    if dp == 1 and divisor == 1 or not params:
        return
    grads = [local_tensor(p.grad) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    if dp > 1:
        dist.all_reduce(flat, group=group)
    flat /= divisor
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def settle_partial_grads(params: list[torch.nn.Parameter]) -> None:
    """Gradients that are partial sums over TP (a DTensor `Partial` placement: the MoE router, which every
    TP rank runs on the same gathered tokens) all-reduced to their parameter's placement."""
    for p in params:
        grad = p.grad
        if hasattr(grad, "placements") and any(pl.is_partial() for pl in grad.placements):
            p.grad = grad.redistribute(grad.device_mesh, p.placements)


def all_reduce_tied_grads(param: torch.nn.Parameter, group: Any) -> None:
    """Sum the gradients of a tied model's embedding (first stage) and its last-stage output copy.

    Megatron's `_allreduce_word_embedding_grads` (core_r0.8.0 `distributed/finalize_model_grads.py`): after
    the data-parallel reduction, all-reduce over the embedding group (the first and last pipeline stage of
    each (dp, tp) position), so both copies get the same update and stay equal. Under TP the embedding's
    gradient comes back replicated over the vocabulary while its weight is vocab-sharded; it is reduced to
    this rank's rows first (`redistribute` to the weight's placement: a local slice), which is what the
    output copy's gradient holds."""
    grad = param.grad
    if grad is None:
        return
    if hasattr(grad, "placements") and tuple(grad.placements) != tuple(param.placements):
        grad = param.grad = grad.redistribute(param.device_mesh, param.placements)
    dist.all_reduce(local_tensor(grad), group=group)


def shard_mask(grads: list[torch.Tensor]) -> list[bool]:
    """Per gradient: a DTensor sharded over TP (its squared norm is summed over the TP group)?

    From the gradients, not the parameters: the TP embedding's gradient is Replicate while its weight is
    Shard(0). The placements are the same every step, so a caller may compute this once."""
    return [hasattr(g, "placements") and any(pl.is_shard() for pl in g.placements) for g in grads]


def grad_norm_and_clip(
    params: list[torch.nn.Parameter],
    *,
    mesh: Any,
    clip: float,
    unscale: float = 1.0,
    sharded: list[bool] | None = None,
    counted: list[bool] | None = None,
    expert: list[bool] | None = None,
    ep_group: Any = None,
) -> tuple[float, bool]:
    """Unscale, then the global L2 norm over TP shards and PP stages (DP grads are equal); clip in place.

    `sharded` is `shard_mask` of the gradients, which the caller may compute once. `counted`: which
    gradients enter the norm (default all); every one is clipped. Megatron leaves out parameters marked
    `shared` (the last-stage copy of tied embeddings), so a tied weight counts once.
    Returns (norm before clipping, found inf/nan)."""
    sharded = shard_mask([p.grad for p in params]) if sharded is None else sharded
    grads = [local_tensor(p.grad) for p in params]
    return norm_and_clip(
        grads,
        mesh=mesh,
        clip=clip,
        unscale=unscale,
        sharded=sharded,
        counted=counted,
        expert=expert,
        ep_group=ep_group,
    )


def norm_and_clip(
    grads: list[torch.Tensor],
    *,
    mesh: Any,
    clip: float,
    unscale: float,
    sharded: list[bool],
    counted: list[bool] | None,
    dp_group: Any = None,
    expert: list[bool] | None = None,
    ep_group: Any = None,
) -> tuple[float, bool]:
    """`grad_norm_and_clip` on local gradient tensors. `dp_group`: the gradients are this rank's part of a
    data-parallel partition (the distributed optimizer's), so the squared sums are added over DP first.
    `expert`/`ep_group`: which gradients are this rank's routed experts, whose squares are summed over the
    expert-parallel group (Megatron's MoE optimizer takes its norm over TP x PP x EP)."""
    if unscale != 1.0:
        torch._foreach_div_(grads, unscale)
    device = grads[0].device if grads else torch.device("cpu")
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    if grads:
        squares = torch.stack(torch._foreach_norm(grads)).to(dtype).pow(2)
    else:
        squares = torch.zeros(0, dtype=dtype, device=device)
    if counted is not None and not all(counted):
        squares = squares * torch.tensor(counted, dtype=dtype, device=squares.device)
    expert_sum, experts_sharded = None, False
    if ep_group is not None and expert is not None and any(expert):
        is_expert = torch.tensor(expert, dtype=torch.bool, device=squares.device)
        expert_sum = squares[is_expert].sum()
        dist.all_reduce(expert_sum, group=ep_group)
        squares = squares.masked_fill(is_expert, 0.0)
        experts_sharded = any(s for s, e in zip(sharded, expert) if e)
    if dp_group is not None:
        if expert_sum is not None:
            raise NotImplementedError(
                "the distributed optimizer with expert parallelism"
            )  # [sharded part, replicated part], each summed over the DP partition
        is_shard = torch.tensor(sharded, dtype=torch.bool, device=squares.device)
        parts = torch.stack([squares[is_shard].sum(), squares[~is_shard].sum()])
        dist.all_reduce(parts, group=dp_group)
        shard_sum, replicated = parts[0], parts[1]
        if mesh["tp"].size() > 1:
            dist.all_reduce(shard_sum, group=mesh["tp"].get_group())
        total = shard_sum + replicated
    elif any(sharded):
        is_shard = torch.tensor(sharded, device=squares.device)
        shard_sum, replicated = squares[is_shard].sum(), squares[~is_shard].sum()
        if expert_sum is not None:  # experts: TP slices (summed over TP below) or whole
            shard_sum, replicated = (
                (shard_sum + expert_sum, replicated)
                if experts_sharded
                else (shard_sum, replicated + expert_sum)
            )
        if mesh["tp"].size() > 1:
            dist.all_reduce(shard_sum, group=mesh["tp"].get_group())
        total = shard_sum + replicated
    else:  # the same sum as 0 + replicated part, without masking
        total = squares.sum() if expert_sum is None else squares.sum() + expert_sum
    if mesh["pp"].size() > 1:
        dist.all_reduce(total, group=mesh["pp"].get_group())
    norm = float(total.sqrt())
    found_inf = not math.isfinite(norm)
    if clip > 0 and not found_inf and grads:
        coeff = clip / (norm + 1e-6)
        if coeff < 1.0:
            # As a 0-dim tensor in the kernels' math type (float32 for float32/bf16/fp16 gradients, to which
            # they round a Python float too): the same products, without a scalar tensor per gradient.
            math_dtype = torch.float64 if grads[0].dtype == torch.float64 else torch.float32
            torch._foreach_mul_(grads, torch.tensor(coeff, dtype=math_dtype, device=grads[0].device))
    return norm, found_inf
