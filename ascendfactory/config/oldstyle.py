"""Old-style multi-model files (`ascendfactory-cli train <cfgs_yaml> <model_name> <exp_name>`).

Layout (AscendFactory 6.3.91x `modellink_performance_cfgs.yaml` style):

    base:                      # common flat keys
      backend: torch
      af_output_dir: ./outputs/${af_model_name}-${exp_name}
      seed: 1234
    qwen2.5-7b:                # a model block: its flat keys, then its experiment blocks
      model_name_or_path: /models/qwen2.5-7b
      full-4k:
        tensor-model-parallel-size: 1
        SEQ_LEN: 4096
    experiments:               # optional: experiment blocks shared by every model
      smoke: {train-iters: 10}

Effective config: base <- model block <- shared experiment <- the model's own experiment <- command line.
Flat keys are mapped into the new-style tree by `FLAT_KEY_MAP` (data, below); any other dash key goes
to `backend_config.training` and is validated there by the backend.
"""

from __future__ import annotations

from typing import Any

from ascendfactory.config.schema import EnvConfig, ExperimentConfig
from ascendfactory.errors import ConfigError, Problem

SHARED_EXPERIMENTS = "experiments"
SECTION_KEYS = {"env", "backend_config", "auto_resume", "monitor_config", "tensorboard"}

# flat key -> dotted destinations in the new-style tree (a key may feed several places)
FLAT_KEY_MAP: dict[str, tuple[str, ...]] = {
    # run options, in their old spellings
    "output_dir": ("af_output_dir",),
    "save-total-limit": ("save_total_limit",),
    "save_total_limit": ("save_total_limit",),
    "scirpts_dir": ("scripts_dir",),  # sic, as in the 6.5.90x documentation
    "MA_TRAIN_AUTO_RESUME": ("train_auto_resume",),
    "USER_CONVERTED_CKPT_PATH": ("user_converted_ckpt_path",),
    "USER_PROCESSED_DATA_DIR": ("processed_data_dir",),
    "ORIGINAL_TRAIN_DATA_PATH": ("dataset",),
    "ORIGINAL_HF_WEIGHT": ("model_name_or_path",),
    # ENV-era names (HW 5901042) -> Megatron flags
    "TP": ("backend_config.training.tensor-model-parallel-size",),
    "PP": ("backend_config.training.pipeline-model-parallel-size",),
    "CP": ("backend_config.training.context-parallel-size",),
    "context_parallel_size": ("backend_config.training.context-parallel-size",),
    "MBS": ("backend_config.training.micro-batch-size",),
    "GBS": ("backend_config.training.global-batch-size",),
    "SEQ_LEN": ("backend_config.training.seq-length",),
    "MAX_PE": ("backend_config.training.max-position-embeddings",),
    "LR": ("backend_config.training.lr",),
    "MIN_LR": ("backend_config.training.min-lr",),
    "TRAIN_ITERS": ("backend_config.training.train-iters",),
    "SEED": ("backend_config.training.seed",),
    "SAVE_INTERVAL": ("backend_config.training.save-interval",),
    # preprocessing flags
    "handler-name": ("backend_config.preprocess_data.handler-name",),
    "DATA_TYPE": ("backend_config.preprocess_data.handler-name",),
    "json-keys": ("backend_config.preprocess_data.json-keys",),
    "append-eod": ("backend_config.preprocess_data.append-eod",),
    "map-keys": ("backend_config.preprocess_data.map-keys",),
    "prompt-type": ("backend_config.preprocess_data.prompt-type", "backend_config.training.prompt-type"),
    # topology
    **{k: (f"env.{k}",) for k in EnvConfig.model_fields},
}


def is_old_style(data: dict[str, Any]) -> bool:
    return "base" in data and isinstance(data["base"], dict) and "backend_config" not in data


def model_names(data: dict[str, Any]) -> list[str]:
    return [k for k, v in data.items() if k not in ("base", SHARED_EXPERIMENTS) and isinstance(v, dict)]


def experiment_names(data: dict[str, Any], model: str) -> list[str]:
    own = [k for k, v in data.get(model, {}).items() if isinstance(v, dict) and k not in SECTION_KEYS]
    shared = list((data.get(SHARED_EXPERIMENTS) or {}).keys())
    return own + [s for s in shared if s not in own]


def flatten_old_style(data: dict[str, Any], model: str, exp: str, *, source: str) -> dict[str, Any]:
    """base <- model <- shared experiment <- model's experiment, mapped into a new-style tree."""
    models = model_names(data)
    if model not in models:
        raise ConfigError(
            Problem(
                key="<model_name>",
                source=source,
                message=f"no model block '{model}'",
                fix="use one of: " + ", ".join(models),
            )
        )
    exps = experiment_names(data, model)
    if exp not in exps:
        raise ConfigError(
            Problem(
                key="<exp_name>",
                source=source,
                message=f"model '{model}' has no experiment '{exp}'",
                fix="use one of: " + ", ".join(exps),
            )
        )
    model_block = data[model]
    layers = [
        data.get("base") or {},
        {k: v for k, v in model_block.items() if k not in exps},
        (data.get(SHARED_EXPERIMENTS) or {}).get(exp) or {},
        model_block.get(exp) or {},
    ]
    tree: dict[str, Any] = {"af_model_name": model, "exp_name": exp}
    problems: list[Problem] = []
    for layer in layers:
        for key, value in layer.items():
            _place(tree, key, value, problems, source)
    if problems:
        raise ConfigError(problems)
    return tree


def _place(tree: dict[str, Any], key: str, value: Any, problems: list[Problem], source: str) -> None:
    from ascendfactory.config.load import merge_layers
    from ascendfactory.config.overrides import set_dotted

    if key in SECTION_KEYS and isinstance(value, dict):
        merged = merge_layers({key: tree.get(key) or {}}, {key: value})
        tree[key] = merged[key]
        return
    if key in FLAT_KEY_MAP:
        for dest in FLAT_KEY_MAP[key]:
            set_dotted(tree, dest, value)
        return
    if key in ExperimentConfig.model_fields:
        tree[key] = value
        return
    if isinstance(value, dict):
        problems.append(
            Problem(
                key=key,
                source=source,
                message="unexpected block inside an old-style block",
                fix="flat keys only, or one of the sections " + ", ".join(sorted(SECTION_KEYS)),
            )
        )
        return
    # Any other flat key is a training flag of the backend (validated by the backend adapter).
    set_dotted(tree, f"backend_config.training.{key}", value)
