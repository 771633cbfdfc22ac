"""Where Megatron's DistributedOptimizer keeps each parameter in `distrib_optim.pt` (core_r0.8.0, the
Megatron that MindSpeed-LLM 2.1.0 installs), as pure arithmetic over (name, numel) lists.

The facts, read from Megatron-LM's source (no code copied):
- Order (`megatron/core/distributed/distributed_data_parallel.py`, `DistributedDataParallel.__init__`): one
  buffer per model chunk (and per (param dtype, grad dtype)), filled from `module.named_parameters()` of
  the trained parameters, i.e. in module registration order. For MindSpeed-LLM's GPT (local spec):
  `embedding.word_embeddings`, then per layer `input_layernorm`, `self_attention.linear_proj`,
  `self_attention.linear_qkv`, `q_layernorm`, `k_layernorm` (`transformer/attention.py`: the base class
  builds linear_proj before SelfAttention builds linear_qkv), `pre_mlp_layernorm`, `mlp.linear_fc1`,
  `mlp.linear_fc2` (`transformer/transformer_layer.py`, `mlp.py`), then `decoder.final_layernorm`, then
  `output_layer`; weight before bias (`tensor_parallel/layers.py`); PEFT's LoRA wrapper registers
  `base_layer` before `lora_A` before `lora_B`.
- Buffer (`param_and_grad_buffer.py`, `ParamAndGradBuffer.__init__`): the parameters are laid out in
  REVERSE of that order; with the distributed optimizer each parameter starts at a multiple of 64 elements
  (`_pad_start_of_param_if_needed`) and each bucket ends at a multiple of lcm(DP, 128)
  (`_pad_end_of_bucket_if_needed`). A bucket closes once it holds `bucket_size` elements; a tied
  embedding shared between the first and last pipeline stage (`shared_embedding`, set in
  `language_module.py` when PP > 1) gets a bucket of its own. A bucket's `numel_unpadded` runs from its
  start to its last parameter's end (the 64-element gaps inside count, the bucket's end padding does not).
- `bucket_size` (`DistributedDataParallel.__init__`, `training.py` `get_model`): None (one bucket)
  unless `--overlap-grad-reduce`; then `--ddp-bucket-size` or max(40M, 1M x DP); None on pipeline ranks
  > 0 and for model chunks after the first.
- File (`distrib_optimizer.py`, `get_parameter_state_dp_zero` / `load_parameter_state_from_dp_zero`):
  `{"buckets_coalesced": True, chunk: {(param dtype, grad dtype): {"param", "exp_avg", "exp_avg_sq",
  "numel_unpadded"}}}`; each fp32 world tensor is the concatenation, bucket after bucket, of the first
  `numel_unpadded` elements of the bucket's DP-gathered shards: a parameter sits at its buffer offset minus
  its bucket's start plus the unpadded sizes of the buckets before; gaps are zeros. The loader asserts
  that `numel_unpadded` equals its own buffer's and scatters the slices, so the DP size may change.

One deviation: core_r0.8.0 starts a shared embedding that follows other parameters at its 64-aligned
offset, but its bucket at the next multiple of lcm(DP, 128); when the two differ the parameter straddles
two buckets and Megatron's own optimizer set-up fails (fixed upstream later). Here it starts at its
bucket's start then (`Layout.straddle_fixed` says so).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

PARAM_ALIGN = 64  # `_pad_start_of_param_if_needed`: 128-byte aligned starts for >= 16-bit elements
BUCKET_ALIGN = 128  # `_pad_end_of_bucket_if_needed`: lcm(DP, 128), 256-byte aligned buckets
DEFAULT_BUCKET = 40_000_000  # DistributedDataParallel: max(40M, 1M x DP) with --overlap-grad-reduce

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
# the order TransformerLayer / SelfAttention / MLP register their sub-modules (local spec)
_LAYER_MODULES = (
    "input_layernorm",
    "self_attention.linear_proj",
    "self_attention.linear_qkv",
    "self_attention.q_layernorm",
    "self_attention.k_layernorm",
    "pre_mlp_layernorm",
    "mlp.linear_fc1",
    "mlp.linear_fc2",
)
_LEAVES = (  # inside one module: Megatron's weight then bias; PEFT's base layer, then A, then B
    "weight",
    "bias",
    "base_layer.weight",
    "base_layer.bias",
    "lora_A.default.weight",
    "lora_B.default.weight",
)
_TOP = {"embedding.word_embeddings.weight": 0, "decoder.final_layernorm.weight": 2, "output_layer.weight": 3}


# A MoE layer's MLP (core_r0.8.0 `transformer/moe/moe_layer.py` MoELayer.__init__, MindSpeed-LLM 2.1.0
# `core/transformer/moe/moe_layer.py` moe_layer_init_wrapper): the router, then the experts (SequentialMLP's
# local_experts in order, each fc1 then fc2; or GroupedMLP's weight1, weight2), then the shared experts.
_MOE = re.compile(
    r"^mlp\.(?:(router)\.weight|experts\.local_experts\.(\d+)\.linear_fc([12])\.weight"
    r"|experts\.weight([12])|shared_experts\.linear_fc([12])\.weight)$"
)
_MOE_SLOT = _LAYER_MODULES.index("mlp.linear_fc1")


def _moe_key(rest: str) -> tuple[int, ...] | None:
    m = _MOE.match(rest)
    if not m:
        return None
    router, expert, fc, grouped, shared = m.groups()
    if router:
        return (0,)
    if expert is not None:
        return (1, int(expert), int(fc))
    if grouped:
        return (1, 0, int(grouped))
    return (2, int(shared))


def registration_key(name: str) -> tuple[int, ...]:
    """Sort key: the position of a Megatron GPT parameter in `named_parameters()` of its model chunk."""
    if name in _TOP:
        return (_TOP[name],)
    m = _LAYER.match(name)
    if m:
        rest = m.group(2)
        moe = _moe_key(rest)
        if moe is not None:
            return (1, int(m.group(1)), _MOE_SLOT, *moe)
        for i, module in enumerate(_LAYER_MODULES):
            if rest.startswith(module + ".") and rest[len(module) + 1 :] in _LEAVES:
                return (1, int(m.group(1)), i, _LEAVES.index(rest[len(module) + 1 :]))
    raise ValueError(f"'{name}' is not a parameter of Megatron's GPT model (local spec) known here")


@dataclass(frozen=True)
class Bucket:
    start: int  # in the padded buffer
    end: int  # padded
    numel_unpadded: int


@dataclass
class Layout:
    """One model chunk's buffer: name -> (start, end) in the padded buffer, its buckets, and each
    parameter's start in the file's unpadded world tensors."""

    index: dict[str, tuple[int, int]]
    buckets: list[Bucket]
    world_start: dict[str, int] = field(default_factory=dict)
    straddle_fixed: bool = False

    @property
    def numel_unpadded(self) -> int:
        return sum(b.numel_unpadded for b in self.buckets)

    @property
    def numel(self) -> int:
        return self.buckets[-1].end if self.buckets else 0


def _pad(n: int, divisor: int) -> int:
    return math.ceil(n / divisor) * divisor


def build_layout(
    params: Sequence[tuple[str, int]],
    *,
    dp: int,
    bucket_size: int | None = None,
    shared_embedding: str | None = None,
) -> Layout:
    """`params`: (Megatron name, numel) of one chunk's trained parameters, in registration order.
    `shared_embedding`: the name that carries Megatron's `shared_embedding` flag on this rank, if any."""
    bucket_align = math.lcm(dp, BUCKET_ALIGN)
    index: dict[str, tuple[int, int]] = {}
    buckets: list[Bucket] = []
    bucket_start, start, in_bucket, fixed = 0, 0, 0, False

    def close(end: int) -> int:
        nonlocal bucket_start, in_bucket
        padded = _pad(end, bucket_align)
        buckets.append(Bucket(bucket_start, padded, end - bucket_start))
        bucket_start, in_bucket = padded, 0
        return padded

    for name, numel in reversed(params):
        start = _pad(start, PARAM_ALIGN)
        own = name == shared_embedding
        if own and in_bucket:
            padded = close(start)
            fixed = fixed or padded != start
            start = padded
        index[name] = (start, start + numel)
        in_bucket += 1
        end = start + numel
        if (bucket_size is not None and end - bucket_start >= bucket_size) or own:
            end = close(end)
        start = end
    if in_bucket:
        close(start)
    layout = Layout(index=index, buckets=buckets, straddle_fixed=fixed)
    layout.world_start = _world_starts(layout)
    return layout


def _world_starts(layout: Layout) -> dict[str, int]:
    """`get_parameter_state_dp_zero`: bucket b's first `numel_unpadded` elements follow those of the
    buckets before it in the world tensors."""
    out = {}
    offset = 0
    for bucket in layout.buckets:
        for name, (s, _) in layout.index.items():
            if bucket.start <= s < bucket.end:
                out[name] = s - bucket.start + offset
        offset += bucket.numel_unpadded
    return out


def to_world(tensors: dict[str, torch.Tensor], layout: Layout) -> torch.Tensor:
    """One chunk's tensors (by Megatron name) -> the fp32 world tensor of `distrib_optim.pt` (gaps zero)."""
    world = torch.zeros(layout.numel_unpadded, dtype=torch.float32)
    for name, start in layout.world_start.items():
        t = tensors[name].reshape(-1)
        world[start : start + t.numel()] = t
    return world


def from_world(world: torch.Tensor, layout: Layout, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """The inverse of `to_world`: views of `world` shaped like each parameter."""
    out = {}
    for name, start in layout.world_start.items():
        shape = shapes[name]
        out[name] = world[start : start + math.prod(shape)].view(shape)
    return out


def bucket_size_for(*, overlap_grad_reduce: bool, dp: int, pp_rank: int, chunk: int) -> int | None:
    """Megatron's bucket size for one model chunk's buffer (see the module docstring)."""
    if not overlap_grad_reduce or pp_rank > 0 or chunk > 0:
        return None
    return max(DEFAULT_BUCKET, 1_000_000 * dp)
