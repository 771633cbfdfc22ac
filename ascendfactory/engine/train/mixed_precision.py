"""`--bf16` / `--fp16` as Megatron runs them: 16-bit model weights, fp32 main gradients, fp32 master weights.

What Megatron core_r0.8.0 does (`megatron/core/transformer/module.py` Float16Module,
`distributed/param_and_grad_buffer.py`, `optimizer/optimizer.py` Float16OptimizerWithFloat16Params) and how
it is done here:
- The model's parameters are held in the run's dtype (`cast_params`): every matmul, norm and attention of
  the forward and backward runs in it, with no autocast and no per-step cast of the weights.
- Each parameter's gradient is added, as soon as autograd has accumulated it, into a contiguous fp32
  buffer (Megatron's `main_grad`; a post-accumulate-grad hook) and dropped, so micro-batches accumulate in
  fp32 and the data-parallel all-reduce sums fp32 (`accumulate_allreduce_grads_in_fp32`, which Megatron's
  validate_args turns on for bf16; fp16 accumulates in fp32 here too, where Megatron keeps fp16 main grads
  and an fp32 copy in the optimizer: the same 18 bytes per parameter).
- The optimizer (torch's fused AdamW) steps on fp32 master copies of the weights whose `.grad` are views of
  that buffer; the updated masters are copied (rounded) into the 16-bit weights.

Bytes per trained parameter: 2 (weights) + 4 (main gradients) + 4 + 8 (master weights, Adam moments) = 18,
Megatron's bf16 row; `--use-distributed-optimizer` shards the last 12 over DP (`distopt.py`).

Checkpoints do not change: the model shard holds the 16-bit weights, `optimizer["fp32_from_fp16_params"]`
the masters by HF parameter name, `optimizer["state"]` Adam's moments by name (`checkpoint.py`), as the
earlier autocast trainer wrote them (its fp32 weights were the masters).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ascendfactory.engine.train.model import local_tensor
from ascendfactory.engine.train.step import adamw

SIXTEEN_BIT = (torch.bfloat16, torch.float16)


def params_dtype(args: Any) -> torch.dtype:
    """The model's dtype from --bf16 / --fp16 (fp32 without either)."""
    return torch.bfloat16 if args.bf16 else torch.float16 if getattr(args, "fp16", False) else torch.float32


def cast_params(model: nn.Module, dtype: torch.dtype) -> None:
    """Hold every floating-point parameter in `dtype` (rounded; buffers such as RoPE's inverse frequencies
    stay fp32). A parameter shared by two modules (tied embeddings) stays shared; DTensor parameters keep
    their placements."""
    if dtype not in SIXTEEN_BIT:
        return
    done: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None or not p.is_floating_point() or p.dtype == dtype:
                continue
            if id(p) not in done:
                done[id(p)] = nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
            module._parameters[name] = done[id(p)]


def _no_decay(name: str, p: torch.Tensor) -> bool:
    """Megatron's param groups: no weight decay on biases and 1-D (norm) weights."""
    return name.endswith(".bias") or p.ndim == 1


class MixedPrecisionOptimizer:
    """AdamW over fp32 masters of 16-bit parameters, their gradients in one fp32 buffer (replicated over DP).

    The interface the trainer's step uses is the distributed optimizer's (`distopt.DistributedOptimizer`):
    `param_grad`, `reduce_grads`, `owned_grads`, `owned_masks`, `param_norms`, `named`, `views`; here every
    rank owns every parameter whole (`partitioned` False: the gradient norm is not summed over DP)."""

    partitioned = False

    def __init__(
        self,
        named_params: list[tuple[str, nn.Parameter]],
        *,
        args: Any,
        dp_group: Any,
        dp: int,
        device: torch.device,
    ):
        self.group, self.dp, self.device = dp_group, dp, device
        self.named = list(named_params)
        self.params = [p for _, p in self.named]
        self.model_locals = [local_tensor(p).detach() for p in self.params]
        self.offsets = [0]
        for t in self.model_locals:
            self.offsets.append(self.offsets[-1] + t.numel())
        self.numel = self.offsets[-1]
        # the fp32 masters (plain tensors shaped like each local shard) and their gradients, views of the
        # buffer, which is made at the first zero_grad (after a checkpoint load, like the distributed one)
        self.views = [t.float().clone() for t in self.model_locals]
        self.pieces = [(i, 0, t.numel()) for i, t in enumerate(self.model_locals)]
        self.grad_buffer = torch.zeros(0, dtype=torch.float32, device=device)
        self.divisor = 1  # the pipeline schedule's micro-batch count (its scale_grads sees no .grad)
        self.expert_mask: list[bool] | None = None  # `experts`
        self.expert_group: Any = None
        self.expert_dp = 1
        # torch AdamW's groups as `step.build_optimizer` makes them (weight-decay kind, DTensor or not), so a
        # checkpoint's param groups pair with these whichever optimizer wrote it
        groups: dict[tuple[bool, bool], list[torch.Tensor]] = {}
        for (name, p), master in zip(self.named, self.views):
            groups.setdefault((_no_decay(name, p), hasattr(p, "to_local")), []).append(master)
        self.optimizer = adamw(
            [
                {"params": ps, "weight_decay": 0.0 if no_decay else args.weight_decay}
                for (no_decay, _), ps in sorted(groups.items())
            ],
            args,
            device,
        )
        for p, a, b in zip(self.params, self.offsets, self.offsets[1:]):
            p.register_post_accumulate_grad_hook(self._hook(a, b))

    def _hook(self, a: int, b: int) -> Any:
        return add_to_buffer_hook(self, a, b)

    # ------------------------------------------------------------ the optimizer interface the loop uses
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.grad_buffer.numel() != self.numel:
            self.grad_buffer = torch.zeros(self.numel, dtype=torch.float32, device=self.device)
            for v, (a, b) in zip(self.views, zip(self.offsets, self.offsets[1:])):
                v.grad = self.grad_buffer[a:b].view_as(v)
        self.grad_buffer.zero_()
        for p in self.params:
            p.grad = None

    def param_grad(self, index: int) -> torch.Tensor:
        """The main gradient of parameter `index`, shaped like its local shard."""
        return self.views[index].grad

    def experts(self, mask: list[bool], group: Any, size: int) -> None:
        """Which parameters are this rank's routed experts (MoE with expert parallelism): their main
        gradients are summed over the data-modulo-expert `group` (`size` ranks) instead of DP, then divided
        by the whole DP size like the others (Megatron's expert_gradient_scaling_factor)."""
        self.expert_mask, self.expert_group, self.expert_dp = list(mask), group, size

    def reduce_grads(self) -> None:
        """The DP mean of the main gradients (one all-reduce of the fp32 buffer; routed experts over their
        own group), and the pipeline's 1 / micro-batches."""
        mask = self.expert_mask
        if mask is None or not any(mask):
            if self.dp > 1:
                dist.all_reduce(self.grad_buffer, group=self.group)
        else:
            spans = list(zip(self.offsets, self.offsets[1:]))
            for routed, group, size in (
                (False, self.group, self.dp),
                (True, self.expert_group, self.expert_dp),
            ):
                parts = [self.grad_buffer[a:b] for (a, b), e in zip(spans, mask) if e == routed]
                if size > 1 and parts:
                    flat = torch.cat(parts)
                    dist.all_reduce(flat, group=group)
                    torch._foreach_copy_(parts, list(flat.split([t.numel() for t in parts])))
        scale = self.dp * self.divisor
        if scale != 1:
            self.grad_buffer /= scale

    def owned_grads(self) -> list[torch.Tensor]:
        return [v.grad for v in self.views]

    def owned_masks(self, excluded: nn.Parameter | None) -> tuple[list[bool], list[bool]]:
        """Per parameter: a TP shard (its main gradient is in the parameter's placement)? counted in the
        gradient norm (not the last stage's copy of a tied embedding, `excluded`)?"""
        sharded = [
            hasattr(p, "placements") and any(pl.is_shard() for pl in p.placements) for p in self.params
        ]
        return sharded, [p is not excluded for p in self.params]

    def param_norms(self, tensors: list[torch.Tensor | None]) -> list[float]:
        """Per parameter (in `named` order): the norm of one tensor each (None counts as zero)."""
        return [0.0 if t is None else float(t.detach().float().norm()) for t in tensors]

    def step(self) -> None:
        """Adam on the fp32 masters, then the masters rounded into the model's 16-bit weights."""
        self.optimizer.step()
        self.copy_to_model()

    def copy_to_model(self) -> None:
        with torch.no_grad():
            torch._foreach_copy_(self.model_locals, self.views)

    def sync_from_model(self, params: list[nn.Parameter] | None = None) -> None:
        """Masters := the model's weights (all, or `params`): after weights were loaded or broadcast into
        the model without their fp32 masters."""
        wanted = None if params is None else {id(p) for p in params}
        with torch.no_grad():
            for p, t, v in zip(self.params, self.model_locals, self.views):
                if wanted is None or id(p) in wanted:
                    v.copy_(t)

    # ------------------------------------------------------------------------------ checkpoints
    def named_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """Adam's state by HF parameter name (local shard shapes), as torch AdamW over the weights had it."""
        out = {}
        for (name, _), v in zip(self.named, self.views):
            s = self.optimizer.state.get(v)
            if s:
                out[name] = {k: t.detach().cpu().clone() for k, t in s.items()}
        return out

    def load_named_state(self, saved: dict[str, dict[str, torch.Tensor]]) -> None:
        for (name, _), v in zip(self.named, self.views):
            if name in saved:
                self.optimizer.state[v] = {
                    k: t.to(step_device(v), torch.float32) if k == "step" else t.to(v.device)
                    for k, t in saved[name].items()
                }

    def masters_by_name(self) -> dict[str, torch.Tensor]:
        return {name: v.detach().cpu().clone() for (name, _), v in zip(self.named, self.views)}

    def load_masters(self, masters: dict[str, torch.Tensor]) -> None:
        """The fp32 masters a checkpoint saved (by name) over the ones made from its rounded weights."""
        with torch.no_grad():
            for (name, _), v in zip(self.named, self.views):
                if name in masters:
                    v.copy_(masters[name].reshape(v.shape))


def step_device(t: torch.Tensor) -> torch.device:
    """Where AdamW keeps `step`: on the parameter's device for the fused kernel (CPU, CUDA), else the CPU."""
    return t.device if t.device.type in ("cpu", "cuda") else torch.device("cpu")


def add_to_buffer_hook(owner: Any, a: int, b: int) -> Any:
    """A post-accumulate hook adding a parameter's fresh gradient into `owner.grad_buffer[a:b]` (fp32) and
    freeing it; shared by the replicated and the distributed optimizer."""

    def add_to_buffer(p: torch.Tensor) -> None:
        grad = p.grad
        if hasattr(grad, "placements") and tuple(grad.placements) != tuple(p.placements):
            grad = grad.redistribute(p.device_mesh, p.placements)  # the TP embedding's replicated grad
        owner.grad_buffer[a:b].add_(local_tensor(grad).reshape(-1))
        p.grad = None

    return add_to_buffer
