"""Rules across keys of `backend_config.training` that LLaMA-Factory 0.9.5's `get_train_args` enforces (its
dataclasses' `__post_init__`, its parser, and transformers' TrainingArguments checks), as data: each names
the key the problem is about, the framework's own condition, and where that condition lives.

Found by `benchmarks/diff_validate.py`: each was a case we accepted and the framework refused at start.
Values are read with the framework's defaults; a value of the wrong type is reported by the kind check
(`rules.key_problems`) and skipped here.
"""

from __future__ import annotations

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


TA = "transformers TrainingArguments._validate_args"
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
)

# Keys that make get_train_args require a package (parser._check_extra_dependencies): key -> distribution.
PACKAGES: dict[str, str] = {
    "use_unsloth": "unsloth",
    "enable_liger_kernel": "liger-kernel",
    "mixture_of_depths": "mixture-of-depth",
    "use_galore": "galore-torch",
    "use_apollo": "apollo-torch",
    "use_badam": "badam",
    "use_adam_mini": "adam-mini",
    "use_swanlab": "swanlab",
    "deepspeed": "deepspeed",
    "predict_with_generate": "jieba",
    "use_kt": "kt-kernel",
}


def problems(
    training: dict[str, Any], installed: Callable[[str], bool] | None, *, prefix: str = ""
) -> list[Problem]:
    """Every combination LLaMA-Factory refuses, keys named under `prefix`; `installed(distribution)` tells
    whether the LLaMA-Factory environment has a package (None: not known here, not checked)."""

    def get(key: str) -> Any:
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
        for key, dist in PACKAGES.items():
            if training.get(key) not in (None, False, "", 0) and not installed(dist):
                out.append(
                    Problem(
                        prefix + key,
                        f"needs the {dist} package, which the LLaMA-Factory environment lacks",
                        f"install {dist} into it, or remove {key} (llamafactory/hparams/parser.py)",
                    )
                )
    return out
