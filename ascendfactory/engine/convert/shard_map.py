"""The bridge between one Megatron (tp, pp) shard and the trainer's per-rank shard of the HF model.

"local" = the DTensor local shard a torchtitan-style TP plan on the HF model gives TP rank r:
q/k/v/gate/up projections and `embed_tokens` / `lm_head` hold row chunk r, `o_proj` / `down_proj` column
chunk r, norms are replicated. Embedding rows are Megatron's padded vocabulary (`padded_vocab_size / TP` rows
per rank), so the trainer builds its HF model with `vocab_size = padded_vocab_size`. Megatron layer numbers
are local to the pipeline stage; HF layer numbers are global (`model.layers.{layer_offset + N}`).

The full-model converters use the same two functions, plus `hf_full_to_local` / `hf_locals_to_full`, which
cut or glue HF tensors along the plan's TP dimension.

Mixture of experts: expert parallelism gives EP rank `e` the routed experts `e*El .. e*El+El-1` (El =
experts / EP). Local HF tensors keep the GLOBAL expert numbers (`model.layers.L.mlp.experts.G.*`); the
Megatron shard numbers them locally (`mlp.experts.local_experts.J.*`, J = G - e*El), or fuses them into the
grouped-GEMM `mlp.experts.weight1` / `weight2` (`grouped_gemm=True`, Megatron's `--moe-grouped-gemm`).
Every other tensor is the same on every EP rank (`merge_ep` checks that when gluing EP ranks back).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ascendfactory.engine.convert import tensor_ops
from ascendfactory.engine.convert.dims import ModelDims, as_dims
from ascendfactory.engine.convert.families import (
    V1_MLA_ALIASES,
    ConcatMapping,
    GatedMLPMapping,
    QKVMapping,
    hf_name,
)
from ascendfactory.errors import ConversionKeyError

__all__ = [
    "hf_full_to_local",
    "hf_local_to_megatron",
    "hf_locals_to_full",
    "megatron_to_hf_local",
    "merge_ep",
]

_VOCAB = ("model.embed_tokens.weight", "lm_head.weight")
Alloc = Callable[[tuple[int, ...], torch.dtype], torch.Tensor]
_GROUPED = re.compile(r"^(decoder\.layers\.\d+\.mlp\.experts\.)weight([12])$")
_LOCAL_EXPERT = "{prefix}local_experts.{j}.linear_fc{n}.weight"
_V1_MLA = re.compile(r"^(decoder\.layers\.\d+\.)(" + "|".join(map(re.escape, V1_MLA_ALIASES)) + ")$")
_CORE_MLA_TO_V1 = {core: v1 for v1, core in V1_MLA_ALIASES.items()}
_CORE_MLA = re.compile(r"^(decoder\.layers\.\d+\.)(" + "|".join(map(re.escape, _CORE_MLA_TO_V1)) + ")$")


def _skip_megatron(name: str) -> bool:
    return name.endswith("._extra_state")


def local_experts(num_experts: int, ep: int, ep_rank: int) -> range:
    """The global expert numbers EP rank `ep_rank` holds (Megatron: `local_expert_indices`)."""
    per_rank = num_experts // ep
    return range(ep_rank * per_rank, (ep_rank + 1) * per_rank)


def _check_ep(dims: ModelDims, ep: int, ep_rank: int) -> None:
    dims.check_ep(ep, key="expert_model_parallel_size")
    if not 0 <= ep_rank < ep:
        raise ValueError(f"ep_rank {ep_rank} is outside 0..{ep - 1}")


def _ungroup(shard_sd: Mapping[str, torch.Tensor], per_rank: int, mla: bool) -> dict[str, torch.Tensor]:
    """Grouped-GEMM `experts.weight1` / `weight2` -> `local_experts.J.linear_fc1/2.weight` (other keys kept);
    with `mla`, MindSpeed-LLM 2.1.0's MLA names -> Megatron core's."""
    out: dict[str, torch.Tensor] = {}
    grouped: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in shard_sd.items():
        m = _GROUPED.match(name)
        if m:
            grouped.setdefault(m.group(1), {})[m.group(2)] = t
            continue
        v1 = _V1_MLA.match(name) if mla else None
        out[v1.group(1) + V1_MLA_ALIASES[v1.group(2)] if v1 else name] = t
    for prefix, pair in grouped.items():
        if set(pair) != {"1", "2"}:
            raise ConversionKeyError(f"'{prefix}weight1' and '{prefix}weight2' must come together")
        fc1, fc2 = tensor_ops.ungroup_experts(pair["1"], pair["2"], per_rank)
        for j in range(per_rank):
            out[_LOCAL_EXPERT.format(prefix=prefix, j=j, n=1)] = fc1[j]
            out[_LOCAL_EXPERT.format(prefix=prefix, j=j, n=2)] = fc2[j]
    return out


def v1_mla_names(shard: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A shard's MLA tensors under MindSpeed-LLM 2.1.0's names (what its deepseek_spec.py model loads; the
    inverse of the renaming `_ungroup` does); every other name and every tensor kept as it is."""
    out: dict[str, torch.Tensor] = {}
    for name, t in shard.items():
        m = _CORE_MLA.match(name)
        out[m.group(1) + _CORE_MLA_TO_V1[m.group(2)] if m else name] = t
    return out


def _group(shard: dict[str, torch.Tensor], per_rank: int) -> dict[str, torch.Tensor]:
    """Inverse of `_ungroup`: every layer's `local_experts.*` -> `experts.weight1` / `weight2`."""
    rx = re.compile(r"^(decoder\.layers\.\d+\.mlp\.experts\.)local_experts\.(\d+)\.linear_fc([12])\.weight$")
    layers: dict[str, dict[tuple[int, str], torch.Tensor]] = {}
    out: dict[str, torch.Tensor] = {}
    for name, t in shard.items():
        m = rx.match(name)
        if m:
            layers.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = t
        else:
            out[name] = t
    for prefix, experts in layers.items():
        missing = [
            _LOCAL_EXPERT.format(prefix=prefix, j=j, n=n)
            for j in range(per_rank)
            for n in "12"
            if (j, n) not in experts
        ]
        if missing:
            raise ConversionKeyError(
                f"grouped GEMM needs every local expert: missing {', '.join(missing[:4])}"
            )
        w1, w2 = tensor_ops.group_experts(
            [experts[(j, "1")] for j in range(per_rank)], [experts[(j, "2")] for j in range(per_rank)]
        )
        out[prefix + "weight1"], out[prefix + "weight2"] = w1, w2
    return out


def megatron_to_hf_local(
    shard_sd: Mapping[str, torch.Tensor],
    *,
    cfg: Any,
    tp: int,
    tp_rank: int,
    layer_offset: int,
    ep: int = 1,
    ep_rank: int = 0,
) -> dict[str, torch.Tensor]:
    """Megatron shard of TP rank `tp_rank` (and EP rank `ep_rank`; layers local to its stage) -> that rank's
    local HF tensors, experts under their global numbers.

    `cfg`: a `ModelDims`, an HF config or the checkpoint's Megatron args. Unknown keys raise
    `ConversionKeyError`; `*._extra_state` entries are ignored. Grouped-GEMM experts are read as such.
    """
    dims = as_dims(cfg)
    dims.check_tp(tp, key="tensor_model_parallel_size")
    if not 0 <= tp_rank < tp:
        raise ValueError(f"tp_rank {tp_rank} is outside 0..{tp - 1}")
    fam = dims.fam
    first_expert = 0
    if fam.moe:
        _check_ep(dims, ep, ep_rank)
        first_expert = local_experts(dims.num_experts, ep, ep_rank).start
        shard_sd = _ungroup(shard_sd, dims.num_experts // ep, dims.mla)
    heads = dict(num_heads=dims.num_heads // tp, num_kv_heads=dims.num_kv_heads // tp, head_dim=dims.head_dim)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in shard_sd.items():
        if _skip_megatron(name):
            continue
        m = fam.match_megatron(name)
        target = m.target
        glayer = None if m.layer is None else m.layer + layer_offset
        gexpert = None if m.expert is None else m.expert + first_expert
        if isinstance(target, QKVMapping):
            q, k, v = tensor_ops.split_qkv(tensor, **heads)
            for pat, t in zip(target.hf, (q, k, v)):
                out[hf_name(pat, glayer)] = t
        elif isinstance(target, GatedMLPMapping):
            gate, up = tensor_ops.split_gate_up(tensor, tp=tp)
            out[hf_name(target.gate, glayer, gexpert)] = gate
            out[hf_name(target.up, glayer, gexpert)] = up
        elif isinstance(target, ConcatMapping):
            rows = [getattr(dims, r) for r in target.rows]
            for pat, t in zip(target.parts, tensor_ops.split_rows(tensor, rows)):
                out[hf_name(pat, glayer)] = t
        else:
            out[hf_name(target, glayer, gexpert)] = tensor
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
    ep: int = 1,
    ep_rank: int = 0,
    grouped_gemm: bool = False,
) -> dict[str, torch.Tensor]:
    """Inverse of `megatron_to_hf_local`: one rank's local HF tensors -> its Megatron shard.

    Layers `< layer_offset` raise ValueError (they belong to an earlier stage). With tied embeddings an
    `lm_head.weight` entry is dropped (Megatron keeps only `embedding.word_embeddings.weight`), unless
    `keep_tied_output`: the last pipeline stage of a tied model with PP > 1 holds its own copy as
    `output_layer.weight` (MindSpeed-LLM's convert_ckpt_v2.py writes it there; Megatron keeps the two
    copies equal by all-reducing their gradients between the first and last stage). Fused
    tensors (QKV, fc1) are new; `alloc(shape, dtype)`, when given, supplies their memory (e.g. reused
    buffers). The others are the inputs themselves. Experts must be this EP rank's (`local_experts`);
    `grouped_gemm` fuses them into `weight1` / `weight2`.
    """
    dims = as_dims(cfg)
    dims.check_tp(tp, key="tensor_model_parallel_size")
    fam = dims.fam
    mine = range(0)
    if fam.moe:
        _check_ep(dims, ep, ep_rank)
        mine = local_experts(dims.num_experts, ep, ep_rank)
    heads = dict(num_heads=dims.num_heads // tp, num_kv_heads=dims.num_kv_heads // tp, head_dim=dims.head_dim)
    out: dict[str, torch.Tensor] = {}
    groups: dict[tuple[Any, int | None, int | None], dict[str, torch.Tensor]] = {}
    for name, tensor in local_sd.items():
        if name == "lm_head.weight" and dims.tie_word_embeddings and not keep_tied_output:
            continue
        m = fam.match_hf(name)
        pat, target = m.pattern, m.target
        if target is None:
            continue
        llayer = None
        if m.layer is not None:
            llayer = m.layer - layer_offset
            if llayer < 0:
                raise ValueError(f"'{name}' is before this stage's first layer ({layer_offset})")
        lexpert = None
        if m.expert is not None:
            if m.expert not in mine:
                raise ConversionKeyError(
                    f"'{name}': expert {m.expert} is not on EP rank {ep_rank} of {ep} "
                    f"(it holds experts {mine.start}..{mine.stop - 1})"
                )
            lexpert = m.expert - mine.start
        if isinstance(target, (QKVMapping, GatedMLPMapping, ConcatMapping)):
            groups.setdefault((target, llayer, lexpert), {})[pat] = tensor
        else:
            out[hf_name(target, llayer, lexpert)] = tensor
    for (target, llayer, lexpert), parts in groups.items():
        glayer = None if llayer is None else llayer + layer_offset
        gexpert = None if lexpert is None else lexpert + mine.start
        missing = [hf_name(p, glayer, gexpert) for p in target.hf if p not in parts]
        if missing:
            raise ConversionKeyError(
                f"cannot build '{hf_name(target.megatron, llayer, lexpert)}': missing {', '.join(missing)} "
                f"(needs all of {', '.join(target.hf)})"
            )
        if isinstance(target, QKVMapping):
            q, k, v = parts[target.q], parts[target.k], parts[target.v]
            rows = q.shape[0] + k.shape[0] + v.shape[0]
            buf = None if alloc is None else alloc((rows, *q.shape[1:]), q.dtype)
            fused = tensor_ops.merge_qkv(q, k, v, **heads, out=buf)
        elif isinstance(target, ConcatMapping):
            fused = tensor_ops.cat([parts[p] for p in target.parts], dim=0)
        else:
            gate, up = parts[target.gate], parts[target.up]
            if alloc is None:
                fused = tensor_ops.cat([gate, up], dim=0)
            else:
                fused = torch.cat(
                    [gate, up], dim=0, out=alloc((gate.shape[0] + up.shape[0], *gate.shape[1:]), gate.dtype)
                )
        out[hf_name(target.megatron, llayer, lexpert)] = fused
    if grouped_gemm and fam.moe:
        out = _group(out, len(mine))
    return out


def hf_full_to_local(
    full_sd: Mapping[str, torch.Tensor],
    *,
    cfg: ModelDims,
    tp: int,
    tp_rank: int,
    padded_vocab_size: int,
    ep: int = 1,
    ep_rank: int = 0,
) -> dict[str, torch.Tensor]:
    """Full HF tensors -> the local shard of TP rank `tp_rank` (vocab padded to `padded_vocab_size` first),
    with only EP rank `ep_rank`'s routed experts.

    Keys the family maps to None (rotary `inv_freq`) are dropped here. Chunks are views of the inputs (save
    them through a copy, e.g. `.contiguous().clone()`, or the whole source storage is written).
    """
    cfg.check_tp(tp)
    fam = cfg.fam
    mine = local_experts(cfg.num_experts, ep, ep_rank) if fam.moe else None
    if mine is not None:
        _check_ep(cfg, ep, ep_rank)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in full_sd.items():
        m = fam.match_hf(name)
        pat, target = m.pattern, m.target
        if target is None or (m.expert is not None and mine is not None and m.expert not in mine):
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


def merge_ep(per_ep: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Full HF tensors of each EP rank (its experts, and everything else) -> one dict. The tensors outside the
    experts must be the same on every EP rank (ConversionKeyError naming the first that differs)."""
    out = dict(per_ep[0])
    for e, sd in enumerate(per_ep[1:], start=1):
        for name, t in sd.items():
            have = out.get(name)
            if have is None:
                out[name] = t
            elif have.shape != t.shape or (not t.is_meta and not torch.equal(have, t)):
                raise ConversionKeyError(f"'{name}' differs between EP rank 0 and EP rank {e}")
    return out
