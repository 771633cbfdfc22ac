"""LoRA on the trainer's stage model, as MindSpeed-LLM applies PEFT to Megatron's linears.

`--lora-target-modules` names Megatron modules (`linear_qkv`, `linear_proj`, `linear_fc1`, `linear_fc2`);
each becomes one adapter per decoder layer (`model.layers.{i}.lora.{target}`), with MindSpeed-LLM's shapes
(see `engine.convert.lora` for the sources):

- column targets (qkv = q/k/v, fc1 = gate/up): one `lora_A` [r, hidden] shared by the projections
  (replicated over TP) and one `lora_B` per projection [rows, r], row-sharded over TP like its base
  (`ColwiseParallel`), so the fused Megatron `lora_B` is exactly Megatron's ColumnParallelLinear B;
- row targets (proj = o, fc2 = down): `lora_A` [r, in] column-sharded (`RowwiseParallel`: its output is
  all-reduced) and `lora_B` [out, r] replicated.

Each HF projection becomes `LoraLinear`: `base_layer(x) + lora_B(lora_A(x)) * lora_alpha / r` (PEFT's
forward; no dropout, as MindSpeed-LLM sets `lora_dropout=0.0`). Every base parameter is frozen (PEFT's
`bias="none"`): only the adapters train, so the optimizer, the gradient all-reduce and the gradient norm
see only them. Initialisation: B = 0 and A ~ kaiming_uniform(a=sqrt(5)) of the full [r, in] matrix from a
generator seeded by (seed, layer, target), then sharded; peft initialises a RowParallel A per TP shard
(bound 1/sqrt(in/TP)), so under TP > 1 the starting A differs from MindSpeed-LLM's (B = 0 either way: the
first step's model is the base model).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from ascendfactory.engine.convert.lora import COLUMN, TARGET_MODULES, TARGETS, scaling
from ascendfactory.engine.train.model import StageModel, local_tensor


class LoraAdapter(nn.Module):
    """One target module's adapter on one layer: `lora_A` and one `lora_B` per HF projection."""

    def __init__(self, in_features: int, outs: dict[str, int], r: int, scale: float):
        super().__init__()
        self.scaling = scale
        with torch.device("meta"):
            self.lora_A = nn.Linear(in_features, r, bias=False)
            self.lora_B = nn.ModuleDict({p: nn.Linear(r, n, bias=False) for p, n in outs.items()})

    def delta(self, x: torch.Tensor, projection: str) -> torch.Tensor:
        return self.lora_B[projection](self.lora_A(x)) * self.scaling


class LoraLinear(nn.Module):
    """An HF projection with its adapter added (PEFT's `LoraLayer`: the base layer is `base_layer`)."""

    def __init__(self, base_layer: nn.Module, adapter: LoraAdapter, projection: str):
        super().__init__()
        self.base_layer = base_layer
        self._adapter = (adapter,)  # not a child: the layer's `lora` ModuleDict owns it (shared by q/k/v)
        self.projection = projection

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self._adapter[0].delta(x, self.projection)


def _features(cfg: Any) -> dict[str, tuple[int, dict[str, int]]]:
    """target -> (in features, {projection: out features}) of the full (TP 1) matrices."""
    hidden, ffn = cfg.hidden_size, cfg.intermediate_size
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    q, kv = heads * head_dim, (getattr(cfg, "num_key_value_heads", None) or heads) * head_dim
    return {
        "linear_qkv": (hidden, {"q_proj": q, "k_proj": kv, "v_proj": kv}),
        "linear_proj": (q, {"o_proj": hidden}),
        "linear_fc1": (hidden, {"gate_proj": ffn, "up_proj": ffn}),
        "linear_fc2": (ffn, {"down_proj": hidden}),
    }


def apply_lora(
    model: StageModel,
    cfg: Any,
    *,
    targets: list[str],
    r: int,
    alpha: float,
    seed: int,
    tp_mesh: Any,
    tp: int,
    tp_rank: int,
    device: torch.device,
) -> None:
    """Freeze `model`, add the adapters of `targets` to each of its layers, shard and initialise them."""
    for p in model.parameters():
        p.requires_grad_(False)
    features, scale = _features(cfg), scaling(r, alpha)
    for layer in model.model.layers.values():
        adapters = nn.ModuleDict()
        for target in targets:
            spec = TARGETS[target]
            in_features, outs = features[target]
            adapter = adapters[target] = LoraAdapter(in_features, outs, r, scale)
            container = getattr(layer, spec.hf_module)
            for proj in spec.projections:
                setattr(container, proj, LoraLinear(getattr(container, proj), adapter, proj))
        adapters.to_empty(device=device)
        layer.lora = adapters
    if tp > 1:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan: dict[str, Any] = {}
        for target in targets:
            spec, base = TARGETS[target], f"model.layers.*.lora.{target}."
            if spec.parallel == COLUMN:
                plan.update({base + f"lora_B.{p}": ColwiseParallel() for p in spec.projections})
            else:
                plan[base + "lora_A"] = RowwiseParallel()
        parallelize_module(model, tp_mesh, plan)
    _init(model, targets=targets, seed=seed, tp=tp, tp_rank=tp_rank)


def _init(model: StageModel, *, targets: list[str], seed: int, tp: int, tp_rank: int) -> None:
    with torch.no_grad():
        for index, layer in model.model.layers.items():
            for target in targets:
                adapter = layer.lora[target]
                key = [seed, int(index), TARGET_MODULES.index(target), 0x10A]  # whatever the other targets
                gen_seed = int(np.random.SeedSequence(key).generate_state(1)[0])
                gen = torch.Generator().manual_seed(gen_seed)
                a = torch.empty(tuple(adapter.lora_A.weight.shape))  # a DTensor's shape is the full one
                nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=gen)
                if TARGETS[target].parallel != COLUMN and tp > 1:
                    a = a.chunk(tp, dim=1)[tp_rank]
                local_tensor(adapter.lora_A.weight).copy_(a)
                for b in adapter.lora_B.values():
                    local_tensor(b.weight).zero_()
                for p in adapter.parameters():
                    p.requires_grad_(True)


def is_adapter(name: str) -> bool:
    """A parameter name of an adapter (`model.layers.{i}.lora.{target}.lora_A/B...`)."""
    return ".lora." in name


def checkpoint_name(param_name: str) -> str:
    """The HF name a parameter has in a checkpoint: a wrapped projection's `base_layer` is the projection."""
    return param_name.replace(".base_layer.", ".")
