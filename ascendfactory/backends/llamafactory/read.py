"""The llamafactory experiment, read and validated into an `LFRun` (what the plan is built from).

`read` reports every problem at once (a `ConfigError`), in the order the checks below run: the backend's
own options, the top-level inputs, the keys the plan owns, LLaMA-Factory's keys (names, kinds, stage,
template, required keys), this machine (devices, batch, files, the model), the datasets, and the
LLaMA-Factory environment with the key combinations its installed packages support.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends import inputs as input_paths
from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.environment import package_version
from ascendfactory.backends.llamafactory import combos, datasets, environment, rules
from ascendfactory.backends.llamafactory.config import OPTIONS, LFOptions
from ascendfactory.backends.llamafactory.model_facts import read_model
from ascendfactory.config.problems import validate_with_defaults
from ascendfactory.errors import ConfigError, Problem

# Keys the plan sets itself; a user value is an error that says which generic key decides it.
OWNED = {
    "output_dir": "af_output_dir",
    "resume_from_checkpoint": "ckpt_load_type: 2 with user_converted_ckpt_path, or train_auto_resume",
    "overwrite_output_dir": "train_auto_resume (a re-run starts over unless it resumes)",
    "do_train": "the plan (always true)",
}


@dataclass
class LFRun:
    """A validated llamafactory experiment: what the plan reads, nothing it still has to check."""

    out: str  # af_output_dir, absolute
    options: LFOptions  # backend_config (its `training` as written)
    training: dict[str, Any]  # LLaMA-Factory's train keys, top-level inputs filled in, stage set
    data: datasets.Datasets  # the datasets the yaml names and the registry to write
    env: str  # the LLaMA-Factory environment
    accelerator: str  # cpu | npu | cuda
    warnings: list[str] = field(default_factory=list)


def read(ctx: PlanContext, accelerator: str, *, strict_paths: bool) -> LFRun:
    """The experiment as an `LFRun`, or a `ConfigError` with every problem found."""
    out = os.path.abspath(ctx.config.af_output_dir)
    options, training, problems = _options(ctx)
    warnings: list[str] = []
    problems += _top_level_inputs(ctx, training, warnings)
    problems += _retention_problems(ctx, training)
    problems += _owned_problems(ctx, training, out)
    training = _checked_keys(ctx, training, problems)
    _machine_checks(ctx, training, accelerator, strict_paths, problems, warnings)
    data = datasets.resolve(
        training.get("dataset") or [], training.get("dataset_dir"), out, key=rules.T + "dataset"
    )
    problems += data.problems
    input_paths.route(data.missing, strict=strict_paths, problems=problems, warnings=warnings)
    env = _environment(ctx, options, training, strict_paths, problems, warnings)
    Backend.raise_if(problems)
    return LFRun(out, options, training, data, env, accelerator, warnings)


def _options(ctx: PlanContext) -> tuple[LFOptions, dict[str, Any], list[Problem]]:
    """backend_config, a copy of its `training`, and the problems with its option names and values (a
    missing `training` raises at once: nothing further can be read)."""
    given = dict(ctx.config.backend_config)
    problems = [
        ctx.problem(
            f"backend_config.{k}",
            "not an option of the llamafactory backend",
            fix="use: " + ", ".join(OPTIONS),
        )
        for k in given
        if k not in OPTIONS
    ]
    training = given.get("training")
    if not isinstance(training, dict):
        problems.append(
            ctx.problem(
                "backend_config.training",
                "missing: LLaMA-Factory's train keys",
                fix="set backend_config.training (model_name_or_path, dataset, ...)",
            )
        )
        raise ConfigError(problems)
    options = validate_with_defaults(
        LFOptions,
        {k: v for k, v in given.items() if k in OPTIONS},
        source_of=ctx.loaded.source_of,
        prefix="backend_config.",
        problems=problems,
    )
    return options, dict(training), problems


def _retention_problems(ctx: PlanContext, training: dict[str, Any]) -> list[Problem]:
    """`save_total_limit` (top level) and `backend_config.training.save_total_limit` both reach
    LLaMA-Factory's one `save_total_limit`: either alone is honoured, both given and different is refused
    naming both (the top-level one, 0 included, would otherwise silently replace the other or be
    ignored)."""
    top = ctx.config.save_total_limit
    own = training.get("save_total_limit")
    if own is None or "save_total_limit" not in ctx.config.model_fields_set or own == top:
        return []
    return [
        ctx.problem(
            rules.T + "save_total_limit",
            f"{own!r} conflicts with save_total_limit: {top} (top level); both set LLaMA-Factory's "
            "save_total_limit",
            fix="keep one of them: remove backend_config.training.save_total_limit, or the top-level "
            "save_total_limit",
        )
    ]


def _top_level_inputs(ctx: PlanContext, training: dict[str, Any], warnings: list[str]) -> list[Problem]:
    """The 6.5.90x top-level `model_name_or_path` and `dataset` (a file, a directory or a dataset name)
    fill LLaMA-Factory's keys of the same name when those are not set, as they fill the Megatron backends';
    both given and different: the backend_config value wins, with a warning. `processed_data_dir` (Megatron
    preprocessed data) has no LLaMA-Factory meaning: refused."""
    cfg = ctx.config
    for key in ("model_name_or_path", "dataset"):
        top = getattr(cfg, key)
        if top is None:
            continue
        if training.get(key) in (None, ""):
            training[key] = top
        elif str(training[key]) != str(top):
            warnings.append(
                f"{key}: {top} (top level) is not used: backend_config.training.{key} ({training[key]}) "
                "wins; remove one of them"
            )
    if cfg.processed_data_dir is not None:
        return [
            ctx.problem(
                "processed_data_dir",
                "Megatron preprocessed data: LLaMA-Factory tokenizes its own data",
                "remove it; give the raw data as dataset (top level) or backend_config.training.dataset",
            )
        ]
    return []


def _owned_problems(ctx: PlanContext, training: dict[str, Any], out: str) -> list[Problem]:
    """A user value for a key the plan sets (`do_train: true` and the output directory itself pass)."""
    problems = []
    for key, decided_by in OWNED.items():
        if key in training and not (key == "do_train" and training[key] is True):
            if key == "output_dir" and os.path.abspath(str(training[key])) == out:
                continue
            problems.append(
                ctx.problem(
                    rules.T + key,
                    f"set by the plan from {decided_by}",
                    f"remove it; set {decided_by.split(' ')[0]} instead",
                )
            )
    return problems


def _checked_keys(ctx: PlanContext, training: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """The stage, key names and kinds, template and required keys; returns the keys without the unknown or
    mistyped ones (nothing further reads those)."""
    stage = ctx.config.stage or training.get("stage")
    training["stage"] = stage
    problems += rules.stage_problems(stage)
    key_problems = rules.key_problems(training)
    problems += key_problems
    bad = {p.key.removeprefix(rules.T) for p in key_problems}
    training = {k: v for k, v in training.items() if k not in bad}
    problems += rules.template_problems(training.get("template"))
    for key in ("model_name_or_path", "dataset"):
        if not training.get(key) and key not in bad:
            problems.append(
                ctx.problem(rules.T + key, "required key is missing", f"set backend_config.training.{key}")
            )
    return training


def _machine_checks(
    ctx: PlanContext,
    training: dict[str, Any],
    accelerator: str,
    strict_paths: bool,
    problems: list[Problem],
    warnings: list[str],
) -> None:
    """Devices (a warning on --dry-run, which may check a cluster's experiment on a laptop), batch
    arithmetic, files, and the model directory and what its config and weights say."""
    device = rules.device_problems(training, accelerator)
    if strict_paths:
        problems += device
    else:
        warnings += [f"{p.key}: {p.message} ({p.fix} to run it here)" for p in device]
    problems += rules.batch_problems(training)
    problems += rules.file_problems(training)
    absent_model = rules.local_model_dir(training)
    if absent_model:
        found = input_paths.missing(
            ctx,
            rules.T + "model_name_or_path",
            absent_model,
            "model directory {path} not found",
            "give an HF model directory",
        )
        input_paths.route([found], strict=strict_paths, problems=problems, warnings=warnings)
    model = str(training.get("model_name_or_path") or "")
    facts = read_model(os.path.expanduser(model)) if model else None
    problems += rules.model_problems(training, facts)


def _environment(
    ctx: PlanContext,
    options: LFOptions,
    training: dict[str, Any],
    strict_paths: bool,
    problems: list[Problem],
    warnings: list[str],
) -> str:
    """The LLaMA-Factory environment (what it lacks: a problem on a real run), and the key combinations its
    installed packages support (a key already named by another problem is not named twice)."""
    env, env_source = environment.find_env(options.env_dir, ctx.environ)
    lacking = environment.missing(env)
    if lacking:
        what = f"LLaMA-Factory environment {env} ({env_source}) lacks {', '.join(lacking)}"
        if strict_paths:
            problems.append(Problem(key="backend_config.env_dir", message=what, fix=environment.INSTALL_FIX))
        else:
            warnings.append(f"{what}: {environment.INSTALL_FIX}")
    installed = None if lacking else (lambda dist: package_version(env, dist) is not None)
    named = {p.key for p in problems}
    found = combos.problems(training, installed, prefix=rules.T, world=ctx.world_size)
    problems += [p for p in found if p.key not in named]
    return env
