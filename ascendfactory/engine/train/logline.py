"""MindSpeed-LLM / Megatron `training_log` text: the iteration line, the memory line, the model FLOPs formula.

Pure functions (no torch), so they are unit-tested and reused by parsers' tests.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone


def emit(line: str) -> None:
    """Print one line with a single write(2), so lines of several ranks sharing a pipe never interleave."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


@dataclass(frozen=True)
class FlopsDims:
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    padded_vocab_size: int
    swiglu: bool = True
    # MoE: how many layers are MoE, each routing a token to `experts_routed_to` experts of
    # `moe_ffn_hidden_size` plus shared experts of `shared_ffn_hidden_size`
    moe_layers: int = 0
    moe_ffn_hidden_size: int = 0
    experts_routed_to: int = 0
    shared_ffn_hidden_size: int = 0

    @property
    def mlp_width(self) -> float:
        """The FFN width a token goes through, averaged over the layers: Megatron core_v0.12.1's MLP term
        (dense layers ffn_hidden_size, MoE layers moe_ffn_hidden_size x top-k + the shared experts');
        core_r0.8.0 multiplied ffn_hidden_size by top-k in every layer, which counts no MoE model right."""
        dense = self.num_layers - self.moe_layers
        moe = self.moe_ffn_hidden_size * self.experts_routed_to + self.shared_ffn_hidden_size
        return (dense * self.ffn_hidden_size + self.moe_layers * moe) / self.num_layers


def num_floating_point_operations(d: FlopsDims, *, seq_length: int, batch_size: int) -> float:
    """Megatron core_r0.8.0 `num_floating_point_operations` (forward + backward); MoE layers by
    `FlopsDims.mlp_width` (core_v0.12.1's MLP term)."""
    query_projection_to_hidden = d.kv_channels * d.num_attention_heads / d.hidden_size
    gated = 3 / 2 if d.swiglu else 1
    return (
        12
        * batch_size
        * seq_length
        * d.num_layers
        * d.hidden_size
        * d.hidden_size
        * (
            (1 + d.num_query_groups / d.num_attention_heads + seq_length / d.hidden_size)
            * query_projection_to_hidden
            + d.mlp_width / d.hidden_size * gated
            + d.padded_vocab_size / (2 * d.num_layers * d.hidden_size)
        )
    )


@dataclass(frozen=True)
class IterationStats:
    iteration: int
    train_iters: int
    consumed_samples: int
    elapsed_ms: float
    learning_rate: float
    global_batch_size: int
    losses: dict[str, float]
    loss_scale: float
    grad_norm: float | None
    skipped_iterations: int
    nan_iterations: int
    tflops_per_gpu: float | None = None  # only with --log-throughput


def format_training_log(s: IterationStats, now: datetime | None = None) -> str:
    """One line, exactly Megatron's training_log (2.1.0 uses UTC timestamps)."""
    now = now or datetime.now(tz=timezone.utc)
    line = f" [{now.strftime('%Y-%m-%d %H:%M:%S')}]"
    line += f" iteration {s.iteration:8d}/{s.train_iters:8d} |"
    line += f" consumed samples: {s.consumed_samples:12d} |"
    line += f" elapsed time per iteration (ms): {s.elapsed_ms:.1f} |"
    if s.tflops_per_gpu is not None:
        line += f" throughput per GPU (TFLOP/s/GPU): {s.tflops_per_gpu:.1f} |"
    line += f" learning rate: {s.learning_rate:.6E} |"
    line += f" global batch size: {s.global_batch_size:5d} |"
    for key, value in s.losses.items():
        # Megatron omits a zero average and, by its `avg > 0.0` test, a NaN one too; a NaN is shown here
        # (`lm loss: nan`), so a log never hides an interval that trained on nothing.
        if value != value:
            line += f" {key}: nan |"
        elif value > 0.0:
            line += f" {key}: {value:.6E} |"
    line += f" loss scale: {s.loss_scale:.1f} |"
    if s.grad_norm is not None:
        line += f" grad norm: {s.grad_norm:.3f} |"
    line += f" number of skipped iterations: {s.skipped_iterations:3d} |"
    line += f" number of nan iterations: {s.nan_iterations:3d} |"
    return line


def format_validation(prefix: str, losses: dict[str, float]) -> list[str]:
    """Megatron's `evaluate_and_print_results` (core_r0.8.0 `training/training.py`): a dashed line, then
    ` validation loss at <prefix> | <key> value: X | <key> PPL: exp(min(20, X)) | ` per loss key, then the
    dashed line again (its length: the text's + 1). `prefix` is `iteration N`, or after training
    `iteration N on validation set` / `iteration N on test set`."""
    text = f" validation loss at {prefix} | "
    for key, value in losses.items():
        text += f"{key} value: {value:.6E} | {key} PPL: {math.exp(min(20.0, value)):.6E} | "
    line = "-" * (len(text) + 1)
    return [line, text, line]


def format_memory_line(rank: int, iteration: int, mb: dict[str, float]) -> str:
    """`[Rank N] (after K iterations) memory (MB) | allocated: .. | max allocated: .. | reserved: .. | ..`."""
    return (
        f"[Rank {rank}] (after {iteration} iterations) memory (MB) | allocated: {mb['allocated']} | "
        f"max allocated: {mb['max_allocated']} | reserved: {mb['reserved']} | "
        f"max reserved: {mb['max_reserved']}"
    )


def parse_log_line(line: str) -> dict[str, str]:
    """`label: value` pairs of a training_log line (split on '|', as MindSpeed's CI parser does)."""
    out: dict[str, str] = {}
    body = line.split("]", 1)[1] if line.lstrip().startswith("[") else line
    for part in body.split("|"):
        part = part.strip()
        if part.startswith("iteration "):
            out["iteration"] = part[len("iteration") :].strip()
        elif ":" in part:
            key, value = part.rsplit(":", 1)
            out[key.strip()] = value.strip()
    return out
