"""What MindSpeed-MM accepts, per generation, as data generated from its source.

Every file beside this module is written by `scripts/gen_mindspeed_mm_data.py` (each names the repositories,
refs, commits and files it was read from); nothing here is typed by hand:

    training_<gen>.txt    flags pretrain_vlm.py accepts (Megatron-LM + MindSpeed + MindSpeed-MM add_argument)
    mm_convert_<gen>.txt  mm-convert's converters, subcommands and `--cfg.*` options (type, required)
    data_json_<gen>.txt   data.json keys of the dataclass- and function-backed sections; rejected keys;
                          required keys (with MindSpeed-MM's own messages)
    path_params.txt       data/model/tools json keys whose values are paths (master's validate_params.json)
    presets_<gen>.json    per Qwen2.5-VL size: the example script's env, flags and defaults, its data.json
                          and model.json, tools.json, the converter class

Generations: `2.1.0` (MindSpeed-MM <= 2.1.0: Megatron-LM core_r0.8.0, four-stage 7B example) and `master`
(MindSpeed-MM 2.2.0 and later: Megatron-LM core_v0.12.1, two-stage 7B example).
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ascendfactory.config.catalog import ModelArch

_HERE = Path(__file__).resolve().parent

GENERATIONS = ("2.1.0", "master")
RELEASES = {"2.1.0": "MindSpeed-MM 2.1.0 and older", "master": "MindSpeed-MM 2.2.0 and later (master)"}


def _lines(name: str) -> list[list[str]]:
    text = (_HERE / name).read_text(encoding="utf-8")
    return [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]


@lru_cache(maxsize=None)
def training_names(generation: str) -> frozenset[str]:
    """Flags (without `--`) pretrain_vlm.py accepts."""
    return frozenset(row[0].strip() for row in _lines(f"training_{generation}.txt"))


@lru_cache(maxsize=None)
def training_values(generation: str) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """flag -> (kind, nargs, choices) where the generation's file lists them (2.1.0; master lists names
    only): what argparse's add_argument takes, as scripts/gen_mindspeed_args.py's Spec reads it."""
    out = {}
    for row in _lines(f"training_{generation}.txt"):
        if len(row) > 1 and row[1].strip():
            choices = tuple(c for c in (row[3] if len(row) > 3 else "").split("|") if c)
            out[row[0].strip()] = (row[1].strip(), row[2] if len(row) > 2 else "", choices)
    return out


@lru_cache(maxsize=None)
def training_defaults(generation: str) -> dict[str, Any]:
    """flag -> argparse's default where the generation's file lists it (2.1.0): what pretrain_vlm.py
    holds for a flag not on the command line (a default the source computes is left out)."""
    out: dict[str, Any] = {}
    for row in _lines(f"training_{generation}.txt"):
        if len(row) > 4 and row[4].strip():
            out[row[0].strip()] = ast.literal_eval(row[4].strip())
    return out


@dataclass(frozen=True)
class ConvertOption:
    key: str  # cfg.parallel_config.tp_size
    type: str
    required: bool


@lru_cache(maxsize=None)
def mm_convert(generation: str) -> dict[tuple[str, str], dict[str, ConvertOption]]:
    """(converter, subcommand) -> {option key: ConvertOption}."""
    out: dict[tuple[str, str], dict[str, ConvertOption]] = {}
    for converter, sub, key, kind, req in _lines(f"mm_convert_{generation}.txt"):
        out.setdefault((converter, sub), {})[key] = ConvertOption(key, kind, req == "required")
    return out


@dataclass(frozen=True)
class DataJsonFacts:
    keys: dict[str, dict[str, str]]  # section -> {key: default as written in the source}
    rejected: dict[str, dict[str, str]]  # section -> {key: MindSpeed-MM's error message}
    required: dict[str, dict[str, str]]  # section -> {key: MindSpeed-MM's error message}


@lru_cache(maxsize=None)
def data_json(generation: str) -> DataJsonFacts:
    facts = DataJsonFacts({}, {}, {})
    for kind, section, name, text in _lines(f"data_json_{generation}.txt"):
        table = {"key": facts.keys, "rejected": facts.rejected, "required": facts.required}[kind]
        table.setdefault(section, {})[name] = text
    return facts


@lru_cache(maxsize=None)
def path_params() -> dict[str, frozenset[str]]:
    """json file (mm_data, mm_model, mm_tool) -> dotted keys whose values are paths."""
    out: dict[str, set[str]] = {}
    for section, key in _lines("path_params.txt"):
        out.setdefault(section, set()).add(key)
    return {k: frozenset(v) for k, v in out.items()}


@lru_cache(maxsize=None)
def presets(generation: str) -> dict[str, Any]:
    """The whole presets document (`models`, `tools`, the pinned refs)."""
    return json.loads((_HERE / f"presets_{generation}.json").read_text(encoding="utf-8"))


def preset_name(model_name: str, arch: ModelArch | None, generation: str) -> str | None:
    """The example for `model_name` (qwen2.5-vl-7b, Qwen2.5-VL-7B-Instruct, ...) or the HF config's size."""
    models = presets(generation)["models"]
    name = re.sub(r"[-_]instruct$", "", model_name.lower().replace("_", "-"))
    name = name.replace("qwen2-5", "qwen2.5")
    if name in models:
        return name
    if arch is not None and arch.hf_model_type == "qwen2_5_vl":
        for candidate, preset in models.items():
            text = preset["model"]["text_decoder"]
            if text["num_layers"] == arch.layers and text["hidden_size"] == arch.hidden:
                return candidate
    return None


def source_file(kind: str, generation: str) -> str:
    """The data file's path relative to the repository, for messages."""
    suffix = "json" if kind == "presets" else "txt"
    return f"ascendfactory/backends/mindspeed_mm/keys/{kind}_{generation}.{suffix}"
