"""Checks of `backend_config.training` (LLaMA-Factory's own keys) that need no LLaMA-Factory import.

Every problem at once, each naming its key: unknown keys (against the key list generated from
LLaMA-Factory's parser), value kinds and choices, the stage, the template name, `cutoff_len` against the
model's positions, bf16/fp16 on a machine without an accelerator, batch arithmetic, the deepspeed file,
and `lora_target` against the model's module names (read from its safetensors headers). Each check returns
`Problem`s; the planner gives each the source of its key.
"""

from __future__ import annotations

import os
from typing import Any

from ascendfactory.backends.llamafactory.environment import VERSION
from ascendfactory.backends.llamafactory.keys import Key, mapping_fields, templates, train_keys
from ascendfactory.backends.llamafactory.model_facts import ModelFacts
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.errors import Problem

T = "backend_config.training."
STAGES = ("pt", "sft", "dpo")  # what this backend plans (LLaMA-Factory also has rm, ppo, kto)

# Text keys LLaMA-Factory's __post_init__ passes through `split_arg`, which takes a comma-separated text or
# a list (hparams/data_args.py, finetuning_args.py); every other text key is used as one text.
LIST_KEYS = frozenset(
    {
        "dataset",
        "eval_dataset",
        "interleave_probs",
        "freeze_trainable_modules",
        "freeze_extra_modules",
        "lora_target",
        "oft_target",
        "additional_target",
        "galore_target",
        "apollo_target",
    }
)
KIND_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a text"}
KIND_WORDS |= {"dict": "a mapping", "list": "a list of texts", "other": "a text or a mapping"}


def _is_kind(value: Any, kind: str, name: str = "") -> bool:
    """Whether `value` has the type LLaMA-Factory's dataclass declares (`kind`: int, float, bool, str, dict,
    list, `a|b` for a union, other). Its parser (HfArgumentParser.parse_dict) passes yaml values to the
    dataclasses unchecked, so a wrong type fails later, where the value is used, or trains wrongly."""
    if "|" in kind:
        return any(_is_kind(value, part, name) for part in kind.split("|"))
    if kind == "bool":  # a quoted 'false' would stay a text, which Python reads as true
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "list":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "str":
        if name in LIST_KEYS:
            return isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            )
        return isinstance(value, str)
    # other (a class of transformers' own): a text or a mapping, as yaml can write it
    return isinstance(value, (str, dict))


def kind_words(kind: str, name: str = "") -> str:
    words = [KIND_WORDS.get(k, k) for k in kind.split("|")]
    if kind == "str" and name in LIST_KEYS:
        words.append("a list of texts")
    return " or ".join(words)


def key_problems(training: dict[str, Any]) -> list[Problem]:
    keys = train_keys(VERSION)
    out: list[Problem] = []
    for name, value in training.items():
        spec: Key | None = keys.get(name)
        if spec is None:
            out.append(
                Problem(
                    T + name,
                    f"not a key of llamafactory-cli train (LLaMA-Factory {VERSION})"
                    f"{did_you_mean(name, list(keys))}",
                    "see ascendfactory/backends/llamafactory/keys/train_" + VERSION + ".txt, or remove it",
                )
            )
            continue
        if value is None:
            continue
        if not _is_kind(value, spec.kind, name):
            words = kind_words(spec.kind, name)
            out.append(Problem(T + name, f"{value!r} is not {words}", f"give {words}"))
        elif isinstance(value, dict) and set(value) - mapping_fields(VERSION).get(name, set(value)):
            fields = sorted(mapping_fields(VERSION)[name])
            unknown = ", ".join(sorted(map(str, set(value) - set(fields))))
            out.append(Problem(T + name, f"has no field {unknown}", "use: " + ", ".join(fields)))
        elif value == "" and "dict" in spec.kind.split("|"):
            out.append(Problem(T + name, "is an empty text", "give a mapping, or the path of a json file"))
        elif spec.choices and str(value) not in spec.choices and not isinstance(value, bool):
            out.append(
                Problem(
                    T + name, f"{value!r} is not one of its choices", "use one of: " + ", ".join(spec.choices)
                )
            )
    return out


def stage_problems(stage: str | None) -> list[Problem]:
    if stage in STAGES:
        return []
    return [
        Problem(
            T + "stage",
            f"stage {stage!r} is not run by this backend" if stage else "no stage given",
            "set stage (or backend_config.training.stage) to one of: " + ", ".join(STAGES),
        )
    ]


def template_problems(template: Any) -> list[Problem]:
    if template is None:
        return []
    names = templates(VERSION)
    if str(template) in names:
        return []
    return [
        Problem(
            T + "template",
            f"template {template!r} does not exist in LLaMA-Factory {VERSION}"
            f"{did_you_mean(str(template), sorted(names))}",
            f"use a chat template name (ascendfactory/backends/llamafactory/keys/templates_{VERSION}.txt)",
        )
    ]


def model_problems(training: dict[str, Any], facts: ModelFacts | None) -> list[Problem]:
    if facts is None:
        return []
    out: list[Problem] = []
    cutoff = training.get("cutoff_len")
    limit = facts.max_positions
    if isinstance(cutoff, int) and limit and cutoff > limit and not facts.config.get("rope_scaling"):
        out.append(
            Problem(
                T + "cutoff_len",
                f"{cutoff} is longer than the model's max_position_embeddings "
                f"({limit}, {facts.path}/config.json)",
                f"set cutoff_len <= {limit}, or give the model rope_scaling",
            )
        )
    target = training.get("lora_target")
    if training.get("finetuning_type", "lora") == "lora" and target and facts.weight_names:
        parts = target if isinstance(target, list) else str(target).split(",")  # split_arg's two forms
        wanted = [str(t).strip() for t in parts if str(t).strip()]
        modules = facts.linear_modules
        unknown = [t for t in wanted if t != "all" and t not in modules]
        if unknown:
            out.append(
                Problem(
                    T + "lora_target",
                    f"{', '.join(unknown)}: no such module in {facts.path}",
                    "use all, or module names of this model: "
                    + ", ".join(sorted(modules - {"embed_tokens", "lm_head"})),
                )
            )
    return out


def device_problems(training: dict[str, Any], accelerator: str) -> list[Problem]:
    if accelerator != "cpu":
        return []
    return [
        Problem(T + key, f"{key}: true, but this machine has no GPU or NPU", f"set {key}: false on CPU")
        for key in ("bf16", "fp16", "pure_bf16", "bf16_full_eval", "tf32")
        if training.get(key) is True
    ]


def batch_facts(training: dict[str, Any], world_size: int) -> dict[str, int]:
    per_device = training.get("per_device_train_batch_size", 8)  # transformers' default
    accumulation = training.get("gradient_accumulation_steps", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (per_device, accumulation)):
        return {}
    return {
        "per_device_batch": per_device,
        "accumulation": accumulation,
        "global_batch": per_device * accumulation * world_size,
    }


# Counts LLaMA-Factory's parser takes at any value but that fail or train nothing later (stricter rules of
# ours, listed in docs/validation.md): the key and what a value below 1 does.
POSITIVE = {
    "per_device_train_batch_size": "torch's DataLoader refuses a batch size below 1",
    "gradient_accumulation_steps": "the Trainer divides the steps per epoch by it",
    "cutoff_len": "every example is truncated to nothing",
    "lora_rank": "peft's LoraConfig refuses r below 1 when the model loads",
}


def batch_problems(training: dict[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    for key, why in POSITIVE.items():
        value = training.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            out.append(Problem(T + key, f"{value} is not a positive count ({why})", f"set {key} >= 1"))
    epochs, steps = training.get("num_train_epochs", 3.0), training.get("max_steps", -1)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (epochs, steps))
    if numbers and steps <= 0 and epochs <= 0:
        out.append(
            Problem(
                T + "num_train_epochs",
                f"{epochs} is not positive and max_steps is not set: the Trainer would run no step",
                "set num_train_epochs > 0, or max_steps >= 1",
            )
        )
    return out


# Keys whose text is the path of a file LLaMA-Factory or transformers opens while parsing (a DeepSpeed or
# FSDP json, transformers' AcceleratorConfig.from_json_file, LLaMA-Factory's new-tokens yaml).
FILE_KEYS = {
    "deepspeed": "a DeepSpeed json",
    "fsdp_config": "an FSDP json",
    "accelerator_config": "an accelerator json",
    "new_special_tokens_config": "a yaml of new special tokens",
}


def file_problems(training: dict[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    for key, what in FILE_KEYS.items():
        path = training.get(key)
        if isinstance(path, str) and not os.path.isfile(os.path.expanduser(path)):
            out.append(Problem(T + key, f"file {path!r} not found", f"give the path of {what}"))
    return out


def local_model_dir(training: dict[str, Any]) -> str | None:
    """`model_name_or_path` when it is written as a local path (`/`, `.`, `~`) that is not a directory
    here; a hub id (`org/name`) is LLaMA-Factory's to fetch."""
    model = training.get("model_name_or_path")
    if (
        isinstance(model, str)
        and model.startswith(("/", ".", "~"))
        and not os.path.isdir(os.path.expanduser(model))
    ):
        return model
    return None
