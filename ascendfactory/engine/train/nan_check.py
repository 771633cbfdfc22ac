"""Megatron's `check_for_nan_in_loss_and_grad`: stop at the first NaN loss or gradient norm.

Megatron (and MindSpeed-LLM 2.1.0's SFT `loss_func`) raise on a NaN local loss before the data-parallel
reduction, and on a NaN gradient before the gradient all-reduce; the check is on unless
`--no-check-for-nan-in-loss-and-grad` is given, and Megatron turns it off itself under fp16 with dynamic
loss scaling (`--fp16` without `--loss-scale`), where an inf/NaN gradient is the scaler's signal to skip
the step. Here the error names the iteration and, for a loss, the micro-batches without label tokens (a
masked mean over no tokens is 0/0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ascendfactory.errors import AscendFactoryError

IGNORE_INDEX = -100
MARKER = "found NaN in"  # in every message: the runner's auto-resume does not retry these


class NaNLossError(AscendFactoryError):
    """The loss or the gradient norm of an iteration is NaN / inf, with the check on."""


def enabled(args: Any) -> bool:
    """Megatron's rule: on unless turned off, and off under fp16 dynamic loss scaling."""
    if args.no_check_for_nan_in_loss_and_grad:
        return False
    return not (args.fp16 and not args.loss_scale)


def finite(value: float | None) -> bool:
    return value is None or math.isfinite(value)


def empty_microbatches(labels: np.ndarray, num_microbatches: int) -> list[int]:
    """1-based numbers of this rank's micro-batches whose labels are all IGNORE_INDEX."""
    per = np.asarray(labels).reshape(num_microbatches, -1)
    return [i + 1 for i, row in enumerate(per) if not np.any(row != IGNORE_INDEX)]


def loss_error(
    *,
    iteration: int,
    rank: int,
    loss: float,
    empty: list[int],
    num_microbatches: int,
    elsewhere: bool = False,
) -> NaNLossError:
    if elsewhere:
        cause = "the data-parallel average is NaN: another rank's loss is (its own error names the cause)"
    elif empty:
        cause = (
            f"micro-batch {', '.join(map(str, empty))} of {num_microbatches} on this rank has no label "
            "tokens (every answer lies past --seq-length), and a masked mean over no tokens is 0/0"
        )
    else:
        cause = "the model's output is not finite (a learning rate or loss scale too large?)"
    if empty:
        remedy = "raise --seq-length (backend_config.training.seq-length) so the answers fit"
    else:  # the other ranks' errors, and a diverged model: the step itself is the cause
        remedy = "lower the learning rate (backend_config.training.lr), or use --bf16"
    return NaNLossError(
        f"iteration {iteration}: {MARKER} the loss (lm loss {loss}) on rank {rank}: {cause}.\n"
        f"  fix: {remedy}, or pass "
        "--no-check-for-nan-in-loss-and-grad (no-check-for-nan-in-loss-and-grad: true) to train through "
        "NaN iterations (they are skipped and counted)"
    )


def grad_error(*, iteration: int, rank: int, norm: float) -> NaNLossError:
    return NaNLossError(
        f"iteration {iteration}: {MARKER} the gradient norm ({norm}) on rank {rank}.\n"
        "  fix: lower the learning rate, use --bf16, or pass --no-check-for-nan-in-loss-and-grad to skip "
        "such iterations"
    )
