"""`distrib_optim.pt` as Megatron core_r0.8.0 writes and reads it (legacy torch format, `dp_zero`).

The distributed optimizer gathers its state by this trainer's HF parameter names (`DistributedOptimizer.
gather_state`); here each of the three states goes through the checkpoint's own name mapping (HF local
tensors -> each model chunk's Megatron tensors: fused QKV and fc1, padded vocabulary, PEFT names with
LoRA) and is laid out where Megatron's buffer puts each parameter (`megatron_buffer`): one entry per
model chunk (`0`, `1`, ... with a virtual pipeline), keyed by Megatron's (param dtype, grad dtype).
Loading is the inverse, with Megatron's check that the unpadded sizes agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ascendfactory.engine.train import megatron_buffer as mb
from ascendfactory.engine.train.distopt import DISTRIB_OPTIM_FILE, STATE_KEYS
from ascendfactory.errors import ConfigError, Problem

OLD_ORDER_KEY = "af_param_order"  # files of earlier versions of this trainer: HF buffer order
ToChunks = Callable[[dict[str, torch.Tensor]], dict[str, dict[str, torch.Tensor]]]
ToLocal = Callable[[dict[str, torch.Tensor], int], dict[str, torch.Tensor]]


def buffer_key(params_dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
    """(param dtype, grad dtype) of Megatron's buffer: gradients in fp32 with --bf16 (validate_args turns
    on accumulate_allreduce_grads_in_fp32), else in the params' dtype (`distributed_data_parallel.py`)."""
    return (params_dtype, torch.float32 if params_dtype == torch.bfloat16 else params_dtype)


@dataclass(frozen=True)
class FileLayout:
    """What decides the layout of one (tp, pp) rank's file."""

    key: tuple[torch.dtype, torch.dtype]
    dp: int
    bucket_sizes: tuple[int | None, ...]  # per model chunk
    shared: tuple[str | None, ...]  # per model chunk: the parameter flagged `shared_embedding`

    def layout(self, chunk: int, tensors: dict[str, torch.Tensor]) -> mb.Layout:
        order = sorted(tensors, key=mb.registration_key)
        return mb.build_layout(
            [(n, tensors[n].numel()) for n in order],
            dp=self.dp,
            bucket_size=self.bucket_sizes[chunk],
            shared_embedding=self.shared[chunk] if self.shared[chunk] in tensors else None,
        )


def to_file(named: dict[str, torch.Tensor], to_chunks: ToChunks, spec: FileLayout) -> dict[Any, Any]:
    """{hf name: [3, *local shape]} -> the dict `get_parameter_state_dp_zero` returns."""
    states = [to_chunks({n: t[j] for n, t in named.items()}) for j in range(len(STATE_KEYS))]
    out: dict[Any, Any] = {"buckets_coalesced": True}
    for c, chunk in enumerate(states[0]):
        layout = spec.layout(c, states[0][chunk])
        entry: dict[str, Any] = {k: mb.to_world(states[j][chunk], layout) for j, k in enumerate(STATE_KEYS)}
        entry["numel_unpadded"] = layout.numel_unpadded
        out[c] = {spec.key: entry}
    return out


def from_file(
    saved: dict[Any, Any],
    current: dict[str, dict[str, torch.Tensor]],
    to_local: ToLocal,
    spec: FileLayout,
    *,
    where: str,
) -> dict[str, torch.Tensor]:
    """`load_parameter_state_from_dp_zero`: `current` = this run's trained parameters as Megatron chunks
    (their names and shapes); returns {hf name: [3, *local shape]}."""
    if OLD_ORDER_KEY in saved:  # the same sizes can hide another order: refuse it by its marker
        raise ConfigError(
            _problem(where, "is in this trainer's earlier own order (af_param_order), not Megatron's")
        )
    out: dict[str, torch.Tensor] = {}
    for c, tensors in enumerate(current.values()):
        layout = spec.layout(c, tensors)
        entry = saved.get(c, {}).get(spec.key) if isinstance(saved.get(c), dict) else None
        if entry is None:
            found = {k: list(v) for k, v in saved.items() if isinstance(v, dict)}
            raise ConfigError(_problem(where, f"has no buffer {c} {spec.key} (it holds {found})"))
        if entry["numel_unpadded"] != layout.numel_unpadded:
            raise ConfigError(
                _problem(
                    where,
                    "Number of unpadded elements must be same in current run "
                    f"({layout.numel_unpadded}) and checkpoint ({entry['numel_unpadded']}) (buffer {c})",
                )
            )
        shapes = {n: t.shape for n, t in tensors.items()}
        parts = [to_local(mb.from_world(entry[k], layout, shapes), c) for k in STATE_KEYS]
        for name in parts[0]:
            out[name] = torch.stack([p[name] for p in parts])
    return out


def _problem(where: str, message: str) -> Problem:
    return Problem(
        key="--load",
        message=f"{where}/{DISTRIB_OPTIM_FILE} {message}: Megatron's loader refuses it",
        fix="resume with the model, dtype, layout and LoRA targets it was saved with, or add --no-load-optim",
        source="command line",
    )
