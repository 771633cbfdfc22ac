"""The bridge between one Megatron (tp, pp) shard and the trainer's per-rank shard of the HF model.

"local" = the DTensor local shard a torchtitan-style TP plan on the HF model gives TP rank r:
q/k/v/gate/up projections and `embed_tokens` / `lm_head` hold row chunk r, `o_proj` / `down_proj` column
chunk r, norms are replicated. Embedding rows are Megatron's padded vocabulary (`padded_vocab_size / TP` rows
per rank), so the trainer builds its HF model with `vocab_size = padded_vocab_size`. Megatron layer numbers
are local to the pipeline stage; HF layer numbers are global (`model.layers.{layer_offset + N}`).

The full-model converters use the same two functions, plus `hf_full_to_local` / `hf_locals_to_full`, which
cut or glue HF tensors along the plan's TP dimension.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ascendfactory.engine.convert import tensor_ops
from ascendfactory.engine.convert.dims import ModelDims, as_dims
from ascendfactory.engine.convert.families import GatedMLPMapping, QKVMapping, hf_name
from ascendfactory.errors import ConversionKeyError

__all__ = ["hf_full_to_local", "hf_local_to_megatron", "hf_locals_to_full", "megatron_to_hf_local"]

_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")
Alloc = Callable[[tuple[int, ...], torch.dtype], torch.Tensor]


def _skip_megatron(name: str) -> bool:
    return name.endswith("._extra_state")


def megatron_to_hf_local(
    shard_sd: Mapping[str, torch.Tensor], *, cfg: Any, tp: int, tp_rank: int, layer_offset: int
) -> dict[str, torch.Tensor]:
    """Megatron shard of TP rank `tp_rank` (layers local to its stage) -> that rank's local HF tensors.

    `cfg`: a `ModelDims`, an HF config or the checkpoint's Megatron args. Unknown keys raise
    `ConversionKeyError`; `*._extra_state` entries are ignored.
    """
    dims = as_dims(cfg)
    dims.check_tp(tp, key="tensor_model_parallel_size")
    if not 0 <= tp_rank < tp:
        raise ValueError(f"tp_rank {tp_rank} is outside 0..{tp - 1}")
    fam = dims.fam
    heads = dict(num_heads=dims.num_heads // tp, num_kv_heads=dims.num_kv_heads // tp, head_dim=dims.head_dim)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in shard_sd.items():
        if _skip_megatron(name):
            continue
        _, layer, target = fam.lookup_megatron(name)
        glayer = None if layer is None else layer + layer_offset
        if isinstance(target, QKVMapping):
            q, k, v = tensor_ops.split_qkv(tensor, **heads)
            for pat, t in zip(target.hf, (q, k, v)):
                out[hf_name(pat, glayer)] = t
        elif isinstance(target, GatedMLPMapping):
            gate, up = tensor_ops.split_gate_up(tensor, tp=tp)
            out[hf_name(target.gate, glayer)] = gate
            out[hf_name(target.up, glayer)] = up
        else:
            out[hf_name(target, glayer)] = tensor
    return out


def hf_local_to_megatron(
    local_sd: Mapping[str, torch.Tensor],
    *,
    cfg: Any,
    tp: int,
    tp_rank: int,
    layer_offset: int,
    alloc: Alloc | None = None,
    keep_tied_output: bool = False,
) -> dict[str, torch.Tensor]:
    """Inverse of `megatron_to_hf_local`: one rank's local HF tensors -> its Megatron shard.

    Layers `< layer_offset` raise ValueError (they belong to an earlier stage). With tied embeddings an
    `lm_head.weight` entry is dropped (Megatron keeps only `embedding.word_embeddings.weight`), unless
    `keep_tied_output`: the last pipeline stage of a tied model with PP > 1 holds its own copy as
    `output_layer.weight` (MindSpeed-LLM's convert_ckpt_v2.py writes it there; Megatron keeps the two
    copies equal by all-reducing their gradients between the first and last stage). Fused
    tensors (QKV, fc1) are new; `alloc(shape, dtype)`, when given, supplies their memory (e.g. reused
    buffers). The others are the inputs themselves.
    """
    dims = as_dims(cfg)
    dims.check_tp(tp, key="tensor_model_parallel_size")
    fam = dims.fam
    heads = dict(num_heads=dims.num_heads // tp, num_kv_heads=dims.num_kv_heads // tp, head_dim=dims.head_dim)
    out: dict[str, torch.Tensor] = {}
    groups: dict[tuple[Any, int | None], dict[str, torch.Tensor]] = {}
    for name, tensor in local_sd.items():
        if name == "lm_head.weight" and dims.tie_word_embeddings and not keep_tied_output:
            continue
        pat, layer, target = fam.lookup_hf(name)
        if target is None:
            continue
        llayer = None
        if layer is not None:
            llayer = layer - layer_offset
            if llayer < 0:
                raise ValueError(f"'{name}' is before this stage's first layer ({layer_offset})")
        if isinstance(target, (QKVMapping, GatedMLPMapping)):
            groups.setdefault((target, llayer), {})[pat] = tensor
        else:
            out[hf_name(target, llayer)] = tensor
    for (target, llayer), parts in groups.items():
        missing = [
            hf_name(p, None if llayer is None else llayer + layer_offset) for p in target.hf if p not in parts
        ]
        if missing:
            raise ConversionKeyError(
                f"cannot build '{hf_name(target.megatron, llayer)}': missing {', '.join(missing)} "
                f"(needs all of {', '.join(target.hf)})"
            )
        if isinstance(target, QKVMapping):
            q, k, v = parts[target.q], parts[target.k], parts[target.v]
            rows = q.shape[0] + k.shape[0] + v.shape[0]
            buf = None if alloc is None else alloc((rows, *q.shape[1:]), q.dtype)
            fused = tensor_ops.merge_qkv(q, k, v, **heads, out=buf)
        else:
            gate, up = parts[target.gate], parts[target.up]
            if alloc is None:
                fused = tensor_ops.cat([gate, up], dim=0)
            else:
                fused = torch.cat(
                    [gate, up], dim=0, out=alloc((gate.shape[0] + up.shape[0], *gate.shape[1:]), gate.dtype)
                )
        out[hf_name(target.megatron, llayer)] = fused
    return out


def hf_full_to_local(
    full_sd: Mapping[str, torch.Tensor], *, cfg: ModelDims, tp: int, tp_rank: int, padded_vocab_size: int
) -> dict[str, torch.Tensor]:
    """Full HF tensors -> the local shard of TP rank `tp_rank` (vocab padded to `padded_vocab_size` first).

    Keys the family maps to None (rotary `inv_freq`) are dropped here. Chunks are views of the inputs (save
    them through a copy, e.g. `.contiguous().clone()`, or the whole source storage is written).
    """
    cfg.check_tp(tp)
    fam = cfg.fam
    out: dict[str, torch.Tensor] = {}
    for name, tensor in full_sd.items():
        pat, _, target = fam.lookup_hf(name)
        if target is None:
            continue
        if pat in _VOCAB:
            tensor = tensor_ops.pad_vocab(tensor, padded_vocab_size)
        dim = fam.tp_dim(pat)
        out[name] = tensor if dim is None else tensor_ops.chunk(tensor, tp, tp_rank, dim, own=False)
    return out


def hf_locals_to_full(
    locals_: Sequence[Mapping[str, torch.Tensor]], *, cfg: ModelDims, vocab_size: int | None = None
) -> dict[str, torch.Tensor]:
    """Every TP rank's local HF tensors (in rank order) -> full HF tensors, vocab cut back to `vocab_size`.

    Replicated tensors must be equal on every rank; a difference raises ConversionKeyError naming the tensor.
    """
    fam = cfg.fam
    out: dict[str, torch.Tensor] = {}
    first = locals_[0]
    for name in first:
        pat, _, _ = fam.lookup_hf(name)
        parts = []
        for r, loc in enumerate(locals_):
            if name not in loc:
                raise ConversionKeyError(f"'{name}' is on TP rank 0 but missing on TP rank {r}")
            parts.append(loc[name])
        dim = fam.tp_dim(pat)
        if dim is None:
            for r, p in enumerate(parts[1:], start=1):
                if p.shape != parts[0].shape or (not p.is_meta and not torch.equal(p, parts[0])):
                    raise ConversionKeyError(f"replicated tensor '{name}' differs between TP rank 0 and {r}")
            full = parts[0]
        else:
            full = parts[0] if len(parts) == 1 else tensor_ops.cat(parts, dim=dim)
        if pat in _VOCAB and vocab_size is not None:
            full = tensor_ops.unpad_vocab(full, vocab_size)
        out[name] = full
    for r, loc in enumerate(locals_[1:], start=1):
        extra = set(loc) - set(first)
        if extra:
            raise ConversionKeyError(f"TP rank {r} has tensors that rank 0 lacks: {sorted(extra)[:5]}")
    return out
