"""The MoE layer's local tensors <-> the HF per-expert names the checkpoint bridge maps (`shard_map`).

In memory a layer holds this rank's experts as two 3-D tensors (`mlp.experts.gate_up_proj` [El, 2f/TP, h],
each expert's `[gate_r; up_r]`, and `mlp.experts.down_proj` [El, h, f/TP]); the bridge speaks the names
transformers writes to disk, one tensor per expert with the GLOBAL expert number G
(`model.layers.L.mlp.experts.G.{gate_proj,up_proj,down_proj}.weight`, TP chunks: gate/up rows, down
columns). Splitting returns views; stacking copies.
"""

from __future__ import annotations

import re

import torch

_GATE_UP = ".mlp.experts.gate_up_proj"
_DOWN = ".mlp.experts.down_proj"
_PER_EXPERT = re.compile(r"^(.*\.mlp\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def is_expert_tensor(name: str) -> bool:
    """A routed expert's tensor (3-D in memory, or one HF per-expert tensor)."""
    return name.endswith((_GATE_UP, _DOWN)) or bool(_PER_EXPERT.match(name))


def split_experts(local: dict[str, torch.Tensor], *, first_expert: int) -> dict[str, torch.Tensor]:
    """3-D expert tensors -> per-expert HF names (global numbers from `first_expert`); others unchanged."""
    out: dict[str, torch.Tensor] = {}
    for name, t in local.items():
        if name.endswith(_GATE_UP):
            prefix, half = name[: -len("gate_up_proj")], t.shape[1] // 2
            for i in range(t.shape[0]):
                out[f"{prefix}{first_expert + i}.gate_proj.weight"] = t[i, :half]
                out[f"{prefix}{first_expert + i}.up_proj.weight"] = t[i, half:]
        elif name.endswith(_DOWN):
            prefix = name[: -len("down_proj")]
            for i in range(t.shape[0]):
                out[f"{prefix}{first_expert + i}.down_proj.weight"] = t[i]
        else:
            out[name] = t
    return out


def stack_experts(
    hf: dict[str, torch.Tensor], *, first_expert: int, num_local: int
) -> dict[str, torch.Tensor]:
    """Inverse of `split_experts`: per-expert HF tensors of experts first_expert .. + num_local -> the 3-D
    tensors; an expert outside that range, or a missing one, is a KeyError naming it."""
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[tuple[int, str], torch.Tensor]] = {}
    for name, t in hf.items():
        m = _PER_EXPERT.match(name)
        if not m:
            out[name] = t
            continue
        prefix, number, kind = m.group(1), int(m.group(2)), m.group(3)
        if not first_expert <= number < first_expert + num_local:
            last = first_expert + num_local - 1
            raise KeyError(f"{name}: expert {number} is not one of this rank's ({first_expert}..{last})")
        experts.setdefault(prefix, {})[(number - first_expert, kind)] = t
    for prefix, parts in experts.items():
        missing = [
            f"{prefix}{first_expert + i}.{k}.weight"
            for i in range(num_local)
            for k in ("gate_proj", "up_proj", "down_proj")
            if (i, k) not in parts
        ]
        if missing:
            raise KeyError(f"missing expert tensors: {', '.join(missing[:4])}")
        out[prefix + "gate_up_proj"] = torch.stack(
            [torch.cat([parts[(i, "gate_proj")], parts[(i, "up_proj")]]) for i in range(num_local)]
        )
        out[prefix + "down_proj"] = torch.stack([parts[(i, "down_proj")] for i in range(num_local)])
    return out
