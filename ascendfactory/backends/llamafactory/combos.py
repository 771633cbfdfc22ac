"""Rules across keys of `backend_config.training` that LLaMA-Factory 0.9.5's `get_train_args` enforces (its
dataclasses' `__post_init__`, its parser, and transformers' TrainingArguments checks), as data: each names
the key the problem is about, the framework's own condition, and where that condition lives.

Found by `benchmarks/diff_validate.py`: each was a case we accepted and the framework refused at start.
Values are read with the framework's defaults; a value of the wrong type is reported by the kind check
(`rules.key_problems`) and skipped here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascendfactory.errors import Problem

# The defaults of the dataclass fields these rules read (LLaMA-Factory 0.9.5, transformers 5.6.0);
# logging_steps is the plan's own default (backend.py writes logging_steps: 1 unless given).
DEFAULTS: dict[str, Any] = {
    "logging_strategy": "steps",
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": 500,
    "eval_strategy": "no",
    "eval_steps": None,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "warmup_ratio": None,
    "ddp_backend": None,
    "adapter_name_or_path": None,
    "dataloader_num_workers": 0,
    "dataloader_prefetch_factor": None,
    "load_best_model_at_end": False,
    "fp16": False,
    "bf16": False,
    "finetuning_type": "lora",
    "quantization_bit": None,
    "quantization_device_map": None,
    "use_galore": False,
    "use_apollo": False,
    "use_badam": False,
    "image_max_pixels": 768 * 768,
    "image_min_pixels": 32 * 32,
    "video_max_pixels": 256 * 256,
    "video_min_pixels": 16 * 16,
    "mix_strategy": "concat",
    "interleave_probs": None,
    "val_size": 0.0,
    "eval_dataset": None,
    "export_quantization_bit": None,
    "export_quantization_dataset": None,
    "infer_backend": "huggingface",
    "streaming": False,
    "max_steps": -1,
    "max_samples": None,
    "mask_history": False,
    "train_on_prompt": False,
    "use_llama_pro": False,
    "loraplus_lr_ratio": None,
    "use_rslora": False,
    "use_dora": False,
    "pissa_init": False,
    "do_eval": False,
    "do_predict": False,
    "predict_with_generate": False,
    "torch_empty_cache_steps": None,
    "neat_packing": False,
    "pref_loss": "sigmoid",
    "dpo_label_smoothing": 0.0,
    "compute_accuracy": False,
    "resize_vocab": False,
    "create_new_adapter": False,
    "fp8": False,
    "fp16_full_eval": False,
    "bf16_full_eval": False,
    "galore_layerwise": False,
    "apollo_layerwise": False,
    "badam_mode": "layer",
    "use_unsloth": False,
    "use_kt": False,
    "report_to": "none",
    "project": "huggingface",
    "dataset": None,
    "fsdp": None,
    "fsdp_config": None,
    "accelerator_config": None,
    "deepspeed": None,
    "new_special_tokens_config": None,
    "stage": "sft",
    "@world": 1,  # the processes the plan starts (not a key: problems() is told)
}

Get = Callable[[str], Any]


@dataclass(frozen=True)
class Combo:
    key: str  # the key the problem names
    # the framework's condition, called with `get` (values with its defaults); a combo made in a loop binds
    # its loop variables as the lambda's defaults
    refuses: Callable[..., Any]
    message: str
    fix: str
    source: str  # where the framework refuses it


def _evaluates(g: Get) -> bool:
    return g("eval_strategy") not in ("no", None) or bool(g("do_eval") or g("do_predict"))


def _steps_zero(kind: str) -> Callable[[Get], bool]:
    return lambda g: g(f"{kind}_strategy") == "steps" and g(f"{kind}_steps") == 0


def _fractional(kind: str) -> Callable[[Get], bool]:
    def test(g: Get) -> bool:
        steps = g(f"{kind}_steps")
        return g(f"{kind}_strategy") == "steps" and steps is not None and steps > 1 and steps != int(steps)

    return test


def _split(value: Any) -> list[str]:
    """split_arg of LLaMA-Factory's __post_init__ (data_args.py): a comma text or a list."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",")]
    return list(value) if isinstance(value, list) else []


def _mapping(value: Any) -> dict[str, Any] | None:
    """A mapping key's value as its mapping: given inline, or read from the json file it names (as
    transformers reads deepspeed, fsdp_config and accelerator_config); None when it is neither."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value and os.path.isfile(os.path.expanduser(value)):
        try:
            with open(os.path.expanduser(value), encoding="utf-8") as f:
                found = json.load(f)
        except (OSError, ValueError):
            return None
        return found if isinstance(found, dict) else None
    return None


def _zero3(g: Get) -> bool:
    """transformers' is_deepspeed_zero3_enabled for the deepspeed config given: zero_optimization.stage 3."""
    config = _mapping(g("deepspeed"))
    zero = config.get("zero_optimization") if config else None
    return isinstance(zero, dict) and zero.get("stage") == 3


def _fsdp(g: Get) -> tuple[list[str], dict[str, Any]]:
    """The FSDP options and config as transformers 5.6.0's TrainingArguments._process_fsdp_args reads them
    (training_args.py): options split at spaces, the config's `fsdp_` prefixes dropped."""
    fsdp = g("fsdp")
    options = ["full_shard"] if fsdp is True else fsdp.split() if isinstance(fsdp, str) else list(fsdp or [])
    config = dict(_mapping(g("fsdp_config")) or {})
    for k in [k for k in config if k.startswith("fsdp_")]:
        config[k[5:]] = config.pop(k)
    return options, config


TRUTH = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")  # str_to_bool's texts


def _fsdp_texts(config: dict[str, Any]) -> dict[str, str]:
    """The fsdp_config values _process_fsdp_args passes through str_to_bool, as the texts it compares."""
    sharding = "true"  # a default str_to_bool accepts (full_shard / shard_grad_op)
    two = str(config.get("version", 1)) == "2"
    keys = ("reshard_after_forward",) if two else ("forward_prefetch", "use_orig_params")
    texts = {k: str(config.get(k, sharding)).lower() for k in keys}
    texts["sync_module_states"] = str(config.get("sync_module_states", "true")).lower()
    texts["cpu_ram_efficient_loading"] = str(config.get("cpu_ram_efficient_loading", "false")).lower()
    return texts


def _best_model_steps(g: Get) -> str | None:
    """What transformers' _validate_args says of save_steps against eval_steps with load_best_model_at_end
    (training_args.py), or None. eval_steps defaults to logging_steps (its __post_init__)."""
    if not g("load_best_model_at_end") or g("save_strategy") == "best" or g("eval_strategy") != "steps":
        return None
    if g("save_strategy") != "steps":
        return None  # the strategies differ: the load_best_model_at_end rule says so
    save, evals = g("save_steps"), g("eval_steps") if g("eval_steps") not in (None, 0) else g("logging_steps")
    if save % evals == 0:
        return None
    if evals < 1 or save < 1:
        if not (evals < 1 and save < 1):
            return "mixes a ratio and a number of steps with eval_steps, so it cannot be a multiple of it"
        if (save * 1_000_000) % (evals * 1_000_000) != 0:
            return "is not a multiple of eval_steps"
        return None
    return "is not a round multiple of eval_steps"


def _special_tokens_not_mapping(g: Get) -> bool:
    path = g("new_special_tokens_config")
    if not isinstance(path, str) or not os.path.isfile(os.path.expanduser(path)):
        return False
    import yaml

    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            loaded = yaml.safe_load(f)
    except (OSError, yaml.YAMLError):
        return True
    return not isinstance(loaded, dict)


def _uses_ref_model(g: Get) -> bool:
    """FinetuningArguments.use_ref_model (finetuning_args.py): dpo with a pref_loss that needs one."""
    return g("stage") == "dpo" and g("pref_loss") not in ("orpo", "simpo")


TA = "transformers TrainingArguments._validate_args"
LF_PARSER = "llamafactory/hparams/parser.py get_train_args"
LF_MODEL = "llamafactory/hparams/parser.py _verify_model_args"
FSDP = "transformers TrainingArguments._process_fsdp_args"
ZERO3 = "ZeRO-3 (the deepspeed json's zero_optimization.stage is 3)"
COMBOS: tuple[Combo, ...] = (
    *(
        Combo(
            f"{k}_steps",
            _steps_zero(k),
            f"is 0 with {k}_strategy steps",
            f"set {k}_steps >= 1 (or a fraction of the run, 0 < {k}_steps < 1)",
            TA,
        )
        for k in ("logging", "save")
    ),
    *(
        Combo(
            f"{k}_steps",
            _fractional(k),
            "is a fraction above 1",
            f"give {k}_steps as a whole number of steps, or a ratio below 1",
            TA,
        )
        for k in ("logging", "eval", "save")
    ),
    Combo(
        "load_best_model_at_end",
        lambda g: (
            bool(g("load_best_model_at_end"))
            and g("save_strategy") != "best"
            and g("eval_strategy") != g("save_strategy")
        ),
        "needs eval_strategy equal to save_strategy",
        "set eval_strategy to the save_strategy (and an eval set), or drop load_best_model_at_end",
        TA,
    ),
    Combo("fp16", lambda g: bool(g("fp16")) and bool(g("bf16")), "and bf16 are both true", "pick one", TA),
    *(
        Combo(
            "lr_scheduler_type",
            lambda g, s=s: g("lr_scheduler_type") == s and g("eval_strategy") in ("no", None),
            f"{s} needs an eval strategy",
            "set eval_strategy (with eval_dataset or val_size), or another scheduler",
            TA,
        )
        for s in ("reduce_lr_on_plateau", "greedy")
    ),
    *(
        Combo(
            k,
            lambda g, k=k: g(k) is not None and not 0 <= g(k) < 2**32,
            "is outside 0 .. 2**32 - 1",
            "give a seed in 0 .. 4294967295",
            "numpy.random.seed, called by transformers.set_seed in get_train_args",
        )
        for k in ("seed",)
    ),
    *(
        Combo(
            k,
            lambda g, k=k: g(k) not in (None, 4, 8),
            "is not 4 or 8",
            f"set {k}: 4 or 8, or remove it",
            "llamafactory/hparams/finetuning_args.py",
        )
        for k in ("ref_model_quantization_bit", "reward_model_quantization_bit")
    ),
    Combo(
        "warmup_ratio",
        lambda g: g("warmup_ratio") is not None and g("warmup_ratio") < 0,
        "is negative",
        "set warmup_ratio >= 0",
        TA + " (warmup_ratio becomes warmup_steps)",
    ),
    Combo(
        "ddp_backend",
        lambda g: g("ddp_backend") == "",
        "is an empty text, which transformers takes as a backend to start",
        "remove ddp_backend (or name one: nccl, gloo, hccl, ...)",
        "transformers TrainingArguments._setup_devices",
    ),
    Combo(
        "adapter_name_or_path",
        lambda g: g("adapter_name_or_path") is not None and g("finetuning_type") != "lora",
        "is only for finetuning_type: lora",
        "set finetuning_type: lora, or remove adapter_name_or_path",
        "llamafactory/hparams/parser.py _verify_model_args",
    ),
    Combo(
        "warmup_steps",
        lambda g: g("warmup_ratio") is None and g("warmup_steps") < 0,  # a warmup_ratio replaces it
        "is negative",
        "set warmup_steps >= 0",
        TA,
    ),
    Combo(
        "dataloader_prefetch_factor",
        lambda g: g("dataloader_num_workers") == 0 and g("dataloader_prefetch_factor") is not None,
        "is set while dataloader_num_workers is 0",
        "set dataloader_num_workers >= 1, or remove dataloader_prefetch_factor",
        TA,
    ),
    Combo(
        "torch_empty_cache_steps",
        lambda g: g("torch_empty_cache_steps") is not None and g("torch_empty_cache_steps") <= 0,
        "is not a positive number of steps",
        "set it >= 1, or remove it",
        TA,
    ),
    Combo(
        "eval_strategy",
        lambda g: _evaluates(g) and g("eval_dataset") is None and g("val_size") <= 1e-6,
        "evaluates (eval_strategy, do_eval or do_predict), but there is no eval_dataset and val_size is 0",
        "set eval_dataset or val_size (> 0), or eval_strategy: no",
        "llamafactory/hparams/parser.py get_train_args",
    ),
    Combo(
        "val_size",
        lambda g: g("eval_dataset") is not None and g("val_size") > 1e-6,
        "is set together with eval_dataset",
        "use one of them",
        "llamafactory/hparams/data_args.py",
    ),
    Combo(
        "interleave_probs",
        lambda g: g("interleave_probs") is not None and g("mix_strategy") == "concat",
        "is set, but mix_strategy is concat",
        "set mix_strategy: interleave_under or interleave_over, or remove interleave_probs",
        "llamafactory/hparams/data_args.py",
    ),
    Combo(
        "max_samples",
        lambda g: bool(g("streaming")) and g("max_samples") is not None,
        "cannot be used with streaming: true",
        "remove max_samples, or streaming",
        "llamafactory/hparams/data_args.py",
    ),
    Combo(
        "streaming",
        lambda g: bool(g("streaming")) and g("max_steps") == -1,
        "needs max_steps",
        "set max_steps (a streamed dataset has no length)",
        "llamafactory/hparams/parser.py get_train_args",
    ),
    Combo(
        "mask_history",
        lambda g: bool(g("mask_history")) and bool(g("train_on_prompt")),
        "cannot be used with train_on_prompt",
        "pick one",
        "llamafactory/hparams/data_args.py",
    ),
    *(
        Combo(
            f"{m}_max_pixels",
            lambda g, m=m: g(f"{m}_max_pixels") < g(f"{m}_min_pixels"),
            f"is below {m}_min_pixels",
            f"set {m}_max_pixels >= {m}_min_pixels",
            "llamafactory/hparams/model_args.py",
        )
        for m in ("image", "video")
    ),
    Combo(
        "export_quantization_bit",
        lambda g: g("export_quantization_bit") is not None and g("export_quantization_dataset") is None,
        "needs export_quantization_dataset",
        "set export_quantization_dataset, or remove export_quantization_bit",
        "llamafactory/hparams/model_args.py",
    ),
    Combo(
        "infer_backend",
        lambda g: g("infer_backend") not in ("huggingface", None),
        "is only for LLaMA-Factory's API, chat and web commands, not train",
        "remove infer_backend (or set it to huggingface)",
        "llamafactory/hparams/parser.py get_train_args",
    ),
    Combo(
        "quantization_device_map",
        lambda g: g("quantization_device_map") == "auto",
        "auto cannot be used for training (a device map for a quantized model)",
        "remove quantization_device_map",
        "llamafactory/hparams/parser.py get_train_args",
    ),
    Combo(
        "quantization_bit",
        lambda g: g("quantization_bit") is not None and g("finetuning_type") not in ("lora", "oft"),
        "needs finetuning_type lora or oft",
        "set finetuning_type: lora, or remove quantization_bit",
        "llamafactory/hparams/parser.py _verify_model_args",
    ),
    Combo(
        "finetuning_type",
        lambda g: (
            g("finetuning_type") == "lora" and any(g(k) for k in ("use_galore", "use_apollo", "use_badam"))
        ),
        "lora cannot be used with use_galore, use_apollo or use_badam",
        "use one of them",
        "llamafactory/hparams/finetuning_args.py",
    ),
    Combo(
        "use_galore",
        lambda g: sum(bool(g(k)) for k in ("use_galore", "use_apollo", "use_badam")) > 1,
        "use_galore, use_apollo and use_badam exclude each other",
        "use one of them",
        "llamafactory/hparams/finetuning_args.py",
    ),
    Combo(
        "use_llama_pro",
        lambda g: bool(g("use_llama_pro")) and g("finetuning_type") == "full",
        "needs finetuning_type freeze or lora",
        "set finetuning_type, or remove use_llama_pro",
        "llamafactory/hparams/finetuning_args.py",
    ),
    *(
        Combo(
            k,
            lambda g, k=k: g("finetuning_type") != "lora" and g(k) not in (None, False),
            "is only for finetuning_type: lora",
            f"set finetuning_type: lora, or remove {k}",
            "llamafactory/hparams/finetuning_args.py",
        )
        for k in ("loraplus_lr_ratio", "use_rslora", "use_dora", "pissa_init")
    ),
    Combo(
        "dpo_label_smoothing",
        lambda g: g("stage") == "dpo" and g("pref_loss") != "sigmoid" and g("dpo_label_smoothing") > 1e-6,
        "is only for pref_loss: sigmoid",
        "set pref_loss: sigmoid, or remove dpo_label_smoothing",
        "llamafactory/hparams/finetuning_args.py",
    ),
    *(
        Combo(
            k,
            lambda g, k=k: g("stage") != "sft" and bool(g(k)),
            "is only for stage: sft",
            f"remove {k}",
            "llamafactory/hparams/parser.py get_train_args",
        )
        for k in ("neat_packing", "train_on_prompt", "mask_history", "predict_with_generate")
    ),
    # found by the coverage map (tests/diffval/maps/llamafactory-0.9.5.yaml): each a statement of
    # LLaMA-Factory's or transformers' validation that no random case had reached
    Combo(
        "do_predict",
        lambda g: g("stage") == "sft" and bool(g("do_predict")) and not g("predict_with_generate"),
        "needs predict_with_generate: true (LLaMA-Factory saves predictions by generating them)",
        "set predict_with_generate: true (with eval_dataset or val_size), or remove do_predict",
        LF_PARSER,
    ),
    Combo(
        "compute_accuracy",
        lambda g: bool(g("predict_with_generate")) and bool(g("compute_accuracy")),
        "cannot be used with predict_with_generate",
        "remove compute_accuracy, or predict_with_generate",
        LF_PARSER,
    ),
    Combo(
        "fp8",
        lambda g: bool(g("fp8")) and g("quantization_bit") is not None,
        "cannot be used with quantization_bit",
        "remove fp8, or quantization_bit",
        LF_PARSER,
    ),
    Combo(
        "pissa_init",
        lambda g: bool(g("pissa_init")) and g("quantization_bit") is not None,
        "cannot initialise PiSSA on a quantized model (quantization_bit): LLaMA-Factory does it with "
        "scripts/pissa_init.py before training",
        "remove pissa_init, or quantization_bit",
        LF_MODEL,
    ),
    Combo(
        "pissa_init",
        lambda g: bool(g("pissa_init")) and (g("stage") in ("ppo", "kto") or _uses_ref_model(g)),
        "cannot be used with a reference model (stage dpo with a pref_loss other than orpo or simpo)",
        "remove pissa_init, or set pref_loss: orpo or simpo",
        "llamafactory/hparams/finetuning_args.py",
    ),
    Combo(
        "resize_vocab",
        lambda g: bool(g("resize_vocab")) and g("quantization_bit") is not None,
        "cannot resize the embeddings of a quantized model (quantization_bit)",
        "remove resize_vocab, or quantization_bit",
        LF_MODEL,
    ),
    Combo(
        "create_new_adapter",
        lambda g: (
            bool(g("create_new_adapter"))
            and g("quantization_bit") is not None
            and g("adapter_name_or_path") is not None
        ),
        "cannot create a new adapter upon a quantized model (quantization_bit with adapter_name_or_path)",
        "remove create_new_adapter, or quantization_bit",
        LF_MODEL,
    ),
    Combo(
        "adapter_name_or_path",
        lambda g: (
            g("quantization_bit") is not None
            and g("adapter_name_or_path") is not None
            and len(_split(g("adapter_name_or_path"))) != 1
        ),
        "names several adapters, but a quantized model (quantization_bit) takes a single one",
        "merge the adapters first and give one, or remove quantization_bit",
        LF_MODEL,
    ),
    Combo(
        "interleave_probs",
        lambda g: (
            g("interleave_probs") is not None
            and g("mix_strategy") != "concat"
            and g("dataset") is not None
            and len(_split(g("dataset"))) != len(_split(g("interleave_probs")))
        ),
        "has not one probability per dataset",
        "give as many interleave_probs as datasets (comma-separated)",
        "llamafactory/hparams/data_args.py",
    ),
    Combo(
        "interleave_probs",
        lambda g: (
            g("interleave_probs") is not None
            and g("mix_strategy") != "concat"
            and g("eval_dataset") is not None
            and len(_split(g("eval_dataset"))) != len(_split(g("interleave_probs")))
        ),
        "has not one probability per eval_dataset",
        "give as many eval_dataset entries as interleave_probs",
        "llamafactory/hparams/data_args.py",
    ),
    Combo(
        "val_size",
        lambda g: bool(g("streaming")) and 1e-6 < g("val_size") < 1,
        "is a fraction, but a streamed dataset has no length: streaming takes a number of examples",
        "set val_size to a whole number of examples (>= 1), or remove streaming",
        "llamafactory/hparams/data_args.py",
    ),
    Combo(
        "save_steps",
        lambda g: _best_model_steps(g) is not None,
        "with load_best_model_at_end, save_steps must be a multiple of eval_steps",
        "set save_steps to a multiple of eval_steps (both steps or both ratios), or remove "
        "load_best_model_at_end",
        TA,
    ),
    Combo(
        "fp16_full_eval",
        lambda g: bool(g("fp16_full_eval")) and bool(g("bf16_full_eval")),
        "and bf16_full_eval are both true",
        "pick one",
        TA,
    ),
    Combo(
        "accelerator_config",
        lambda g: (_mapping(g("accelerator_config")) or {}).get("use_configured_state") is True,
        "use_configured_state: true needs an AcceleratorState configured before the arguments are parsed, "
        "which llamafactory-cli train never does",
        "remove use_configured_state from accelerator_config",
        "transformers TrainingArguments._setup_devices",
    ),
    Combo(
        "report_to",
        lambda g: "trackio" in (_split(g("report_to"))) and not g("project"),
        "trackio needs a project",
        "set project (the Trackio project name)",
        "llamafactory/hparams/parser.py _verify_trackio_args",
    ),
    Combo(
        "new_special_tokens_config",
        _special_tokens_not_mapping,
        "is not a yaml mapping of new tokens to their descriptions",
        "write the file as `token: description` lines",
        "llamafactory/hparams/model_args.py",
    ),
    Combo(
        "fsdp",
        lambda g: _fsdp(g)[0] == ["offload"],
        "offload cannot work on its own: it goes with full_shard or shard_grad_op",
        "set fsdp: full_shard offload (or shard_grad_op offload)",
        FSDP,
    ),
    Combo(
        "fsdp",
        lambda g: {"full_shard", "shard_grad_op"} <= set(_fsdp(g)[0]),
        "full_shard cannot be used with shard_grad_op",
        "keep one of full_shard and shard_grad_op",
        FSDP,
    ),
    Combo(
        "fsdp_config",
        lambda g: (
            bool(_fsdp(g)[0])
            and _fsdp(g)[1].get("min_num_params", 0) > 0
            and _fsdp(g)[1].get("transformer_layer_cls_to_wrap") is not None
        ),
        "min_num_params and transformer_layer_cls_to_wrap exclude each other",
        "keep one of min_num_params and transformer_layer_cls_to_wrap in fsdp_config",
        FSDP,
    ),
    Combo(
        "fsdp_config",
        lambda g: (
            bool(_fsdp(g)[0])
            and not _fsdp(g)[1].get("xla")
            and any(v not in TRUTH for v in _fsdp_texts(_fsdp(g)[1]).values())
        ),
        "holds a switch that is not true or false (forward_prefetch, use_orig_params, reshard_after_forward, "
        "sync_module_states, cpu_ram_efficient_loading)",
        "give those fsdp_config switches as true or false",
        FSDP + " (str_to_bool)",
    ),
    Combo(
        "fsdp_config",
        lambda g: (
            bool(_fsdp(g)[0])
            and not _fsdp(g)[1].get("xla")
            and _fsdp_texts(_fsdp(g)[1])["sync_module_states"] == "false"
            and _fsdp_texts(_fsdp(g)[1])["cpu_ram_efficient_loading"] == "true"
        ),
        "cpu_ram_efficient_loading: true needs sync_module_states: true (the other ranks would keep random "
        "weights)",
        "set sync_module_states: true in fsdp_config, or cpu_ram_efficient_loading: false",
        FSDP,
    ),
    # ZeRO-3 and the world size: decided before the launch, out of the judge's reach (no deepspeed in its
    # environment; one process), so held by unit tests
    *(
        Combo(
            "deepspeed",
            lambda g, k=k: _zero3(g) and bool(g(k)),
            f"ZeRO-3 cannot be used with {k}",
            f"use ZeRO-2 (zero_optimization.stage 2), or remove {k}",
            LF_PARSER + f" ({ZERO3})",
        )
        for k in ("predict_with_generate", "pissa_init", "pure_bf16", "use_unsloth", "use_kt")
    ),
    Combo(
        "deepspeed",
        lambda g: g("deepspeed") is not None and bool(g("use_galore") or g("use_apollo")),
        "cannot be used with use_galore or use_apollo",
        "remove deepspeed, or use_galore / use_apollo",
        LF_PARSER,
    ),
    Combo(
        "galore_layerwise",
        lambda g: g("@world") > 1 and bool(g("use_galore")) and bool(g("galore_layerwise")),
        "layer-wise GaLore cannot train on several processes (the plan starts one per device)",
        "remove galore_layerwise, or train on one device",
        LF_PARSER,
    ),
    Combo(
        "apollo_layerwise",
        lambda g: g("@world") > 1 and bool(g("use_apollo")) and bool(g("apollo_layerwise")),
        "layer-wise APOLLO cannot train on several processes (the plan starts one per device)",
        "remove apollo_layerwise, or train on one device",
        LF_PARSER,
    ),
    Combo(
        "badam_mode",
        lambda g: g("@world") > 1 and bool(g("use_badam")) and g("badam_mode") == "ratio",
        "ratio BAdam cannot train on several processes (the plan starts one per device)",
        "set badam_mode: layer (with a ZeRO-3 deepspeed config), or train on one device",
        LF_PARSER,
    ),
    Combo(
        "use_badam",
        lambda g: g("@world") > 1 and bool(g("use_badam")) and g("badam_mode") != "ratio" and not _zero3(g),
        "layer-wise BAdam on several processes needs DeepSpeed ZeRO-3",
        "give a deepspeed config with zero_optimization.stage 3, or train on one device",
        LF_PARSER,
    ),
)

# Keys that make get_train_args require packages (parser._check_extra_dependencies): key -> distributions.
PACKAGES: dict[str, tuple[str, ...]] = {
    "use_unsloth": ("unsloth",),
    "enable_liger_kernel": ("liger-kernel",),
    "mixture_of_depths": ("mixture-of-depth",),
    "use_galore": ("galore-torch",),
    "use_apollo": ("apollo-torch",),
    "use_badam": ("badam",),
    "use_adam_mini": ("adam-mini",),
    "use_swanlab": ("swanlab",),
    "deepspeed": ("deepspeed",),
    "predict_with_generate": ("jieba", "nltk", "rouge-chinese"),
    "use_kt": ("kt-kernel", "transformers-kt", "accelerate-kt"),
}


def problems(
    training: dict[str, Any],
    installed: Callable[[str], bool] | None,
    *,
    prefix: str = "",
    world: int = 1,
) -> list[Problem]:
    """Every combination LLaMA-Factory refuses, keys named under `prefix`; `installed(distribution)` tells
    whether the LLaMA-Factory environment has a package (None: not known here, not checked); `world` is
    the number of processes the plan starts (several make transformers' parallel mode DISTRIBUTED)."""

    def get(key: str) -> Any:
        if key == "@world":
            return world
        return training.get(key, DEFAULTS.get(key))

    out: list[Problem] = []
    for combo in COMBOS:
        try:
            refused = combo.refuses(get)
        except TypeError:  # a value of the wrong type: the kind check names it
            continue
        if refused:
            out.append(Problem(prefix + combo.key, combo.message, f"{combo.fix} ({combo.source})"))
    if installed is not None:
        for key, dists in PACKAGES.items():
            lacking = [d for d in dists if not installed(d)]
            if training.get(key) not in (None, False, "", 0) and lacking:
                what = ", ".join(lacking)
                out.append(
                    Problem(
                        prefix + key,
                        f"needs the {what} package{'s' if len(lacking) > 1 else ''}, which the LLaMA-Factory "
                        "environment lacks",
                        f"install {what} into it, or remove {key} (llamafactory/hparams/parser.py)",
                    )
                )
    return out
