"""Facts about an HF model directory that validation needs, read without torch or transformers.

- `config.json`: `max_position_embeddings`, `model_type`, `rope_scaling`;
- module names: from the weight names in the safetensors headers (`model.safetensors`, or every shard
  of `model.safetensors.index.json`): the module that owns `...layers.0.self_attn.q_proj.weight` is
  `q_proj`, which is what `lora_target` names.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field


@dataclass
class ModelFacts:
    path: str
    config: dict = field(default_factory=dict)
    weight_names: list[str] = field(default_factory=list)

    @property
    def max_positions(self) -> int | None:
        value = self.config.get("max_position_embeddings")
        return int(value) if isinstance(value, int) else None

    @property
    def linear_modules(self) -> set[str]:
        """Names of the modules holding a 2-D-style `.weight` (the last component before `.weight`)."""
        return {
            n.rsplit(".", 2)[-2] for n in self.weight_names if n.endswith(".weight") and n.count(".") >= 1
        }


def _safetensors_names(path: str) -> list[str]:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return [k for k in header if k != "__metadata__"]


def read_model(path: str) -> ModelFacts | None:
    """The facts of a local model directory; None when `path` is not one (a hub id, a missing path)."""
    if not os.path.isdir(path):
        return None
    facts = ModelFacts(path=path)
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            facts.config = json.load(f)
    except (OSError, ValueError):
        pass
    index = os.path.join(path, "model.safetensors.index.json")
    try:
        if os.path.isfile(index):
            with open(index, encoding="utf-8") as f:
                facts.weight_names = sorted(json.load(f).get("weight_map", {}))
        elif os.path.isfile(os.path.join(path, "model.safetensors")):
            facts.weight_names = _safetensors_names(os.path.join(path, "model.safetensors"))
    except (OSError, ValueError, struct.error):
        facts.weight_names = []
    return facts
