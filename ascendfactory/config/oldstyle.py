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

Effective config: base <- model block <- shared experiment <- the model's own experiment <- command line
(`config.tree.compose`). Flat keys are mapped into the new-style tree: the product's own by `FLAT_KEY_MAP`
(data, below), the framework's by the chosen backend's `legacy_keys` (TP, GBS, SEQ_LEN ... for the
Megatron backends); any other flat key goes where that backend says (`legacy_rest`, e.g.
`backend_config.training`), where the backend validates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ascendfactory.config.schema import EnvConfig, ExperimentConfig
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.config.tree import merge_layers, set_dotted
from ascendfactory.errors import ConfigError, Problem

if TYPE_CHECKING:
    from ascendfactory.config.known_backends import Backends

SHARED_EXPERIMENTS = "experiments"
SECTION_KEYS = {"env", "backend_config", "auto_resume", "monitor_config", "tensorboard", "report_to"}

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
    # topology
    **{k: (f"env.{k}",) for k in EnvConfig.model_fields},
}


# ModelArts job parameters of the 6.5.90x documentation that mean nothing outside ModelArts: refused with
# the reason (never ignored, never passed on as a training flag).
PLATFORM_KEYS = {
    "mount_type": "ModelArts' storage switch (OBS): this tool reads and writes local paths; remove it",
}


def map_flat_overrides(
    overrides: list[tuple[str, Any]],
    backend: str,
    backends: Backends | None,
    problems: list[Problem],
) -> list[tuple[str, Any]]:
    """Command-line keys in the flat spelling of old-style files (`--SEQ_LEN=4096`, `--train-iters=20`,
    `--NPUS_PER_NODE=2`, as ModelArts passes hyperparameters) mapped where the same key in a file goes:
    `FLAT_KEY_MAP`, the backend's `legacy_keys`, else its `legacy_rest` section. Dotted keys and the
    experiment's own top-level keys are left as they are."""
    known = {**(backends.legacy_keys(backend) if backends else {}), **FLAT_KEY_MAP}
    rest = backends.legacy_rest(backend) if backends else None
    out: list[tuple[str, Any]] = []
    for key, value in overrides:
        if "." in key or key in ExperimentConfig.model_fields or key in SECTION_KEYS:
            out.append((key, value))
        elif key in PLATFORM_KEYS:
            problems.append(Problem(key=key, source="command line", message=PLATFORM_KEYS[key]))
        elif key in known:
            out += [(dest, value) for dest in known[key]]
        elif rest is not None and not did_you_mean(key, ExperimentConfig.model_fields):
            out.append((f"{rest}.{key}", value))
        else:  # a slip of a top-level key (`exp_nme`): the schema names it with its nearest key
            out.append((key, value))
    return out


def is_old_style(data: dict[str, Any]) -> bool:
    return "base" in data and isinstance(data["base"], dict) and "backend_config" not in data


def model_names(data: dict[str, Any]) -> list[str]:
    return [k for k, v in data.items() if k not in ("base", SHARED_EXPERIMENTS) and isinstance(v, dict)]


def experiment_names(data: dict[str, Any], model: str) -> list[str]:
    block = data.get(model)
    own = (
        [k for k, v in block.items() if isinstance(v, dict) and k not in SECTION_KEYS]
        if isinstance(block, dict)
        else []
    )
    shared = data.get(SHARED_EXPERIMENTS)
    names = [k for k, v in shared.items() if isinstance(v, dict)] if isinstance(shared, dict) else []
    return own + [s for s in names if s not in own]


def flatten_old_style(
    data: dict[str, Any],
    model: str,
    exp: str,
    *,
    source: str,
    backends: Backends | None = None,
    origins: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The four layers (base, model, shared experiment, model's experiment), each mapped into a new-style
    tree, for `compose`; the first carries `af_model_name` and `exp_name`. `origins` receives, for each
    new-style key, where the file wrote it (`base.save-total-limit`), for messages."""
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
    shared = data.get(SHARED_EXPERIMENTS)
    named = [
        ("base", data.get("base")),
        (model, {k: v for k, v in data[model].items() if k not in exps}),
        (f"{SHARED_EXPERIMENTS}.{exp}", shared.get(exp) if isinstance(shared, dict) else None),
        (f"{model}.{exp}", data[model].get(exp)),
    ]
    bad = [
        Problem(
            key=name,
            source=source,
            message="must be a mapping of keys",
            fix="write key: value lines under it",
        )
        for name, block in named
        if block is not None and not isinstance(block, dict)
    ]
    if bad:
        raise ConfigError(bad)
    layers = [block or {} for _, block in named]
    backend = next(
        (layer["backend"] for layer in reversed(layers) if isinstance(layer.get("backend"), str)), "torch"
    )
    known = {**(backends.legacy_keys(backend) if backends else {}), **FLAT_KEY_MAP}
    rest = backends.legacy_rest(backend) if backends else None
    problems: list[Problem] = []
    mapped: list[dict[str, Any]] = [{"af_model_name": model, "exp_name": exp}]
    for (block, _), layer in zip(named, layers):
        tree: dict[str, Any] = {}
        for key, value in layer.items():
            for dest in _place(tree, key, value, known, rest, problems, source, block):
                if origins is not None and dest != f"{block}.{key}":
                    origins[dest] = f"{block}.{key}"
        mapped.append(tree)
    if problems:
        raise ConfigError(problems)
    return mapped


def _place(
    tree: dict[str, Any],
    key: str,
    value: Any,
    known: Mapping[str, tuple[str, ...]],
    rest: str | None,
    problems: list[Problem],
    source: str,
    block: str,
) -> tuple[str, ...]:
    """Put one flat key into the new-style `tree`; returns the dotted keys it went to."""
    if key in SECTION_KEYS and isinstance(value, dict):
        tree[key] = merge_layers({key: tree.get(key) or {}}, {key: value})[key]
        return ()
    if key in PLATFORM_KEYS:
        problems.append(Problem(key=f"{block}.{key}", source=source, message=PLATFORM_KEYS[key]))
        return ()
    if key in known:
        for dest in known[key]:
            set_dotted(tree, dest, value, source=source)
        return known[key]
    if key in ExperimentConfig.model_fields:
        tree[key] = value
        return (key,)
    if isinstance(value, dict):
        problems.append(
            Problem(
                key=f"{block}.{key}",
                source=source,
                message="unexpected block inside an old-style block",
                fix="flat keys only, or one of the sections " + ", ".join(sorted(SECTION_KEYS)),
            )
        )
        return ()
    if rest is None:
        problems.append(
            Problem(
                key=f"{block}.{key}",
                source=source,
                message="not a key this backend maps from old-style flat keys",
                fix="use the new-style sections (backend_config...) for it",
            )
        )
        return ()
    set_dotted(tree, f"{rest}.{key}", value, source=source)
    return (f"{rest}.{key}",)
