"""Activation recompute as Megatron defines it (`--recompute-granularity/-method/-num-layers`).

- `full`: the decoder layers of a stage (a model chunk) run in chunks whose input alone is kept for
  backward; the chunk's forward runs again during the backward (Megatron-core `_checkpointed_forward`):
  - `uniform`: every layer, in chunks of `--recompute-num-layers` consecutive layers (the last chunk is cut
    at the end of the stage);
  - `block`: only the first `--recompute-num-layers` layers of each stage, one layer per chunk; the others
    keep their activations.
- `selective`: the core attention (softmax(QK^T)V, Megatron's `_checkpointed_attention_forward`) of every
  layer keeps only its inputs (q, k, v after rotary) and runs again during the backward.

Recompute is used only in training (`module.training` and autograd on), as in Megatron; evaluation runs
the plain forward. The recomputation is `torch.utils.checkpoint` (non-reentrant, RNG state preserved, so
attention dropout draws the same mask again): the same operators on the same inputs, so losses and
gradients are bit-identical to the run without recompute.

Megatron's rules, checked by `problems` (before any process starts, and again in the trainer):
`--recompute-activations` means `--recompute-granularity selective`; `full` needs `--recompute-method`
(`uniform` | `block`) and `--recompute-num-layers`; `selective` takes neither (arguments.py,
TransformerConfig.__post_init__). `--recompute-num-layers` must be >= 1 (Megatron's uniform loop never
ends at 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascendfactory.errors import Problem

GRANULARITIES = ("full", "selective")
METHODS = ("uniform", "block")
SELECTIVE_ATTENTION = "af_sdpa_recompute_core_attention"  # the attention implementation name registered


@dataclass(frozen=True)
class RecomputePlan:
    granularity: str | None = None  # None | "full" | "selective"
    method: str | None = None  # "uniform" | "block" (full only)
    num_layers: int | None = None  # full only

    @classmethod
    def from_args(cls, args: Any) -> RecomputePlan:
        granularity = getattr(args, "recompute_granularity", None)
        if getattr(args, "recompute_activations", False):
            granularity = "selective"  # Megatron: --recompute-activations sets it, whatever was given
        if granularity is None:
            return cls()
        return cls(
            granularity, getattr(args, "recompute_method", None), getattr(args, "recompute_num_layers", None)
        )

    @property
    def full(self) -> bool:
        return self.granularity == "full"

    @property
    def selective(self) -> bool:
        return self.granularity == "selective"

    def chunks(self, layers: int) -> list[tuple[int, int, bool]]:
        """(start, end, recomputed) over a stage's `layers` local layers, in Megatron's order."""
        if not self.full:
            return [(0, layers, False)] if layers else []
        n = self.num_layers or 1
        if self.method == "uniform":
            return [(i, min(i + n, layers), True) for i in range(0, layers, n)]
        return [(i, i + 1, i < n) for i in range(layers)]

    def describe(self) -> str:
        if self.full:
            return f"activation recompute: full, method {self.method}, {self.num_layers} layer(s)"
        if self.selective:
            return "activation recompute: selective (core attention)"
        return "activation recompute: none"


def problems(args: Any) -> list[Problem]:
    """Megatron's validation of the recompute flags (`args` as argparse gives them)."""
    granularity = getattr(args, "recompute_granularity", None)
    method = getattr(args, "recompute_method", None)
    num = getattr(args, "recompute_num_layers", None)
    if getattr(args, "recompute_activations", False):
        granularity = "selective"
    out: list[Problem] = []

    def bad(key: str, message: str, fix: str) -> None:
        out.append(Problem(key=key, message=message, fix=fix, source="command line"))

    if granularity is not None and granularity not in GRANULARITIES:
        bad("--recompute-granularity", f"'{granularity}' is not a granularity", "use full or selective")
    if method is not None and method not in METHODS:
        bad("--recompute-method", f"'{method}' is not a method", "use uniform or block")
    if num is not None and num < 1:
        bad("--recompute-num-layers", f"must be >= 1, got {num}", "give the number of layers to recompute")
    if granularity == "full":
        if method is None:
            bad(
                "--recompute-method",
                "--recompute-granularity full needs a recompute method",
                "add --recompute-method uniform (every layer, in chunks) or block (the first N layers)",
            )
        if num is None:
            bad(
                "--recompute-num-layers",
                "--recompute-granularity full needs --recompute-num-layers (between 1 and the layers per "
                "pipeline stage)",
                "add --recompute-num-layers N",
            )
    elif granularity == "selective":
        if method is not None:
            bad(
                "--recompute-method",
                "recompute method is not supported with --recompute-granularity selective",
                "remove --recompute-method (selective recomputes the core attention of every layer)",
            )
        if num is not None:
            bad(
                "--recompute-num-layers",
                "must not be given with --recompute-granularity selective",
                "remove --recompute-num-layers",
            )
    return out


def unused(args: Any) -> list[str]:
    """Flags given that do nothing without a granularity (Megatron ignores them too)."""
    if getattr(args, "recompute_granularity", None) or getattr(args, "recompute_activations", False):
        return []
    return [
        f
        for f, v in (
            ("--recompute-method", getattr(args, "recompute_method", None)),
            ("--recompute-num-layers", getattr(args, "recompute_num_layers", None)),
        )
        if v is not None
    ]


def checkpointed(fn: Callable[..., Any], *inputs: Any) -> Any:
    """`fn(*inputs)` keeping only `inputs` for backward; re-run (same RNG state) when gradients flow."""
    from torch.utils.checkpoint import checkpoint

    return checkpoint(fn, *inputs, use_reentrant=False, preserve_rng_state=True)


def _core_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any):
    """HF's SDPA attention (or packed documents' attention, `packed.py`) with its core (scores, softmax,
    dropout, @V) recomputed in backward."""
    import torch

    from ascendfactory.engine.train.packed import attention_forward

    if not (module.training and torch.is_grad_enabled()):
        return attention_forward(module, query, key, value, attention_mask, **kwargs)

    def core(q: Any, k: Any, v: Any) -> Any:
        return attention_forward(module, q, k, v, attention_mask, **dict(kwargs))[0]

    return checkpointed(core, query, key, value), None


def use_selective(hf_config: Any) -> None:
    """Every layer built from `hf_config` runs its core attention through `_core_attention` (the model
    reads `config._attn_implementation` at each forward)."""
    from transformers import AttentionInterface

    AttentionInterface.register(SELECTIVE_ATTENTION, _core_attention)
    hf_config._attn_implementation = SELECTIVE_ATTENTION
