"""Reading a MindSpeed-MM experiment: `backend_config` -> the json files, the training flags, the mm-convert
options and the parallel layout, with every problem at once.

`backend_config` (AscendFactory's MindSpeed-MM shape; `${...}` references between keys are resolved on load):

    data                 merged over the example's data_<size>.json  -> {af_output_dir}/mm_config/data.json
    model                merged over the example's model_<size>.json -> mm_config/model.json
    tool                 merged over MindSpeed-MM's tools.json       -> mm_config/tools.json
    training             flags over the example script's GPT_ARGS and OUTPUT_ARGS (dash names; true: a bare
                         flag; false / null: the flag is dropped)
    convert_ckpt_hf2mg   {cfg: ...}: mm-convert <Converter> hf_to_mm options
    convert_ckpt_mg2hf   {cfg: ...}: mm-convert <Converter> mm_to_hf options; null: no final conversion
    generation           2.1.0 | master (optional; default: the installed MindSpeed-MM, see environment.py)

The example ("preset") is MindSpeed-MM's own Qwen2.5-VL script and json files for the model's size in the
generation (`keys/presets_<gen>.json`): af_model_name qwen2.5-vl-{3b,7b,32b,72b} (any case, `-Instruct`
allowed), else the size whose layers and hidden size the HF config.json has.

Paths: relative paths the user writes are made absolute against the current directory; relative paths of
the example files against the MindSpeed-MM directory, where MindSpeed-MM resolves them (it runs there).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.megatron.tree import OutputTree
from ascendfactory.backends.mindspeed_mm.environment import PLACEHOLDER, Site
from ascendfactory.backends.mindspeed_mm.keys import path_params, preset_name, presets
from ascendfactory.config.catalog import ModelArch, from_catalog, from_hf_dir
from ascendfactory.errors import ConfigError, Problem

SECTIONS = ("data", "model", "tool", "training", "convert_ckpt_hf2mg", "convert_ckpt_mg2hf", "generation")
MODEL_DIR_KEY = "data.dataset_param.preprocess_parameters.model_name_or_path"
DATASET_DIR_KEY = "data.dataset_param.basic_parameters.dataset_dir"
DATASET_KEY = "dataset_param.basic_parameters.dataset"
CONFIG_DIR = "mm_config"
VIT_KEY = "image_encoder.vision_encoder.pipeline_num_layers"
LLM_KEY = "text_decoder.pipeline_num_layers"
# The example script's variables -> the flags they fill (the others are set by the plan).
VARIABLE_FLAGS = {
    "TP": "tensor-model-parallel-size",
    "PP": "pipeline-model-parallel-size",
    "CP": "context-parallel-size",
    "MBS": "micro-batch-size",
    "GBS": "global-batch-size",
}
PLAN_FLAGS = {"mm-data": "data", "mm-model": "model", "mm-tool": "tool"}  # written from these sections
LIST_SEPARATED = {"dataset_param.basic_parameters.dataset", "dataset_param.basic_parameters.val_dataset"}


def deep_merge(base: Any, over: Any) -> Any:
    """`over` merged into a copy of `base`: mappings key by key, anything else replaced (null included)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for key, value in over.items():
            out[key] = deep_merge(out[key], value) if key in out else copy.deepcopy(value)
        return out
    return copy.deepcopy(over)


def localize(doc: dict[str, Any], keys: frozenset[str], base: str) -> dict[str, Any]:
    """A copy of `doc` whose path values at `keys` are absolute against `base` (comma lists item by item)."""
    out = copy.deepcopy(doc)
    for dotted in keys:
        parts = dotted.split(".")
        node: Any = out
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(parts[-1]), str) or not node[parts[-1]]:
            continue
        value = node[parts[-1]]
        items = value.split(",") if dotted in LIST_SEPARATED else [value]
        node[parts[-1]] = ",".join(_absolute(v.strip(), base) for v in items)
    return out


def _absolute(path: str, base: str) -> str:
    if path.startswith(PLACEHOLDER):
        return path
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        return os.path.normpath(expanded)
    if base == PLACEHOLDER:
        return f"{PLACEHOLDER}/{os.path.normpath(expanded)}"
    return os.path.normpath(os.path.join(base, expanded))


def get(doc: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        doc = doc.get(part) if isinstance(doc, dict) else None
    return doc


@dataclass
class Flags:
    """The training flags in the example's groups and order: GPT_ARGS, MM_ARGS, OUTPUT_ARGS, trailing."""

    groups: dict[str, dict[str, Any]]

    def find(self, flag: str) -> str | None:
        return next((g for g, flags in self.groups.items() if flag in flags), None)

    def get(self, flag: str) -> Any:
        group = self.find(flag)
        return self.groups[group][flag] if group else None

    def set(self, flag: str, value: Any, *, group: str = "GPT_ARGS") -> None:
        """Replace in place where the example has the flag, else append to `group`."""
        self.groups[self.find(flag) or group][flag] = value

    def merged(self) -> dict[str, Any]:
        return {k: v for flags in self.groups.values() for k, v in flags.items()}


def example_flags(preset: dict[str, Any]) -> Flags:
    """The example's flags (variables kept as "${VAR}"), grouped as its torchrun line passes them."""
    groups: dict[str, dict[str, Any]] = {}
    for name, flags in [*preset["groups"].items(), ("trailing", preset["trailing"])]:
        groups[name] = {
            flag: True if not values else (values[0] if len(values) == 1 else list(values))
            for flag, *values in flags
        }
    return Flags(groups)


@dataclass
class MMRun:
    """The resolved facts of one MindSpeed-MM experiment (`framework` of the Megatron skeleton's run)."""

    site: Site
    generation: str
    preset_name: str
    preset: dict[str, Any]
    arch: ModelArch
    hf_dir: str
    data: dict[str, Any]
    model: dict[str, Any]
    tool: dict[str, Any]
    flags: Flags
    user_training: dict[str, Any]
    tp: int
    pp: int
    cp: int
    mbs: int
    gbs: int | None
    gbs_reason: str
    vit_layers: list[int]
    llm_layers: list[int]
    hf2mg: dict[str, Any]
    mg2hf: dict[str, Any] | None
    layout: OutputTree
    warnings: list[str] = field(default_factory=list)

    @property
    def converter(self) -> str:
        return self.preset["converter"]

    @property
    def config_files(self) -> dict[str, str]:
        """--mm-data / --mm-model / --mm-tool: the files the plan writes."""
        d = os.path.join(self.layout.root, CONFIG_DIR)
        return {
            "data": os.path.join(d, "data.json"),
            "model": os.path.join(d, "model.json"),
            "tool": os.path.join(d, "tools.json"),
        }


def read_sections(ctx: PlanContext, problems: list[Problem]) -> dict[str, Any]:
    """backend_config's sections, each checked for its kind; unknown sections are problems."""
    from ascendfactory.config.suggest import did_you_mean

    bc = dict(ctx.config.backend_config or {})
    out: dict[str, Any] = {}
    for section, value in bc.items():
        key = f"backend_config.{section}"
        if section not in SECTIONS:
            problems.append(
                ctx.problem(
                    key,
                    f"unknown section{did_you_mean(section, SECTIONS)}",
                    fix="sections are: " + ", ".join(SECTIONS),
                )
            )
            continue
        if section == "generation":
            out[section] = value
        elif value is None:
            if section in ("convert_ckpt_mg2hf", "tool"):
                out[section] = None
            elif section == "convert_ckpt_hf2mg":
                problems.append(
                    ctx.problem(
                        key,
                        "cannot be null: the training loads the converted weights",
                        fix="to use weights converted elsewhere set user_converted_ckpt_path; to load none, "
                        "ckpt_load_type: 0",
                    )
                )
        elif not isinstance(value, dict):
            problems.append(
                ctx.problem(key, "must be a mapping", fix=f"write `{section}:` followed by indented keys")
            )
        else:
            out[section] = value
    for section in ("convert_ckpt_hf2mg", "convert_ckpt_mg2hf"):
        cfg = out.get(section)
        if isinstance(cfg, dict):
            extra = [k for k in cfg if k != "cfg"]
            for k in extra:
                problems.append(
                    ctx.problem(
                        f"backend_config.{section}.{k}",
                        "mm-convert options go under cfg",
                        fix=f"write backend_config.{section}.cfg.{k}",
                    )
                )
            if not isinstance(cfg.get("cfg", {}), dict):
                problems.append(
                    ctx.problem(f"backend_config.{section}.cfg", "must be a mapping of mm-convert options")
                )
                out[section] = {k: v for k, v in cfg.items() if k != "cfg"}  # nothing below reads it
    _drop_non_text_paths(ctx, out, problems)
    return out


def _drop_non_text_paths(ctx: PlanContext, sections: dict[str, Any], problems: list[Problem]) -> None:
    """A path key (MindSpeed-MM's own list) holding a number, list or mapping is a problem, and is removed so
    that nothing below reads it as a path."""
    keys = path_params()
    for section, params in (("data", "mm_data"), ("model", "mm_model"), ("tool", "mm_tool")):
        for dotted in keys.get(params, frozenset()):
            *parents, last = dotted.split(".")
            node: Any = sections.get(section)
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict) and node.get(last) is not None and not isinstance(node[last], str):
                problems.append(
                    ctx.problem(
                        f"backend_config.{section}.{dotted}",
                        f"must be a path (got {type(node[last]).__name__} {node[last]!r:.40})",
                        fix="give one path as text (quote it if it is made of digits)",
                    )
                )
                del node[last]


def resolve_model(
    ctx: PlanContext, sections: dict[str, Any], generation: str, problems: list[Problem]
) -> tuple[ModelArch | None, str | None, str | None]:
    """(architecture, HF directory, preset name)."""
    cfg = ctx.config
    hf_dir = get(sections.get("data"), MODEL_DIR_KEY.split(".", 1)[1]) or cfg.model_name_or_path
    if not hf_dir:
        problems.append(
            ctx.problem(
                "backend_config." + MODEL_DIR_KEY,
                "required: the HF model directory (tokenizer and processor for the data, weights for "
                "mm-convert)",
                fix="set it to the Hugging Face model directory (before conversion)",
            )
        )
    arch = from_hf_dir(os.path.expanduser(hf_dir), cfg.af_model_name) if hf_dir else None
    if arch is None:
        try:
            arch = from_catalog(cfg.af_model_name)
        except ConfigError as e:
            if hf_dir:
                problems.extend(e.problems)
            arch = None
    name = preset_name(cfg.af_model_name, arch, generation)
    if name is None:
        problems.append(
            ctx.problem(
                "af_model_name",
                f"'{cfg.af_model_name}' has no MindSpeed-MM example in generation {generation}",
                fix="use one of: " + ", ".join(presets(generation)["models"]),
            )
        )
    if arch is not None and arch.vit_layers is None:
        problems.append(
            ctx.problem(
                "af_model_name",
                f"{arch.source}: no vision encoder (vision_config) in the model facts",
                fix="point model_name_or_path at a Qwen2.5-VL HF directory, or use a qwen2.5-vl-* "
                "catalog name",
            )
        )
        arch = None  # nothing below can be checked against it
    return arch, os.path.abspath(os.path.expanduser(hf_dir)) if hf_dir else None, name


def merged_json(
    site: Site, preset: dict[str, Any], sections: dict[str, Any], generation: str
) -> tuple[dict[str, Any], ...]:
    """data.json, model.json, tools.json: the example's (paths against the checkout) under the user's
    (paths against the current directory)."""
    keys = path_params()
    base = site.directory
    here = os.getcwd()
    out = []
    for section, example, params in (
        ("data", preset["data"], keys.get("mm_data", frozenset())),
        ("model", preset["model"], keys.get("mm_model", frozenset())),
        ("tool", presets(generation)["tools"]["content"], keys.get("mm_tool", frozenset())),
    ):
        user = sections.get(section) or {}
        out.append(deep_merge(localize(example, params, base), localize(user, params, here)))
    return tuple(out)


# -- the whole read -------------------------------------------------------------------------------------
def positive(ctx: PlanContext, user: dict[str, Any], flag: str, default: int, problems: list[Problem]) -> int:
    value = user.get(flag)
    if value is None:  # unset, or null: the example's value
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(
            ctx.problem(
                f"backend_config.training.{flag}",
                f"must be an integer >= 1 (got {value!r})",
                fix=f"e.g. {default}",
            )
        )
        return default
    return value


def read_layout(
    ctx: PlanContext, preset: dict[str, Any], user: dict[str, Any], problems: list[Problem]
) -> tuple[int, int, int, int, int | None, str]:
    """(tp, pp, cp, mbs, gbs, where gbs came from): the user's flags, else the example script's values; GBS
    as the script computes it, MBS x GRAD_ACC_STEP x DP, when unset."""
    d = preset["defaults"]
    tp, pp, cp, mbs = (
        positive(ctx, user, VARIABLE_FLAGS[v], d[v], problems) for v in ("TP", "PP", "CP", "MBS")
    )
    world = ctx.config.env.NNODES * ctx.devices.count
    dp = world // (tp * pp * cp) if world % (tp * pp * cp) == 0 else 0
    if user.get("global-batch-size") is not None:
        before = len(problems)
        gbs = positive(ctx, user, "global-batch-size", 1, problems)
        # a refused value is not checked further (no second problem about a batch of the fallback 1)
        return tp, pp, cp, mbs, gbs if len(problems) == before else None, "backend_config.training"
    if not dp:
        return tp, pp, cp, mbs, None, "unknown (TP x PP x CP does not divide the world size)"
    gbs = mbs * d["GRAD_ACC_STEP"] * dp
    return tp, pp, cp, mbs, gbs, f"MBS({mbs}) x GRAD_ACC_STEP({d['GRAD_ACC_STEP']}, the example's) x DP({dp})"
