"""Read the MindSpeed-RL yaml `cli/train_grpo.py` reads (`--config-path DIR --config-name NAME` plus
Hydra-style `section.key=value` overrides) into a `GRPOConfig`; every problem at once, by key name.

Hydra's part is the subset MindSpeed-RL's configs use: the `defaults` list's `model` group
(`- model: [qwen25_7b]` loads `DIR/model/qwen25_7b.yaml`, whose top key is the entry's name), an inline
`model:` mapping, and overrides (`a.b=v` for a key the file has, `+a.b=v` to add one). Which keys are read
and how is in `keys.py`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from ascendfactory.engine.rl import subset as K
from ascendfactory.engine.rl.subset import KL_PENALTIES, Sampling
from ascendfactory.engine.rl.trackers import problems as tracker_problems
from ascendfactory.engine.rl.verifiers import check_names
from ascendfactory.errors import ConfigError, Problem


@dataclass
class GRPOConfig:
    args: argparse.Namespace  # the Megatron flags (engine.train.flags) of actor and reference
    ignored_flags: list[str]  # Megatron performance flags given (accepted, no effect)
    ignored_keys: list[str]  # rl_config / generate_config keys given that have no effect here
    rl: dict[str, Any]  # rl_config, MindSpeed-RL defaults filled in
    sampling: Sampling
    sampling_seed: int
    rollout_dtype: str
    max_model_len: int
    source: str = ""
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.rl["n_samples_per_prompt"])

    @property
    def ref_model_load_path(self) -> str | None:
        mode = self.rl.get("integrated_mode_config") or {}
        return mode.get("ref_model_load_path") if isinstance(mode, dict) else None


# -- the yaml ------------------------------------------------------------------------------------------
def _norm(d: Any) -> Any:
    """Keys with `-` read as `_` (MindSpeed-RL's BaseConfig.update does the same)."""
    if isinstance(d, dict):
        return {str(k).replace("-", "_"): v for k, v in d.items()}
    return d


def _read(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ConfigError(Problem(key=path, message="the file is not a yaml mapping"))
    return data


def load_yaml(config_path: str, config_name: str, overrides: list[str]) -> tuple[dict[str, Any], str]:
    """The composed config (defaults resolved, overrides applied) and the file it came from."""
    name = config_name if config_name.endswith((".yaml", ".yml")) else config_name + ".yaml"
    path = os.path.join(config_path, name)
    if not os.path.isfile(path):
        raise ConfigError(
            Problem(
                key="--config-name",
                message=f"{path} not found",
                fix="--config-path is the folder, --config-name the file name without .yaml",
                source="command line",
            )
        )
    cfg = _read(path)
    problems: list[Problem] = []
    models = dict(cfg.get("model") or {}) if isinstance(cfg.get("model"), dict) else {}
    for entry in cfg.get("defaults") or []:
        if entry == "_self_":
            continue
        if not (isinstance(entry, dict) and set(entry) == {"model"}):
            problems.append(
                Problem(key="defaults", message=f"{entry!r}: only the `model` group is read", source=path)
            )
            continue
        names = entry["model"] if isinstance(entry["model"], list) else [entry["model"]]
        for model_name in names:
            file = os.path.join(config_path, "model", f"{model_name}.yaml")
            if not os.path.isfile(file):
                problems.append(Problem(key="defaults.model", message=f"{file} not found", source=path))
                continue
            models.update(_read(file))
    if models:
        cfg["model"] = models
    for item in overrides:
        problems += _override(cfg, item)
    if problems:
        raise ConfigError(problems)
    return cfg, path


def _override(cfg: dict[str, Any], item: str) -> list[Problem]:
    add = item.startswith("+")
    dotted, sep, text = item.lstrip("+").partition("=")
    if not sep or not dotted:
        return [Problem(key=item, message="overrides are key=value", source="command line")]
    parts = dotted.split(".")
    node = cfg
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            if not add:
                return [Problem(key=dotted, message="no such key in the config", fix=f"use +{item}")]
            node[part] = {}
        node = node[part]
    if parts[-1] not in node and not add:
        return [
            Problem(key=dotted, message="no such key in the config", fix=f"add it with +{item}", source="")
        ]
    node[parts[-1]] = yaml.safe_load(text)
    return []


# -- the sections --------------------------------------------------------------------------------------
def to_flags(values: dict[str, Any]) -> list[str]:
    """MindSpeed-RL's `parse_args_from_config`: `--key-with-dashes value`; True bare; False/None dropped."""
    argv: list[str] = []
    for key, value in values.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def _megatron(cfg: dict[str, Any], source: str, problems: list[Problem]) -> dict[str, Any]:
    train, actor = _norm(cfg.get("megatron_training") or {}), _norm(cfg.get("actor_config") or {})
    name = actor.get("model", train.get("model"))
    merged: dict[str, Any] = dict(K.MEGATRON_DEFAULTS)
    if name is not None:
        entries = cfg.get("model") or {}
        if not isinstance(entries, dict) or name not in entries:
            problems.append(
                Problem(
                    key="megatron_training.model",
                    message=f"names model entry '{name}', which the config does not have",
                    fix="add `defaults: [{model: [" + str(name) + "]}]` with model/" + str(name) + ".yaml",
                    source=source,
                )
            )
        else:
            merged.update(_norm(entries[name] or {}))
    merged.update(train)
    merged.update(actor)
    return merged


def _where(key: str, train: dict[str, Any], actor: dict[str, Any]) -> str:
    return f"actor_config.{key}" if key in actor else f"megatron_training.{key}"


def read_trainer_yaml(cfg: dict[str, Any], source: str = "") -> GRPOConfig:
    """Validate the composed yaml against the subset in `subset.py`; ConfigError lists every problem."""
    problems: list[Problem] = []

    def bad(key: str, message: str, fix: str = "") -> None:
        problems.append(Problem(key=key, message=message, fix=fix, source=source))

    _section_problems(cfg, bad)
    train, actor = _norm(cfg.get("megatron_training") or {}), _norm(cfg.get("actor_config") or {})
    merged = _megatron(cfg, source, problems)
    given_keys = (
        set(train) | set(actor) | set(_norm(((cfg.get("model") or {}).get(merged.get("model")) or {})))
    )
    _rl_key_problems(merged, given_keys, train, actor, bad)
    args, ignored_flags = _parse_megatron(merged, given_keys, train, actor, bad)

    rl = _section(cfg, "rl_config", K.RL_HONOURED, K.RL_IGNORED, K.RL_FIXED, bad)
    gen = _section(cfg, "generate_config", K.GENERATE_HONOURED, K.GENERATE_IGNORED, K.GENERATE_FIXED, bad)
    sampling = _sampling(gen, bad)
    _check_rl(rl, gen, sampling, args, bad)
    for key, message, fix in tracker_problems(rl):
        bad(key, message, fix)
    if problems:
        raise ConfigError(problems)
    assert args is not None
    ignored = [f"rl_config.{k}" for k in (cfg.get("rl_config") or {}) if k in K.RL_IGNORED]
    ignored += [f"generate_config.{k}" for k in (cfg.get("generate_config") or {}) if k in K.GENERATE_IGNORED]
    return GRPOConfig(
        args=args,
        ignored_flags=ignored_flags,
        ignored_keys=ignored,
        rl=rl,
        sampling=Sampling(
            max_tokens=int(sampling["max_tokens"]),
            temperature=float(sampling["temperature"]),
            top_k=int(sampling["top_k"] or -1),
            top_p=float(sampling["top_p"]),
            min_p=float(sampling["min_p"]),
        ),
        sampling_seed=int(args.seed if sampling["seed"] is None else sampling["seed"]),
        rollout_dtype=str(gen["dtype"]),
        max_model_len=int(gen["max_model_len"]),
        source=source,
        raw=cfg,
    )


Bad = Callable[..., None]


def _section_problems(cfg: dict[str, Any], bad: Bad) -> None:
    """Sections this trainer does not read, and the profiling / dump switches it cannot honour."""
    for section in cfg:
        if section not in K.KNOWN_SECTIONS:
            why = (
                "integrated worker only: the reference shares the actor's configuration"
                if section in ("ref_config", "reward_config")
                else "not a section the embedded GRPO trainer reads"
            )
            bad(section, why, fix=f"remove {section}, or use backend: mindspeed-rl")
    for section, switches in K.OFF_SECTIONS.items():
        body = cfg.get(section) or {}
        body = body.get("integrated", body) if section == "profiler_config" else body
        for switch in switches:
            if isinstance(body, dict) and body.get(switch):
                bad(f"{section}.{switch}", "profiling and dumps are not supported here", fix="set it false")


def _rl_key_problems(
    merged: dict[str, Any], given_keys: set[str], train: dict[str, Any], actor: dict[str, Any], bad: Bad
) -> None:
    """The MindSpeed-RL-only Megatron keys, dropout and LoRA: what this trainer refuses by name."""
    rl_keys = {k: v for k, v in merged.items() if k in K.MEGATRON_RL}
    if rl_keys.get("stage", K.STAGE) != K.STAGE:
        bad(
            _where("stage", train, actor),
            f"'{rl_keys['stage']}'; this trainer runs {K.STAGE}",
            f"use {K.STAGE}",
        )
    if "labels" not in (rl_keys.get("dataset_additional_keys") or []):
        bad(
            "megatron_training.dataset_additional_keys",
            "must list labels (the reference answers the verifiers compare with)",
            "dataset_additional_keys: [labels]",
        )
    if rl_keys.get("tokenizer_type", K.TOKENIZER_TYPES[0]) not in K.TOKENIZER_TYPES:
        bad(_where("tokenizer_type", train, actor), f"'{rl_keys['tokenizer_type']}'", "PretrainedFromHF")
    if rl_keys.get("ai_framework") is not None:
        bad(_where("ai_framework", train, actor), "only the PyTorch path exists here", "remove it")
    if merged.get("attention_dropout"):
        bad(
            _where("attention_dropout", train, actor),
            f"{merged['attention_dropout']}"
            + (
                " (MindSpeed-RL's default: the experiment does not set it)"
                if "attention_dropout" not in given_keys
                else ""
            )
            + ": dropout in the policy is not supported by the embedded GRPO trainer",
            "set attention_dropout: 0.0 (MindSpeed-RL's GRPO examples do)",
        )
    for key in sorted(k for k in merged if k.startswith("lora_") and merged[k] not in (None, False, [])):
        bad(
            _where(key, train, actor),
            "LoRA is not supported by the embedded GRPO trainer (the whole actor is trained)",
            "remove it, or use backend: mindspeed-rl",
        )


def _parse_megatron(
    merged: dict[str, Any], given_keys: set[str], train: dict[str, Any], actor: dict[str, Any], bad: Bad
) -> tuple[Any, list[str]]:
    """The Megatron keys through the SFT trainer's own flag parser; its problems named as yaml keys."""
    from ascendfactory.engine.train import flags as train_flags

    megatron = {
        k: v
        for k, v in merged.items()
        if k not in K.MEGATRON_RL and k != "attention_dropout" and not k.startswith("lora_")
    }
    args, ignored_flags = None, []
    try:
        args, ignored_flags = train_flags.parse_args(to_flags(megatron))
        refused = [f for f in train_flags.REFUSED_IN_GRPO if train_flags.given(args, f)]
        if refused:
            raise ConfigError(
                [
                    Problem(
                        key=f,
                        message="packed sequences change the numerics and are not implemented by the "
                        "embedded GRPO actor",
                        fix=f"remove {f}, or use the mindspeed-rl backend",
                    )
                    for f in refused
                ]
            )
        # honoured by the SFT / pre-training trainer, not implemented by the GRPO actor: its optimizer state
        # stays replicated and its hidden states whole (listed in the info line, never silently dropped)
        ignored_flags += [f for f in train_flags.NOT_IN_GRPO if train_flags.given(args, f)]
    except ConfigError as e:
        for p in e.problems:
            names = [f.strip().lstrip("-").replace("-", "_") for f in p.key.split(",")]
            key = ", ".join(_where(n, train, actor) for n in names)
            message = p.message.replace("flag", "key").replace("--", "")
            defaulted = [n for n in names if n in K.MEGATRON_DEFAULTS and n not in given_keys]
            if defaulted:
                default = K.MEGATRON_DEFAULTS[defaulted[0]]
                message += f" (MindSpeed-RL's default {default!r}: the experiment does not set it)"
            bad(key, message, p.fix.replace("--", "").replace("-", "_") if p.fix else "")
    return args, ignored_flags


def _sampling(gen: dict[str, Any], bad: Bad) -> dict[str, Any]:
    """generate_config.sampling_config over the defaults (popped from `gen`)."""
    sampling_raw = _norm(gen.pop("sampling_config", None) or {})
    sampling = {k: v for k, (v, _) in K.SAMPLING.items()}
    for key, value in sampling_raw.items():
        if key not in K.SAMPLING:
            bad(
                f"generate_config.sampling_config.{key}",
                "not a sampling key",
                f"keys: {', '.join(K.SAMPLING)}",
            )
        else:
            sampling[key] = value
    return sampling


def _section(cfg, name, honoured, ignored, fixed, bad) -> dict[str, Any]:
    given = _norm(cfg.get(name) or {})
    out = {k: v for k, (v, _) in honoured.items()}
    for key, value in given.items():
        if key in honoured:
            out[key] = value
        elif key == "sampling_config" and name == "generate_config":
            out[key] = value
        elif key in fixed:
            want, feature = fixed[key]
            if value != want:
                bad(
                    f"{name}.{key}",
                    f"{value!r}: {feature} is not supported by the embedded torch backend",
                    f"use {want!r}, or backend: mindspeed-rl",
                )
        elif key not in ignored:
            bad(
                f"{name}.{key}",
                "not in the embedded GRPO trainer's subset",
                "remove it (the subset is in ascendfactory/engine/rl/subset.py), or use backend: "
                "mindspeed-rl",
            )
    return out


def _check_rl(rl, gen, sampling, args, bad) -> None:
    def positive(section: str, key: str, value: Any, allow_none: bool = False) -> None:
        if value is None and allow_none:
            return
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            bad(f"{section}.{key}", f"must be an integer >= 1, got {value!r}", f"give {key} 1 or more")

    for key in ("n_samples_per_prompt", "mini_batch_size", "epochs", "max_prompt_length"):
        positive("rl_config", key, rl[key])
    for key in ("actor_forward_micro_batch_size", "ref_forward_micro_batch_size"):
        positive("rl_config", key, rl[key], allow_none=True)
    positive("generate_config.sampling_config", "max_tokens", sampling["max_tokens"])
    if rl["kl_penalty"] not in KL_PENALTIES:
        bad("rl_config.kl_penalty", f"'{rl['kl_penalty']}'", f"use one of: {', '.join(KL_PENALTIES)}")
    if rl["kl_ctrl_type"] not in ("fixed", "adaptive"):
        bad("rl_config.kl_ctrl_type", f"'{rl['kl_ctrl_type']}'", "use fixed or adaptive")
    elif rl["kl_ctrl_type"] == "adaptive" and not float(rl["kl_horizon"]) > 0:
        bad("rl_config.kl_horizon", f"horizon must be larger than 0. Got {rl['kl_horizon']}", "use > 0")
    names, weights = list(rl["verifier_function"] or []), list(rl["verifier_weight"] or [])
    rl["verifier_function"], rl["verifier_weight"] = names, weights
    for message in check_names(names):
        bad("rl_config.verifier_function", message, "use the verifiers listed")
    if len(names) != len(weights):
        bad(
            "rl_config.verifier_weight",
            f"Verifier function and weight length mismatch: {len(names)} vs {len(weights)}",
            "give one weight per verifier",
        )
    resource = rl["actor_resource"] or {}
    if not isinstance(resource, dict) or set(resource) - {"num_npus"}:
        bad(
            "rl_config.actor_resource",
            f"{resource!r}: only num_npus is accepted",
            "actor_resource: {num_npus: N}",
        )
    mode = rl["integrated_mode_config"]
    if mode is not None and (not isinstance(mode, dict) or set(mode) - {"ref_model_load_path"}):
        bad("rl_config.integrated_mode_config", f"{mode!r}: only ref_model_load_path is read here")
    if gen["infer_pipeline_parallel_size"] != 1:
        bad(
            "generate_config.infer_pipeline_parallel_size",
            "pipeline_parallel for vllm is not supported yet !",
        )
    if gen["dtype"] not in ("bfloat16", "float16", "float32"):
        bad("generate_config.dtype", f"'{gen['dtype']}'", "use bfloat16, float16 or float32")
    temperature, top_p = sampling["temperature"], sampling["top_p"]
    if not isinstance(temperature, (int, float)) or temperature < 0:
        bad("generate_config.sampling_config.temperature", f"must be >= 0, got {temperature!r}")
    if not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        bad("generate_config.sampling_config.top_p", f"must be in (0, 1], got {top_p!r}")
    top_k, min_p, seed = sampling["top_k"], sampling["min_p"], sampling["seed"]
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < -1):
        bad(
            "generate_config.sampling_config.top_k",
            f"must be an integer >= -1, got {top_k!r}",
            "-1 turns it off",
        )
    if not isinstance(min_p, (int, float)) or isinstance(min_p, bool) or not 0 <= min_p <= 1:
        bad("generate_config.sampling_config.min_p", f"must be in [0, 1], got {min_p!r}", "0 turns it off")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        bad("generate_config.sampling_config.seed", f"must be an integer, got {seed!r}", "or leave it out")
    if args is None:
        return
    if args.pipeline_model_parallel_size != 1:
        bad(
            "actor_config.pipeline_model_parallel_size",
            f"{args.pipeline_model_parallel_size}: the embedded GRPO trainer samples and trains on one "
            "pipeline stage",
            "use pipeline_model_parallel_size: 1 (tensor and data parallel for scale), "
            "or backend: mindspeed-rl",
        )
    if args.fp16:
        bad("megatron_training.fp16", "fp16 training is not supported for GRPO", "use bf16: true")
    if args.seq_length is not None and int(gen["max_model_len"]) < args.seq_length:
        bad(
            "generate_config.max_model_len",
            f"Sequence length exceeds vLLM max_model_len! Actor.seq_length={args.seq_length} vs "
            f"GenerateConfig.max_model_len={gen['max_model_len']}",
            "raise max_model_len to at least seq_length",
        )
    if args.seq_length is not None and isinstance(sampling["max_tokens"], int):
        if sampling["max_tokens"] >= args.seq_length:
            bad(
                "generate_config.sampling_config.max_tokens",
                f"{sampling['max_tokens']} leaves no room for the prompt in seq_length {args.seq_length}",
                "lower max_tokens or raise seq_length",
            )
