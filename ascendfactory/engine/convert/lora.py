"""LoRA adapters in MindSpeed-LLM's Megatron layout: key names, the trainer's local tensors, and the merge.

Facts (read from the sources, not copied):

- MindSpeed-LLM 2.1.0 `mindspeed_llm/training/arguments.py` `_add_lora_args` (master:
  `features_manager/finetune/lora.py`): `--lora-target-modules` (nargs +, default [] = LoRA off),
  `--lora-r` (int, 16), `--lora-alpha` (int, 32), `--lora-load` (a LoRA checkpoint folder),
  `--lora-ckpt-filter` (save only the LoRA keys), `--lora-fusion` (CCLoRA: the same maths, overlapped);
  the mcore target modules are `linear_qkv`, `linear_proj`, `linear_fc1`, `linear_fc2`
  (`docs/pytorch/solutions/finetune/lora_finetune.md`).
- `mindspeed_llm/training/training.py` wraps the Megatron model with PEFT (`LoraConfig(r, lora_alpha,
  target_modules, lora_dropout=0.0, bias="none", megatron_core="megatron.core")`); peft 0.7.1
  `tuners/lora/tp_layer.py` `LoraParallelLinear`: on a ColumnParallelLinear base (qkv, fc1) `lora_A` is a
  plain Linear (replicated over TP) and `lora_B` a ColumnParallelLinear (rows split like the base); on a
  RowParallelLinear base (proj, fc2) `lora_A` is a RowParallelLinear (columns split) and `lora_B` a plain
  Linear. Output = base(x) + lora_B(lora_A(x)) * lora_alpha / r; A ~ kaiming_uniform(a=sqrt 5), B = 0.
- So a saved shard (`model` of `model_optim_rng.pt`) names a target `X` (e.g.
  `decoder.layers.0.self_attention.linear_qkv`) as `X.base_layer.weight` / `X.base_layer.bias`,
  `X.lora_A.default.weight` [r, in(/TP for proj, fc2)], `X.lora_B.default.weight` [out(/TP for qkv, fc1),
  r]; `--lora-ckpt-filter` keeps only keys containing `lora` (`tasks/posttrain/lora/utils.py`
  `filter_lora_keys`). Loading renames a base checkpoint's `X.weight`/`X.bias` of target modules to
  `X.base_layer.*` and overlays the `--lora-load` checkpoint (`training/checkpointing.py`).
- Merge (`convert_ckpt_v2.py` -> `tasks/checkpoint/convert_mg2hf.py` `_merge_lora`, master), per TP shard:
  `W = W + (lora_alpha / lora_r) * (B.float() @ A.float()).to(W.dtype)`. With `--lora-load` every tensor
  of the LoRA checkpoint overrides the base shard (`X.base_layer.weight` read as `X.weight`,
  "independent"); without it, base and adapters come from the one checkpoint ("unified"). Per-shard
  merging is exact because `B_r @ A` is row chunk r of `B @ A` (column targets) and `B @ A_r` column
  chunk r (row targets). Deviation: v2 drops `X.base_layer.bias` in the unified case; it is kept here
  (the bias is frozen, so it equals the base's).

Trainer-side ("local") names: the adapter of target `T` on global layer `i` is
`model.layers.{i}.lora.{T}.lora_A.weight` and `model.layers.{i}.lora.{T}.lora_B.{proj}.weight` with one
`lora_B` per HF projection (`q_proj`/`k_proj`/`v_proj`, `gate_proj`/`up_proj`, `o_proj`, `down_proj`),
each holding that projection's rows, so Megatron's fused `lora_B` is built exactly like the fused weight.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascendfactory.errors import ConfigError, ConversionKeyError, Problem

COLUMN, ROW = "column", "row"


@dataclass(frozen=True)
class LoraTarget:
    """A Megatron LoRA target module and the HF projections it covers."""

    megatron: str  # path under `decoder.layers.N.`
    hf_module: str  # path under `model.layers.N.`
    projections: tuple[str, ...]
    parallel: str  # COLUMN (base rows split over TP) or ROW (base columns split)


TARGETS: dict[str, LoraTarget] = {
    "linear_qkv": LoraTarget(
        "self_attention.linear_qkv", "self_attn", ("q_proj", "k_proj", "v_proj"), COLUMN
    ),
    "linear_proj": LoraTarget("self_attention.linear_proj", "self_attn", ("o_proj",), ROW),
    "linear_fc1": LoraTarget("mlp.linear_fc1", "mlp", ("gate_proj", "up_proj"), COLUMN),
    "linear_fc2": LoraTarget("mlp.linear_fc2", "mlp", ("down_proj",), ROW),
}
TARGET_MODULES = tuple(TARGETS)
A_SUFFIX, B_SUFFIX = ".lora_A.default.weight", ".lora_B.default.weight"
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_LOCAL = re.compile(r"^model\.layers\.(\d+)\.lora\.(\w+)\.lora_(A|B)(?:\.(\w+))?\.weight$")


def check_targets(targets: Sequence[str], *, key: str = "--lora-target-modules") -> list[Problem]:
    """Problems for target names that are not MindSpeed-LLM's mcore LoRA modules."""
    bad = [t for t in targets if t not in TARGETS]
    if not bad:
        return []
    return [
        Problem(
            key=key,
            message=f"{', '.join(bad)}: not a LoRA target of the dense mcore models",
            fix=f"use some of: {' '.join(TARGET_MODULES)}",
            source="command line",
        )
    ]


def scaling(r: int, alpha: float) -> float:
    """PEFT's `lora_alpha / r` (no rsLoRA: MindSpeed-LLM does not set it)."""
    return alpha / r


def is_lora_key(name: str) -> bool:
    """What `--lora-ckpt-filter` keeps (MindSpeed-LLM: 'lora' in the key, any case)."""
    return "lora" in name.lower()


def filter_lora(model: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model.items() if is_lora_key(k)}


def adapter_targets(model: Mapping[str, Any]) -> set[str]:
    """Target module names that carry adapters in a Megatron shard (`linear_qkv`, ...)."""
    found = set()
    for name in model:
        if name.endswith((A_SUFFIX, B_SUFFIX)):
            found.add(name.rsplit(".lora_", 1)[0].rsplit(".", 1)[-1])
    return found


def _target_of(megatron_name: str, targets: Sequence[str]) -> str | None:
    m = _LAYER.match(megatron_name)
    if not m:
        return None
    rest = m.group(2)
    for t in targets:
        path = TARGETS[t].megatron
        if rest in (path + ".weight", path + ".bias"):
            return t
    return None


def to_peft_layout(model: Mapping[str, Any], targets: Sequence[str]) -> dict[str, Any]:
    """Rename target modules' `X.weight`/`X.bias` to `X.base_layer.*` (the PEFT-wrapped state dict)."""
    out = {}
    for name, t in model.items():
        if _target_of(name, targets) is not None:
            stem, leaf = name.rsplit(".", 1)
            name = f"{stem}.base_layer.{leaf}"
        out[name] = t
    return out


def with_adapters(model: Mapping[str, Any], adapters: Mapping[str, Any]) -> dict[str, Any]:
    """`model` (PEFT layout) with each module's adapters after its `base_layer` tensors (PEFT's order)."""
    by_stem: dict[str, list[str]] = {}
    for name in adapters:
        by_stem.setdefault(name.rsplit(".lora_", 1)[0], []).append(name)
    out: dict[str, Any] = {}
    names = list(model)
    for i, name in enumerate(names):
        out[name] = model[name]
        stem = name.split(".base_layer.", 1)[0] if ".base_layer." in name else None
        following = names[i + 1] if i + 1 < len(names) else ""
        if stem is not None and not following.startswith(stem + ".base_layer."):
            for key in sorted(by_stem.pop(stem, [])):  # lora_A before lora_B
                out[key] = adapters[key]
    for rest in by_stem.values():
        raise ConversionKeyError(f"LoRA adapter without its base module in the shard: {rest[0]}")
    return out


def from_peft_layout(model: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(base shard with `X.base_layer.*` read as `X.*`, the adapter tensors `*.lora_A/B.default.weight`)."""
    base, adapters = {}, {}
    for name, t in model.items():
        if name.endswith((A_SUFFIX, B_SUFFIX)):
            adapters[name] = t
        elif is_lora_key(name):  # e.g. an adapter's `_extra_state`
            continue
        else:
            base[name.replace(".base_layer.", ".")] = t
    return base, adapters


def merge(
    model: Mapping[str, Any], *, r: int, alpha: float, override: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One shard with its adapters folded in: `W + (alpha / r) * (B.float() @ A.float()).to(W.dtype)`.

    `override`: the same shard of the `--lora-load` checkpoint; every tensor of it replaces the base's
    ("independent"). Without it the adapters come from `model` itself ("unified"). Adapter keys and any
    `base_layer` copies are gone from the result. ConversionKeyError when an adapter lacks its A, B or
    base weight."""
    import torch

    merged = dict(model)
    if override is not None:
        merged.update(override)
    base, adapters = from_peft_layout(merged)
    stems = sorted({k[: -len(A_SUFFIX)] for k in adapters if k.endswith(A_SUFFIX)})
    stems_b = sorted({k[: -len(B_SUFFIX)] for k in adapters if k.endswith(B_SUFFIX)})
    if stems != stems_b:
        odd = sorted(set(stems) ^ set(stems_b))
        raise ConversionKeyError(f"LoRA adapter without its lora_A or lora_B: {', '.join(odd[:4])}")
    s = scaling(r, alpha)
    for stem in stems:
        w = base.get(stem + ".weight")
        if w is None:
            raise ConversionKeyError(f"LoRA adapter '{stem}' has no base weight ({stem}.weight)")
        a, b = adapters[stem + A_SUFFIX], adapters[stem + B_SUFFIX]
        if b.shape[1] != a.shape[0] or (b.shape[0], a.shape[1]) != tuple(w.shape):
            raise ConversionKeyError(
                f"LoRA '{stem}': B {tuple(b.shape)} @ A {tuple(a.shape)} does not fit the weight "
                f"{tuple(w.shape)} (check --lora-r and that --lora-load has the base's TP/PP layout)"
            )
        if a.shape[0] != r:
            raise ConfigError(
                Problem(
                    key="--lora-r",
                    message=f"{r}, but the adapters have rank {a.shape[0]} ({stem})",
                    fix=f"use the training run's --lora-r {a.shape[0]} (and its --lora-alpha)",
                    source="command line",
                )
            )
        base[stem + ".weight"] = w + s * torch.matmul(b.float(), a.float()).to(w.dtype)
    return base


# ------------------------------------------------------------------ the trainer's local tensors
def local_name(layer: int, target: str, matrix: str, projection: str | None = None) -> str:
    """`model.layers.{layer}.lora.{target}.lora_A.weight` / `...lora_B.{projection}.weight`."""
    if matrix == "A":
        return f"model.layers.{layer}.lora.{target}.lora_A.weight"
    return f"model.layers.{layer}.lora.{target}.lora_B.{projection}.weight"


def local_to_megatron(
    local: Mapping[str, Any], *, cfg: Any, tp: int, tp_rank: int, layer_offset: int
) -> dict[str, Any]:
    """Trainer-local adapter tensors of one (tp, pp) rank -> its Megatron `lora_A/B.default.weight` keys."""
    from ascendfactory.engine.convert.shard_map import hf_local_to_megatron

    out: dict[str, Any] = {}
    pseudo: dict[str, Any] = {}  # each lora_B as its projection's weight: fused like the base weight
    where: dict[str, str] = {}
    for name, t in local.items():
        m = _LOCAL.match(name)
        if not m:
            raise ConversionKeyError(f"'{name}' is not a LoRA adapter tensor of the trainer")
        layer, target, matrix, proj = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        spec = TARGETS[target]
        prefix = f"decoder.layers.{layer - layer_offset}.{spec.megatron}"
        if matrix == "A":
            out[prefix + A_SUFFIX] = t
        else:
            hf = f"model.layers.{layer}.{spec.hf_module}.{proj}.weight"
            pseudo[hf] = t
            where[f"{prefix}.weight"] = prefix + B_SUFFIX
    if pseudo:
        fused = hf_local_to_megatron(pseudo, cfg=cfg, tp=tp, tp_rank=tp_rank, layer_offset=layer_offset)
        for name, t in fused.items():
            out[where[name]] = t
    return out


def megatron_to_local(
    adapters: Mapping[str, Any], *, cfg: Any, tp: int, tp_rank: int, layer_offset: int
) -> dict[str, Any]:
    """Inverse of `local_to_megatron` (fused `lora_B` split back per projection)."""
    from ascendfactory.engine.convert.shard_map import megatron_to_hf_local

    out: dict[str, Any] = {}
    for name, t in adapters.items():
        m = _LAYER.match(name)
        stem = name[: -len(A_SUFFIX)] if name.endswith(A_SUFFIX) else name[: -len(B_SUFFIX)]
        target = next(
            (k for k, v in TARGETS.items() if m and stem == f"decoder.layers.{m.group(1)}.{v.megatron}"), None
        )
        if m is None or target is None or not name.endswith((A_SUFFIX, B_SUFFIX)):
            raise ConversionKeyError(f"'{name}' is not a LoRA adapter of {', '.join(TARGET_MODULES)}")
        layer = int(m.group(1)) + layer_offset
        if name.endswith(A_SUFFIX):
            out[local_name(layer, target, "A")] = t
            continue
        hf = megatron_to_hf_local(
            {stem + ".weight": t}, cfg=cfg, tp=tp, tp_rank=tp_rank, layer_offset=layer_offset
        )
        for hf_name, piece in hf.items():
            proj = hf_name.rsplit(".", 2)[-2]
            out[local_name(layer, target, "B", proj)] = piece
    return out
