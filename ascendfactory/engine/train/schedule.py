"""Learning-rate schedule with Megatron's `OptimizerParamScheduler` arithmetic (steps counted in samples).

Iteration i (1-based) trains with the lr of `num_steps = (i - 1) * GBS`; after the optimizer step the
scheduler
advances by GBS, and that new lr is what Megatron's log line prints for iteration i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass
class LRSchedule:
    max_lr: float
    min_lr: float
    decay_style: str
    warmup_steps: int  # in samples
    decay_steps: int  # in samples
    init_lr: float = 0.0
    num_steps: int = 0

    @classmethod
    def from_args(cls, args: Any, global_batch_size: int) -> LRSchedule:
        decay_iters = args.lr_decay_iters or args.train_iters
        decay_steps = decay_iters * global_batch_size
        if args.lr_warmup_fraction is not None:
            warmup_steps = int(args.lr_warmup_fraction * decay_steps)
        else:
            warmup_steps = int(args.lr_warmup_iters or 0) * global_batch_size
        return cls(
            max_lr=args.lr,
            min_lr=args.min_lr,
            decay_style=args.lr_decay_style,
            warmup_steps=warmup_steps,
            decay_steps=decay_steps,
            init_lr=args.lr_warmup_init,
        )

    def lr(self) -> float:
        """The learning rate at `num_steps` (Megatron's `get_lr`)."""
        if self.warmup_steps > 0 and self.num_steps <= self.warmup_steps:
            return self.init_lr + (self.max_lr - self.init_lr) * self.num_steps / self.warmup_steps
        if self.decay_style == "constant":
            return self.max_lr
        if self.num_steps > self.decay_steps:
            return self.min_lr
        ratio = (self.num_steps - self.warmup_steps) / max(1, self.decay_steps - self.warmup_steps)
        if self.decay_style == "linear":
            coeff = 1.0 - ratio
        elif self.decay_style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        else:
            raise ValueError(f"unknown lr decay style {self.decay_style}")
        return self.min_lr + coeff * (self.max_lr - self.min_lr)

    def apply(self, optimizer: Any) -> float:
        lr = self.lr()
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    def step(self, optimizer: Any, increment: int) -> float:
        self.num_steps += increment
        return self.apply(optimizer)

    def state_dict(self) -> dict[str, Any]:
        return {
            "max_lr": self.max_lr,
            "min_lr": self.min_lr,
            "lr_decay_style": self.decay_style,
            "lr_warmup_steps": self.warmup_steps,
            "lr_decay_steps": self.decay_steps,
            "init_lr": self.init_lr,
            "num_steps": self.num_steps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.num_steps = int(state["num_steps"])
