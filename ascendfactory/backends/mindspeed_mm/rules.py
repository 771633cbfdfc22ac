"""MindSpeed-MM's pre-flight checks, as plain functions of numbers and mappings (no files, no config objects).

Each returns Problems naming the key, the numbers and a fix. Where MindSpeed-MM (or Megatron) has its own
message for the same rule, the message quotes it, so that users recognise what the cluster would have said:

    world % (TP*PP*CP), GBS % (MBS*DP)          Megatron / mindspeed_mm/patchs/validate_args_patch.py
    min-lr <= lr                                mindspeed_mm/patchs/validate_args_patch.py
    deprecated flags, samples with train-iters  the same validate_args (and EP > 1 needs experts)
    capacity factor, tp-extend-ep, distribute-  MindSpeed's validate_args_wrapper, Megatron's validate_args
      saved-activations
    TP | LLM heads, KV groups, ViT heads        Megatron TransformerConfig (both configs come from model.json)
    len(pipeline_num_layers) == PP             mindspeed_mm/models/vlm_model.py (checked only when PP > 1)
    sum(pipeline_num_layers) == layers          not checked by MindSpeed-MM: a wrong sum leaves no last stage
    ViT layers before LLM layers                examples/qwen2.5vl/README.md (not checked in code)
    a stage of frozen layers only               README: needs --enable-dummy-optimizer
    convert lists / tp_size == training ones    not checked by mm-convert: fails only when training loads
    data.json keys                              ProcessorArguments / DataArguments / DatasetAttr(**section)
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from ascendfactory.backends.mindspeed_mm.keys import DataJsonFacts
from ascendfactory.errors import Problem
from ascendfactory.parallel import nearest_multiples

T = "backend_config.training."
M = "backend_config.model."
VIT = "image_encoder.vision_encoder"
LLM = "text_decoder"
DUMMY_OPTIMIZER = "enable-dummy-optimizer"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest(word: str, names: Sequence[str] | frozenset[str]) -> str:
    """' (did you mean: a, b?)' or ''."""
    close = difflib.get_close_matches(str(word).replace("_", "-").lstrip("-"), sorted(names), n=3, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(str(word), sorted(names), n=3, cutoff=0.6)
    return f" (did you mean: {', '.join(close)}?)" if close else ""


# -- parallel layout --------------------------------------------------------------------------------------
# validate_args_patch.py's deprecated flags: refused when given at all (flag -> its message)
DEPRECATED = {
    "batch-size": "--batch-size argument is no longer valid, use --micro-batch-size instead",
    "warmup": "--warmup argument is no longer valid, use --lr-warmup-fraction instead",
    "model-parallel-size": "--model-parallel-size is no longer valid, "
    "use --tensor-model-parallel-size instead",
}
# With --train-iters (iteration-based training), the sample-based flags must stay unset (flag -> message).
SAMPLE_BASED = {
    "train-samples": "expected iteration-based training",
    "lr-decay-samples": "expected iteration-based learning rate decay",
    "rampup-batch-size": "expected no batch-size rampup for iteration-based training",
}


def _given(value: Any) -> bool:
    return value is not None and value is not False  # to_flags omits null and false


def validate_args_problems(flags: Mapping[str, Any], experts_in_model_json: bool) -> list[Problem]:
    """MindSpeed-MM's validate_args rules on flags alone (`flags`: the example's merged with the user's)."""
    out = []
    for flag, message in DEPRECATED.items():
        if _given(flags.get(flag)):
            out.append(Problem(T + flag, f"MindSpeed-MM's validate_args: {message}", fix=f"remove {flag}"))
    if _given(flags.get("train-iters")):
        for flag, message in SAMPLE_BASED.items():
            if _given(flags.get(flag)):
                out.append(
                    Problem(
                        T + flag,
                        f"is set with train-iters: MindSpeed-MM's validate_args says '{message}'",
                        fix=f"remove {flag} (or train by samples: train-iters: false and train-samples)",
                    )
                )
    out += _weight_decay_problems(flags)
    out += _mindspeed_wrapper_problems(flags, experts_in_model_json)
    ep = flags.get("expert-model-parallel-size")
    if isinstance(ep, int) and not isinstance(ep, bool) and ep > 1:
        if not _given(flags.get("num-experts")) and not experts_in_model_json:
            out.append(
                Problem(
                    T + "expert-model-parallel-size",
                    f"is {ep}, but the model has no experts: MindSpeed-MM's validate_args says 'num_experts "
                    "must be non None to use expert model parallelism'",
                    fix="set expert-model-parallel-size: 1 (Qwen2.5-VL is a dense model)",
                )
            )
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mindspeed_wrapper_problems(flags: Mapping[str, Any], experts_in_model_json: bool) -> list[Problem]:
    """MindSpeed's `validate_args_wrapper` (mindspeed/arguments.py) and Megatron's `validate_args`
    (megatron/training/arguments.py, activation recomputing) on flags MindSpeed-MM passes through."""
    out = []
    factor = _number(flags.get("moe-train-capacity-factor"))
    if factor is not None and factor <= 0:
        out.append(
            Problem(
                T + "moe-train-capacity-factor",
                f"is {flags.get('moe-train-capacity-factor')}: MindSpeed's validate_args says "
                "'--moe-train-capacity-factor must be greater than 0.0'",
                fix="remove it (default 1.0) or give a number above 0",
            )
        )
    if (
        _given(flags.get("moe-tp-extend-ep"))
        and not _given(flags.get("num-experts"))
        and not experts_in_model_json
    ):
        out.append(
            Problem(
                T + "moe-tp-extend-ep",
                "is set, but the model has no experts: MindSpeed's validate_args divides num_experts by "
                "TP x EP and stops with a TypeError on none",
                fix="remove moe-tp-extend-ep (Qwen2.5-VL is a dense model)",
            )
        )
    if _given(flags.get("distribute-saved-activations")):
        tp = flags.get("tensor-model-parallel-size", 1)
        needs = []
        if not (isinstance(tp, int) and not isinstance(tp, bool) and tp > 1):
            needs.append(f"tensor-model-parallel-size above 1 (it is {tp})")
        if flags.get("recompute-granularity") != "full":
            needs.append(f"recompute-granularity: full (it is {flags.get('recompute-granularity')})")
        if not _given(flags.get("recompute-method")):
            needs.append("a recompute-method")
        if needs:
            out.append(
                Problem(
                    T + "distribute-saved-activations",
                    "needs " + ", ".join(needs) + ": Megatron's validate_args asserts it can distribute "
                    "recomputed activations only across tensor-parallel groups, with full recompute",
                    fix="remove distribute-saved-activations, or give " + " and ".join(needs),
                )
            )
    return out


def _weight_decay_problems(flags: Mapping[str, Any]) -> list[Problem]:
    """validate_args: with the constant weight-decay style (Megatron's default) start/end-weight-decay stay
    unset; with another style both are needed."""
    style = flags.get("weight-decay-incr-style")
    constant = not _given(style) or style == "constant"
    out = []
    for flag in ("start-weight-decay", "end-weight-decay"):
        if constant and _given(flags.get(flag)):
            out.append(
                Problem(
                    T + flag,
                    "is set with weight-decay-incr-style constant: MindSpeed-MM's validate_args says "
                    f"'args.{flag.replace('-', '_')} should is None when args.weight_decay_incr_style == "
                    "constant'",
                    fix=f"remove {flag}, or set weight-decay-incr-style: linear (or cosine)",
                )
            )
        elif not constant and not _given(flags.get(flag)):
            out.append(
                Problem(
                    T + "weight-decay-incr-style",
                    f"is {style!r}, which needs {flag}: MindSpeed-MM's validate_args says "
                    f"'args.{flag.replace('-', '_')} should is not None, when args.weight_decay_incr_style "
                    "!= constant'",
                    fix=f"set {flag}, or weight-decay-incr-style: constant",
                )
            )
    return out


def lr_problems(lr: Any, min_lr: Any, *, user_min_lr: bool) -> list[Problem]:
    """MindSpeed-MM's validate_args: with --lr given, --min-lr (Megatron's default 0.0) must not exceed it.
    Values argparse would refuse are reported by the flag check, not here."""
    try:
        rate, floor = float(lr), float(0.0 if min_lr is None else min_lr)
    except (TypeError, ValueError):
        return []
    if lr is None or isinstance(lr, bool) or isinstance(min_lr, bool) or floor <= rate:
        return []
    return [
        Problem(
            T + ("min-lr" if user_min_lr else "lr"),
            f"min-lr ({floor:g}) is above lr ({rate:g}): MindSpeed-MM's validate_args refuses it "
            "('args.min_lr should <= args.lr')",
            fix="give a min-lr no larger than lr (the learning rate decays down to min-lr)",
        )
    ]


def parallel_problems(
    *,
    world: int,
    world_key: str,
    tp: int,
    pp: int,
    cp: int,
    mbs: int,
    gbs: int | None,
    heads: int,
    kv_heads: int,
    vit_heads: int | None,
) -> list[Problem]:
    problems: list[Problem] = []
    mp = tp * pp * cp
    if world % mp:
        fits = [
            f"TP={t} PP={p}"
            for p in _divisors(world)
            for t in _divisors(world // p)
            if (world // p) % (t * cp) == 0
        ]
        problems.append(
            Problem(
                T + "tensor-model-parallel-size",
                f"world size ({world}) is not divisible by tensor parallel size ({tp}) times pipeline "
                "parallel "
                f"size ({pp}) times context parallel size ({cp}) [{world_key}]",
                fix=f"choose degrees whose product divides {world} (e.g. {', '.join(fits[:4])}; PP must "
                "match the "
                f"pipeline_num_layers lists), or run on a multiple of {mp} devices",
            )
        )
    want = [
        ("num_attention_heads", heads, f"{LLM}.num_attention_heads"),
        ("num_query_groups", kv_heads, f"{LLM}.num_query_groups"),
    ]
    if vit_heads:
        want.append(("vision num_attention_heads", vit_heads, f"{VIT}.num_attention_heads"))
    for name, value, where in want:
        if value and value % tp:
            good = [t for t in _divisors(world) if all(v % t == 0 for _, v, _ in want if v)]
            problems.append(
                Problem(
                    T + "tensor-model-parallel-size",
                    f"{name} ({value}, model.json {where}) must be a multiple of "
                    f"tensor_model_parallel_size ({tp})",
                    fix="TP values that divide the LLM heads, KV groups and ViT heads here: "
                    + ", ".join(map(str, good)),
                )
            )
    if not world % mp and gbs is not None:
        dp = world // mp
        unit = mbs * dp
        if gbs % unit:
            problems.append(
                Problem(
                    T + "global-batch-size",
                    f"global batch size ({gbs}) is not divisible by micro batch size ({mbs}) times data "
                    f"parallel size ({dp}) [micro-batch-size x world / (TP x PP x CP) = {unit}]",
                    fix=f"nearest valid: {' or '.join(map(str, nearest_multiples(gbs, unit)))}",
                )
            )
    return problems


# -- pipeline_num_layers ----------------------------------------------------------------------------------
def pipeline_problems(
    *,
    pp: int,
    vit: list[int],
    llm: list[int],
    vit_layers: int,
    llm_layers: int,
    layers_source: str,
    vit_frozen: bool,
    projector_frozen: bool,
    dummy_optimizer: bool,
) -> list[Problem]:
    """The ViT and LLM pipeline_num_layers (flat lists) against PP, the HF layer counts and each other."""
    problems: list[Problem] = []
    for name, values, total in ((VIT, vit, vit_layers), (LLM, llm, llm_layers)):
        key = f"{M}{name}.pipeline_num_layers"
        if len(values) != pp:
            problems.append(
                Problem(
                    key,
                    f"length of pipeline_num_layers must equal to pipeline-model-parallel-size, but got "
                    f"pipeline_num_layers length:{len(values)} and pipeline-model-parallel-size:{pp}",
                    fix=f"give {pp} entries (one per pipeline stage) summing to {total}, or set "
                    f"{T}pipeline-model-parallel-size: {len(values)}",
                )
            )
        if sum(values) != total:
            problems.append(
                Problem(
                    key,
                    f"sums to {sum(values)} ({values}), but the model has {total} layers ({layers_source}); "
                    "MindSpeed-MM does not check this: no stage would finish the model",
                    fix=f"make the entries sum to {total}",
                )
            )
    if problems:
        return problems
    first_llm = next((i for i, n in enumerate(llm) if n), len(llm))
    late = [i for i in range(first_llm + 1, len(vit)) if vit[i]]
    if late:
        problems.append(
            Problem(
                f"{M}{VIT}.pipeline_num_layers",
                f"stage {late[0]} holds ViT layers after stage {first_llm} started the LLM "
                f"({vit} with {llm}); "
                "every ViT layer must come before the first LLM layer",
                fix="move the ViT layers to the first stages, e.g. "
                f"{[vit_layers] + [0] * (pp - 1)} with an LLM list starting at stage 0",
            )
        )
    if not dummy_optimizer:
        projector_stage = max((i for i, n in enumerate(vit) if n), default=0)
        frozen_only = [
            i
            for i in range(pp)
            if not llm[i] and (vit_frozen or not vit[i]) and (projector_frozen or i != projector_stage)
        ]
        if frozen_only:
            problems.append(
                Problem(
                    f"{M}{LLM}.pipeline_num_layers",
                    f"pipeline stage(s) {', '.join(map(str, frozen_only))} hold no trainable layer "
                    f"(ViT {vit}, LLM {llm}; the ViT is {'frozen' if vit_frozen else 'trained'}): such a "
                    "stage has "
                    "no gradients",
                    fix=f"give every stage LLM layers, or add {T}{DUMMY_OPTIMIZER}: true "
                    "(MindSpeed-MM's dummy optimizer)",
                )
            )
    return problems


def layer_list(value: Any) -> list[int] | None:
    """A flat list of non-negative ints, or None when it is not one."""
    if isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        return list(value)
    return None


# -- model.json against the HF config -------------------------------------------------------------------
def model_json_problems(
    model: Mapping[str, Any], expected: Mapping[str, int | None], source: str
) -> list[Problem]:
    """model.json's sizes (MindSpeed-MM copies them into the training args) against the HF weights'."""
    problems = []
    for dotted, want in expected.items():
        if want is None:
            continue
        node: Any = model
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and leaf in node and node[leaf] is None:
            # validate_args_patch.py:29 copies it into the arguments: null leaves num_layers (or a size) unset
            problems.append(
                Problem(
                    M + dotted,
                    "is null: MindSpeed-MM copies it into the training arguments, which then lack it "
                    "('either num-layers or encoder-num-layers should be specified', or a required argument)",
                    fix=f"remove the null (the example's value is used), or set it to {want}",
                )
            )
            continue
        node = node.get(leaf) if isinstance(node, Mapping) else None
        if node is not None and node != want:
            problems.append(
                Problem(
                    M + dotted,
                    f"is {node}, but the weights have {want} ({source})",
                    fix=f"remove backend_config.model.{dotted} (the example's value), or set it to {want}",
                )
            )
    return problems


# -- data.json ------------------------------------------------------------------------------------------
def data_json_problems(
    data: Mapping[str, Any], facts: DataJsonFacts, *, generation: str, names_file: str
) -> list[Problem]:
    """Keys MindSpeed-MM unpacks into dataclasses / keyword arguments, rejected keys, required sections."""
    problems: list[Problem] = []
    dataset = data.get("dataset_param")
    if not isinstance(dataset, Mapping):
        return [Problem("backend_config.data.dataset_param", "must be a mapping (data.json's dataset_param)")]
    for key, message in facts.required.get("dataset_param", {}).items():
        if dataset.get(key) is None:
            problems.append(
                Problem(
                    f"backend_config.data.dataset_param.{key}",
                    f"is missing: MindSpeed-MM stops with '{message}'",
                    fix="remove the null: the example's value is used",
                )
            )
    if dataset.get("dataset_type") != "huggingface":
        return problems  # the other dataset types read other keys
    sections = {s: dataset.get(s.split(".", 1)[1]) for s in facts.keys if s.startswith("dataset_param.")}
    loader = data.get("dataloader_param")
    if isinstance(loader, Mapping) and loader.get("dataloader_mode") == "sampler":
        sections["dataloader_param"] = loader
    for section, options in sections.items():
        if options is None:
            continue
        if not isinstance(options, Mapping):
            problems.append(Problem(f"backend_config.data.{section}", "must be a mapping"))
            continue
        valid = facts.keys[section]
        rejected = facts.rejected.get(section, {})
        for key in options:
            where = f"backend_config.data.{section}.{key}"
            if key in rejected:
                problems.append(
                    Problem(
                        where,
                        f"is rejected by MindSpeed-MM: '{rejected[key]}'",
                        fix="remove it; the cutoff is backend_config.training.seq-length",
                    )
                )
            elif key not in valid:
                problems.append(
                    Problem(
                        where,
                        f"is not a field of {section} in MindSpeed-MM {generation} (a TypeError at start-up)"
                        f"{nearest(key, frozenset(valid))}",
                        fix=f"use a key listed in {names_file}, or remove it",
                    )
                )
    return problems


# mindspeed_mm/utils/utils.py get_dtype: what every `dtype` key of the json configs may say
# (configs/config.py ConfigReader maps each through it)
DTYPES = ("int32", "float64", "float32", "float16", "fp32", "fp16", "half", "bf16")


def json_config_problems(sections: Mapping[str, Any]) -> list[Problem]:
    """What MindSpeed-MM 2.1.0's json loading (merge_mm_args -> MMConfig -> ConfigReader) and the first
    lines of its validate_args refuse in data.json, model.json and tools.json: a `dtype` it cannot map, and a
    video model's `predictor` with mm_double_blocks_depth not above 0 (validate_args_patch.py:51)."""
    out: list[Problem] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key == "dtype" and not (isinstance(value, str) and value in DTYPES):
                    out.append(
                        Problem(
                            f"{where}.{key}",
                            f"is {value!r}: MindSpeed-MM's get_dtype stops with 'Unsupported data type'",
                            fix="use one of: " + ", ".join(DTYPES),
                        )
                    )
                walk(value, f"{where}.{key}")

    for section in ("data", "model", "tool"):
        walk(sections.get(section), f"backend_config.{section}")
    predictor = (sections.get("model") or {}).get("predictor")
    if isinstance(predictor, Mapping) and "mm_single_blocks_depth" in predictor:
        depth = predictor.get("mm_double_blocks_depth")
        if "mm_double_blocks_depth" in predictor and isinstance(depth, (int, float)) and depth <= 0:
            out.append(
                Problem(
                    M + "predictor.mm_double_blocks_depth",
                    f"is {depth} (with mm_single_blocks_depth): 'MindSpeed-MM Error: mm_double_blocks_depth "
                    "must > 0'",
                    fix="give 1 or more, or remove the predictor section (Qwen2.5-VL has none)",
                )
            )
    return out
