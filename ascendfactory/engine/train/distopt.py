"""`--use-distributed-optimizer`: Megatron's DistributedOptimizer (ZeRO-1) for the embedded trainer.

What Megatron core_r0.8.0 does (`megatron/core/optimizer/distrib_optimizer.py`,
`distributed/param_and_grad_buffer.py`) and how it is done here:
- The trained parameters of a rank, in reverse model order (Megatron's buffer order, roughly the order
  backward produces the gradients), form one contiguous gradient buffer, padded to a multiple of DP. Each
  gradient is added into it as soon as autograd has accumulated it (a post-accumulate-grad hook) and then
  dropped, so the parameters' own `.grad` never hold a second full copy (Megatron's `main_grad`).
- Data-parallel rank r owns the r-th 1/DP of the buffer. After the backward the buffer is reduce-scattered
  (sum, then / DP): each rank holds the averaged gradients of its part only.
- Adam's moments exist only for the owned part: the optimizer steps on the owned pieces of the fp32
  weights (views of the model's weights in an fp32 run; with `--bf16` / `--fp16` fp32 master copies of the
  pieces of the 16-bit weights, `mixed_precision.py`), then the updated parts are all-gathered (in the
  model's dtype) so every rank has the whole model again.
- Gradient norm: the squared norms of the owned pieces, summed over DP (and TP for TP-sharded tensors, and
  PP), as `grad_norm_and_clip` does for the replicated gradients; clipping scales the owned pieces.

Bytes per trained parameter (weights + gradients + Adam state), Megatron's table: fp32 4 + 4 + 8 / DP
(16 vs 8 + 8/d); bf16 / fp16 2 + 4 + 12 / DP (18 vs 6 + 12/d: 16-bit weights, fp32 gradient buffer, sharded
fp32 masters and moments).

Checkpoints (legacy torch format, `checkpointing.py`): `model_optim_rng.pt` keeps the model, args, RNG and
scheduler, and its `optimizer` entry is the DistributedOptimizer's `state_dict()`: `{"optimizer":
{"param_groups": [...]}, "grad_scaler": ...}` without any parameter state; that goes, gathered on DP rank 0
(`gather_state`, as `get_parameter_state_dp_zero` gathers), into `distrib_optim.pt` in the same folder,
laid out as Megatron's own buffers lay it out (`distopt_file`, `megatron_buffer`): Megatron's loader finds
each tensor where it expects it. This trainer's own buffer (HF parameters, padded to a multiple of DP only)
decides nothing in the file, so a resume may change DP (as Megatron's dp-zero gather/scatter allows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ascendfactory.engine.train.mixed_precision import SIXTEEN_BIT, add_to_buffer_hook, step_device
from ascendfactory.engine.train.model import local_tensor
from ascendfactory.engine.train.step import adamw
from ascendfactory.errors import ConfigError, Problem

DISTRIB_OPTIM_FILE = "distrib_optim.pt"
STATE_KEYS = ("param", "exp_avg", "exp_avg_sq")


class DistributedOptimizer:
    """AdamW whose state covers this data-parallel rank's 1/DP of the trained parameters."""

    partitioned = True  # each rank holds 1/DP of the gradients: their squared norms are summed over DP

    def __init__(
        self,
        named_params: list[tuple[str, torch.nn.Parameter]],
        *,
        args: Any,
        dp_group: Any,
        dp: int,
        dp_rank: int,
        device: torch.device,
    ):
        self.group, self.dp, self.dp_rank, self.device = dp_group, dp, dp_rank, device
        self.named = list(reversed(named_params))  # Megatron's buffer order: params[::-1]
        self.params = [p for _, p in self.named]
        locals_ = [local_tensor(p) for p in self.params]
        self.offsets = [0]
        for t in locals_:
            self.offsets.append(self.offsets[-1] + t.numel())
        self.numel = self.offsets[-1]
        self.padded = math.ceil(self.numel / dp) * dp
        self.shard_size = self.padded // dp
        self.lo = dp_rank * self.shard_size
        self.hi = self.lo + self.shard_size
        # made at the first zero_grad, after a checkpoint load (whose temporaries it would otherwise join)
        self.grad_buffer = torch.zeros(0, dtype=torch.float32, device=device)
        self.divisor = 1  # the pipeline schedule's micro-batch count (its scale_grads sees no .grad)
        # the owned pieces: (param index, start, end) within that parameter's flat local tensor
        self.pieces: list[tuple[int, int, int]] = []
        for i, (a, b) in enumerate(zip(self.offsets, self.offsets[1:])):
            s, e = max(a, self.lo), min(b, self.hi)
            if s < e:
                self.pieces.append((i, s - a, e - a))
        # the pieces Adam steps on: views of the weights (fp32), or fp32 copies of them (16-bit weights)
        self.sixteen_bit = any(t.dtype in SIXTEEN_BIT for t in locals_)
        self.views = [locals_[i].detach().view(-1)[s:e] for i, s, e in self.pieces]
        if self.sixteen_bit:
            self.views = [v.float().clone() for v in self.views]
        for v in self.views:
            v.grad = None
        self.optimizer = self._build_adam(args, device)
        for p, a, b in zip(self.params, self.offsets, self.offsets[1:]):
            p.register_post_accumulate_grad_hook(self._hook(a, b))

    def _build_adam(self, args: Any, device: torch.device) -> torch.optim.Optimizer:
        kinds = group_kinds(self.named)
        owned: dict[bool, list[torch.Tensor]] = {k: [] for k in kinds}
        for (i, _, _), v in zip(self.pieces, self.views):
            name, p = self.named[i]
            owned[name.endswith(".bias") or p.ndim == 1].append(v)
        param_groups = [
            {
                "params": owned[no_decay] or [torch.zeros(0, device=device)],  # owns none: a placeholder
                "weight_decay": 0.0 if no_decay else args.weight_decay,
                # Megatron's group keys, which its scheduler reads (wd_mult scales the weight decay)
                "wd_mult": 0.0 if no_decay else 1.0,
                "lr_mult": 1.0,
                "is_expert_parallel": False,
                "is_decoupled_lr": False,
                "max_lr": args.lr,
                "min_lr": args.min_lr,
            }
            for no_decay in kinds
        ]
        return adamw(param_groups, args, device)

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
        if self.grad_buffer.numel() != self.padded:
            self.grad_buffer = torch.zeros(self.padded, dtype=torch.float32, device=self.device)
        self.grad_buffer.zero_()
        for p in self.params:
            p.grad = None

    def param_grad(self, index: int) -> torch.Tensor:
        """The full (not yet reduced) gradient of parameter `index` in the buffer, shaped like its shard."""
        a, b = self.offsets[index], self.offsets[index + 1]
        return self.grad_buffer[a:b].view_as(local_tensor(self.params[index]))

    def reduce_grads(self) -> None:
        """Sum over DP into the owned part, then the DP mean (and the pipeline's 1 / micro-batches)."""
        owned = self.grad_buffer[self.lo : self.hi]
        if self.dp > 1:
            if dist.get_backend(self.group) == "gloo":  # gloo's reduce-scatter copies the whole input
                dist.all_reduce(self.grad_buffer, group=self.group)  # the same sums, in place
            else:  # in place: the output is this rank's slice of the input (Megatron's bucket reduce-scatter)
                dist.reduce_scatter_tensor(owned, self.grad_buffer, group=self.group)
            owned /= self.dp
        if self.divisor != 1:
            owned /= self.divisor
        for v, (i, s, e) in zip(self.views, self.pieces):
            a = self.offsets[i]
            v.grad = self.grad_buffer[a + s : a + e]

    def owned_grads(self) -> list[torch.Tensor]:
        return [v.grad for v in self.views]

    def param_norms(self, pieces: list[torch.Tensor | None]) -> list[float]:
        """Per parameter (in `named` order): the norm of its whole value on this TP/PP rank, from one tensor
        per owned piece (a gradient or an Adam moment; None counts as zero) of every DP rank: the squared
        norms of the pieces summed over DP (a collective)."""
        sq = torch.zeros(len(self.params), dtype=torch.float32, device=self.device)
        for t, (i, _, _) in zip(pieces, self.pieces):
            if t is not None:
                sq[i] += t.detach().float().pow(2).sum()
        if self.dp > 1:
            dist.all_reduce(sq, group=self.group)
        return sq.sqrt().tolist()

    def owned_masks(self, excluded: torch.nn.Parameter | None) -> tuple[list[bool], list[bool]]:
        """Per owned piece: a TP shard (its squared norm is summed over TP)? counted in the norm (not the
        last stage's copy of a tied embedding, `excluded`)? The buffer holds each gradient in its
        parameter's placement, so a DTensor parameter sharded over TP means a sharded gradient."""
        sharded, counted = [], []
        for i, _, _ in self.pieces:
            p = self.params[i]
            sharded.append(hasattr(p, "placements") and any(pl.is_shard() for pl in p.placements))
            counted.append(p is not excluded)
        return sharded, counted

    def step(self) -> None:
        """Adam on the owned pieces (in place in the model's weights, or on their fp32 masters), then
        all-gather the weights."""
        self.optimizer.step()
        self.all_gather_params()

    def all_gather_params(self) -> None:
        """Every rank's updated pieces into every rank's weights, gathered in the weights' dtype (Megatron
        gathers its bf16 params); with fp32 weights and one rank Adam updated them in place already."""
        if self.dp == 1 and not self.sixteen_bit:
            return
        # free after the step: reused as the gather buffer, as Megatron reuses it (as 16-bit: half of it)
        flat = self.grad_buffer
        if self.sixteen_bit:
            flat = flat.view(self.params_dtype)[: self.padded]
        for v, (i, s, e) in zip(self.views, self.pieces):
            a = self.offsets[i]
            flat[a + s : a + e].copy_(v.detach())
        if self.dp > 1:
            dist.all_gather_into_tensor(flat, flat[self.lo : self.hi], group=self.group)  # in place too
        with torch.no_grad():
            for p, a, b in zip(self.params, self.offsets, self.offsets[1:]):
                local_tensor(p).view(-1).copy_(flat[a:b])
        self.grad_buffer.zero_()

    @property
    def params_dtype(self) -> torch.dtype:
        return local_tensor(self.params[0]).dtype if self.params else torch.float32

    def sync_from_model(self, params: list[torch.nn.Parameter] | None = None) -> None:
        """The owned fp32 pieces := the model's weights (all, or `params`) after weights were loaded or
        broadcast into the model without their fp32 masters (views of fp32 weights need nothing)."""
        if not self.sixteen_bit:
            return
        wanted = None if params is None else {id(p) for p in params}
        with torch.no_grad():
            for v, (i, s, e) in zip(self.views, self.pieces):
                if wanted is None or id(self.params[i]) in wanted:
                    v.copy_(local_tensor(self.params[i]).detach().view(-1)[s:e])

    # ------------------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Megatron's DistributedOptimizer.state_dict(): the param groups without any parameter state
        (Adam's step count kept per group, as Apex's FusedAdam keeps it)."""
        groups = []
        for g in self.optimizer.param_groups:
            entry = {k: v for k, v in g.items() if k != "params"}
            entry["step"] = self._step_count()
            groups.append(entry)
        return {"optimizer": {"param_groups": groups}}

    def _step_count(self) -> int:
        for v in self.views:
            s = self.optimizer.state.get(v)
            if s and "step" in s:
                return int(s["step"])
        return 0

    def gather_state(self) -> dict[str, torch.Tensor] | None:
        """`get_parameter_state_dp_zero`'s gather: the owned fp32 weights and Adam moments of every DP rank
        on DP rank 0, as {name: [3, *local shape]} (param, exp_avg, exp_avg_sq) in this trainer's HF names;
        None on the other ranks. The checkpointer lays them out as Megatron's file (`megatron_buffer`)."""
        local = torch.zeros(3, self.shard_size, dtype=torch.float32, device=self.device)
        for v, (i, s, e) in zip(self.views, self.pieces):
            a = self.offsets[i] + s - self.lo
            local[0, a : a + e - s] = v.detach()
            st = self.optimizer.state.get(v) or {}
            if "exp_avg" in st:
                local[1, a : a + e - s] = st["exp_avg"]
                local[2, a : a + e - s] = st["exp_avg_sq"]
        if self.dp > 1:
            world = torch.empty(self.dp * 3 * self.shard_size, dtype=torch.float32, device=self.device)
            dist.all_gather_into_tensor(world, local.view(-1), group=self.group)
            world = world.view(self.dp, 3, self.shard_size)
        else:
            world = local.unsqueeze(0)
        if self.dp_rank != 0:
            return None
        flat = world.permute(1, 0, 2).reshape(3, -1)[:, : self.numel].cpu()
        return {
            name: flat[:, a:b].reshape(3, *local_tensor(p).shape)
            for (name, p), a, b in zip(self.named, self.offsets, self.offsets[1:])
        }

    def load_state(self, named: dict[str, torch.Tensor], state_dict: dict[str, Any] | None) -> None:
        """`load_parameter_state_from_dp_zero` + `load_state_dict`: `named` = {name: [3, *local shape]} as
        `gather_state` gives; each rank takes its owned slices into the model weights and fresh Adam state,
        the step count and hyper-parameters from the param groups (`state_dict`)."""
        missing = [n for n, _ in self.named if n not in named]
        if missing:
            raise ConfigError(
                Problem(
                    key="--load",
                    message=f"the checkpoint's {DISTRIB_OPTIM_FILE} has no state for "
                    + ", ".join(missing[:3]),
                    fix="resume with the flags the checkpoint was saved with, or add --no-load-optim",
                    source="command line",
                )
            )
        groups = (state_dict or {}).get("optimizer", {}).get("param_groups", [])
        step = int(groups[0].get("step", 0)) if groups else 0
        with torch.no_grad():
            for name, p in self.named:
                local_tensor(p).copy_(named[name][0])
            for v, (i, s, e) in zip(self.views, self.pieces):
                flat = named[self.named[i][0]].reshape(3, -1)
                if self.sixteen_bit:  # the exact fp32 masters, not the rounded weights
                    v.copy_(flat[0, s:e])
                if step:
                    self.optimizer.state[v] = {
                        "step": torch.tensor(float(step), dtype=torch.float32, device=step_device(v)),
                        "exp_avg": flat[1, s:e].to(v.device).clone(),
                        "exp_avg_sq": flat[2, s:e].to(v.device).clone(),
                    }
        for group, saved_group in zip(self.optimizer.param_groups, groups):
            group.update({k: v for k, v in saved_group.items() if k in group and k not in ("params", "step")})


def group_kinds(named: Sequence[tuple[str, torch.Tensor]]) -> list[bool]:
    """Megatron's param groups (`optimizer/__init__.py` `_get_param_groups`): one per weight-decay kind
    (True: no decay, for biases and 1-D weights), in the order the chunk's `named_parameters()` first meets
    it: the embedding (decay) where it trains, else a layer's first parameter, its input norm (no decay).
    Every rank has all of them (the DistributedOptimizer keeps empty ones), so a loader pairs them."""
    kinds = {name.endswith(".bias") or p.ndim == 1 for name, p in named}
    if len(kinds) < 2:
        return sorted(kinds) or [False]
    embedding = any(name.endswith("embed_tokens.weight") for name, _ in named)
    return [False, True] if embedding else [True, False]
