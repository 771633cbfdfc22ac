"""Pure tensor maths of HF <-> Megatron weight conversion: no names, no files, no parallel state.

Shapes use `nq` = attention heads, `ng` = query groups (KV heads), `d` = head dim, `h` = hidden size.
Every function checks that it neither loses nor invents elements (numel conservation) and raises
`ValueError` naming the offending shape otherwise. Functions that cut tensors return tensors that own
their memory (so `torch.save` of a chunk never drags the whole source storage along).
"""

from __future__ import annotations

import torch

__all__ = [
    "chunk",
    "group_experts",
    "merge_gate_up",
    "merge_qkv",
    "pad_vocab",
    "split_gate_up",
    "split_qkv",
    "split_rows",
    "ungroup_experts",
    "unpad_vocab",
]


def cat(parts: list[torch.Tensor] | tuple[torch.Tensor, ...], dim: int = 0) -> torch.Tensor:
    """`torch.cat`, except on the meta device (verification reads names, shapes and dtypes only): there the
    result is made from the shapes. torch's own meta `cat` is a Python reference that imports torch._dynamo
    on first use, which costs a fresh process over a second."""
    if not parts or not parts[0].is_meta:
        return torch.cat(parts, dim=dim)
    first = parts[0]
    d = dim % first.dim()
    for p in parts[1:]:
        if (
            p.dtype != first.dtype
            or p.dim() != first.dim()
            or any(a != b for i, (a, b) in enumerate(zip(p.shape, first.shape)) if i != d)
        ):
            raise ValueError(
                f"cat: {tuple(p.shape)} {p.dtype} does not fit {tuple(first.shape)} {first.dtype}"
            )
    shape = list(first.shape)
    shape[d] = sum(p.shape[d] for p in parts)
    return torch.empty(shape, dtype=first.dtype, device="meta")


def _check_numel(what: str, before: int, after: int) -> None:
    if before != after:
        raise ValueError(f"{what}: element count changed from {before} to {after}")


def _check_heads(num_heads: int, num_kv_heads: int, head_dim: int) -> int:
    if num_kv_heads <= 0 or num_heads <= 0 or head_dim <= 0:
        raise ValueError(
            f"heads ({num_heads}), kv heads ({num_kv_heads}) and head dim ({head_dim}) must be > 0"
        )
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads ({num_heads}) is not a multiple of num_kv_heads ({num_kv_heads})")
    return num_heads // num_kv_heads


def merge_qkv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Interleave HF q/k/v projections into Megatron's grouped `linear_qkv` layout.

    Shapes (weights; biases are the same without the trailing `h`):
        q [nq*d, h], k [ng*d, h], v [ng*d, h]  ->  qkv [(nq/ng + 2) * ng * d, h]
    Rows are grouped per query group g: its nq/ng query heads, then its k head, then its v head.
    The counts may be the per-rank ones (nq/TP, ng/TP): merging row chunk r of q, k, v gives row chunk r of
    the full merged tensor. `out` (contiguous, of the result's shape and dtype) receives the result instead of
    a new tensor.
    """
    per_group = _check_heads(num_heads, num_kv_heads, head_dim)
    if q.shape[0] != num_heads * head_dim or k.shape[0] != num_kv_heads * head_dim or k.shape != v.shape:
        raise ValueError(
            f"merge_qkv: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit "
            f"num_heads={num_heads}, num_kv_heads={num_kv_heads}, head_dim={head_dim}"
        )
    if q.shape[1:] != k.shape[1:]:
        raise ValueError(f"merge_qkv: q {tuple(q.shape)} and k {tuple(k.shape)} differ past dim 0")
    tail = tuple(q.shape[1:])
    qg = q.reshape(num_kv_heads, per_group * head_dim, *tail)
    kg = k.reshape(num_kv_heads, head_dim, *tail)
    vg = v.reshape(num_kv_heads, head_dim, *tail)
    if out is None:
        qkv = cat([qg, kg, vg], dim=1).reshape(-1, *tail)
    else:
        torch.cat([qg, kg, vg], dim=1, out=out.view(num_kv_heads, (per_group + 2) * head_dim, *tail))
        qkv = out
    _check_numel("merge_qkv", q.numel() + k.numel() + v.numel(), qkv.numel())
    return qkv


def split_qkv(
    qkv: torch.Tensor, *, num_heads: int, num_kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of `merge_qkv`: qkv [(nq/ng + 2)*ng*d, ...] -> q [nq*d, ...], k [ng*d, ...], v [ng*d, ...]."""
    per_group = _check_heads(num_heads, num_kv_heads, head_dim)
    rows = (per_group + 2) * num_kv_heads * head_dim
    if qkv.shape[0] != rows:
        raise ValueError(
            f"split_qkv: qkv has {qkv.shape[0]} rows, expected (nq/ng + 2) * ng * d = {rows} "
            f"for num_heads={num_heads}, num_kv_heads={num_kv_heads}, head_dim={head_dim}"
        )
    tail = tuple(qkv.shape[1:])
    grouped = qkv.reshape(num_kv_heads, (per_group + 2) * head_dim, *tail)
    q, k, v = torch.split(grouped, [per_group * head_dim, head_dim, head_dim], dim=1)
    q, k, v = (x.reshape(-1, *tail).clone(memory_format=torch.contiguous_format) for x in (q, k, v))
    _check_numel("split_qkv", qkv.numel(), q.numel() + k.numel() + v.numel())
    return q, k, v


def chunk(t: torch.Tensor, n: int, i: int, dim: int = 0, *, own: bool = True) -> torch.Tensor:
    """Chunk `i` of `n` equal chunks of `t` along `dim`, as a tensor owning its memory (`t` itself if n == 1).

    [.., s, ..] -> [.., s/n, ..]. `s` must be divisible by `n` (Megatron never shards unevenly).
    `own=False` returns a view instead (for callers that copy anyway, e.g. before saving).
    """
    if n <= 0 or not 0 <= i < n:
        raise ValueError(f"chunk: index {i} is outside 0..{n - 1}")
    size = t.shape[dim]
    if size % n:
        raise ValueError(f"chunk: dim {dim} of shape {tuple(t.shape)} ({size}) is not divisible by {n}")
    if n == 1:
        return t
    step = size // n
    view = t.narrow(dim, i * step, step)
    return view.clone() if own else view


def merge_gate_up(gate: torch.Tensor, up: torch.Tensor, *, tp: int = 1, rank: int = 0) -> torch.Tensor:
    """Megatron `linear_fc1` of TP rank `rank`: cat(gate.chunk(tp)[rank], up.chunk(tp)[rank]).

    gate [ffn, h], up [ffn, h] -> fc1 shard [2*ffn/tp, h]. With tp=1 this is the full fc1.
    """
    if gate.shape != up.shape:
        raise ValueError(f"merge_gate_up: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    g, u = (chunk(gate, tp, rank), chunk(up, tp, rank)) if tp > 1 else (gate, up)
    fc1 = cat([g, u], dim=0)
    _check_numel("merge_gate_up", 2 * gate.numel() // tp, fc1.numel())
    return fc1


def split_gate_up(fc1_shard: torch.Tensor, *, tp: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of `merge_gate_up` on one rank: fc1 shard [2*ffn/tp, h] -> (gate_r, up_r), each [ffn/tp, h].

    Both halves own their memory (safetensors refuses tensors that share storage).

    `tp` is accepted for symmetry with `merge_gate_up`; each rank's shard is its own [gate_r; up_r].
    """
    del tp  # every shard splits in two halves, whatever the TP degree
    rows = fc1_shard.shape[0]
    if rows % 2:
        raise ValueError(f"split_gate_up: fc1 shard {tuple(fc1_shard.shape)} has an odd number of rows")
    gate, up = (x.clone(memory_format=torch.contiguous_format) for x in fc1_shard.split(rows // 2, dim=0))
    _check_numel("split_gate_up", fc1_shard.numel(), gate.numel() + up.numel())
    return gate, up


def pad_vocab(t: torch.Tensor, padded_rows: int | None = None, *, padded: int | None = None) -> torch.Tensor:
    """Append zero rows: [vocab, h] -> [padded_rows, h] (`padded` is an alias of `padded_rows`)."""
    target = padded_rows if padded_rows is not None else padded
    if target is None:
        raise ValueError("pad_vocab: give the padded row count")
    rows = t.shape[0]
    if target < rows:
        raise ValueError(f"pad_vocab: cannot pad {rows} rows down to {target}")
    if target == rows:
        return t
    out = torch.zeros((target, *t.shape[1:]), dtype=t.dtype, device=t.device)
    out[:rows] = t
    _check_numel("pad_vocab", t.numel() + (target - rows) * (t.numel() // max(rows, 1)), out.numel())
    return out


def unpad_vocab(t: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Drop padding rows: [padded, h] -> [vocab_size, h] (a tensor owning its memory)."""
    if vocab_size > t.shape[0]:
        raise ValueError(
            f"unpad_vocab: tensor has {t.shape[0]} rows, fewer than the vocabulary ({vocab_size})"
        )
    return t if vocab_size == t.shape[0] else t[:vocab_size].clone()


def split_rows(t: torch.Tensor, rows: tuple[int, ...] | list[int]) -> list[torch.Tensor]:
    """Inverse of a row-wise `cat`: [sum(rows), ...] -> one tensor of `rows[i]` rows each, owning its memory
    (MLA's `linear_qkv` back into q_proj / q_a_proj and kv_a_proj_with_mqa)."""
    if t.shape[0] != sum(rows):
        want = " + ".join(map(str, rows))
        raise ValueError(f"split_rows: {tuple(t.shape)} has {t.shape[0]} rows, expected {want}")
    parts = [x.clone(memory_format=torch.contiguous_format) for x in torch.split(t, list(rows), dim=0)]
    _check_numel("split_rows", t.numel(), sum(p.numel() for p in parts))
    return parts


def group_experts(
    fc1: list[torch.Tensor] | tuple[torch.Tensor, ...], fc2: list[torch.Tensor] | tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One EP rank's experts in Megatron's grouped-GEMM layout (`--moe-grouped-gemm`).

    fc1[j] [2f, h] (linear_fc1 of local expert j, this TP rank's [gate_r; up_r]), fc2[j] [h, f] ->
    weight1 [h, E*2f], weight2 [E*f, h]: the experts' transposes stacked expert-major and viewed as 2-D.
    Megatron's GroupedMLP reads them back with `weight1.view(E, h, -1)` and `weight2.view(E, -1, h)`
    (core_r0.8.0 megatron/core/transformer/moe/experts.py `GroupedMLP.forward`); MindSpeed-LLM's
    convert_hf2mg.py builds the same layout from the HF experts (`gemm_fc1` / `gemm_fc2`).
    """
    if not fc1 or len(fc1) != len(fc2):
        raise ValueError(f"group_experts: {len(fc1)} fc1 and {len(fc2)} fc2 tensors")
    hidden = fc1[0].shape[1]
    w1 = cat([w.t().unsqueeze(0) for w in fc1], dim=0)  # [E, h, 2f]
    w2 = cat([w.t().unsqueeze(0) for w in fc2], dim=0)  # [E, f, h]
    w1, w2 = w1.view(hidden, -1), w2.view(-1, hidden)
    _check_numel("group_experts", sum(w.numel() for w in (*fc1, *fc2)), w1.numel() + w2.numel())
    return w1, w2


def ungroup_experts(
    weight1: torch.Tensor, weight2: torch.Tensor, num_experts: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Inverse of `group_experts`: weight1 [h, E*2f], weight2 [E*f, h] -> E fc1 [2f, h] and E fc2 [h, f]."""
    hidden = weight1.shape[0]
    if num_experts < 1 or weight1.shape[1] % num_experts or weight2.shape[0] % num_experts:
        raise ValueError(
            f"ungroup_experts: weight1 {tuple(weight1.shape)} / weight2 {tuple(weight2.shape)} do not hold "
            f"{num_experts} experts"
        )
    if weight2.shape[1] != hidden:
        raise ValueError(f"ungroup_experts: weight2 {tuple(weight2.shape)} is not [E*f, {hidden}]")
    w1 = weight1.reshape(num_experts, hidden, -1)
    w2 = weight2.reshape(num_experts, -1, hidden)
    fc1 = [w1[j].t().clone(memory_format=torch.contiguous_format) for j in range(num_experts)]
    fc2 = [w2[j].t().clone(memory_format=torch.contiguous_format) for j in range(num_experts)]
    _check_numel("ungroup_experts", weight1.numel() + weight2.numel(), sum(w.numel() for w in (*fc1, *fc2)))
    return fc1, fc2
