"""The MindSpeed-RL experiment's load decision and filled yaml, shared by the `mindspeed-rl` backend and
`torch` with `stage: grpo` (both run the same experiment, with MindSpeed-RL's programs or ours).

Load decision (one rule, as for the Megatron backends; resume as MindSpeed-RL's docs/zh/algorithms/grpo.md):
1. `train_auto_resume: true` and saved_checkpoints holds a complete checkpoint: actor_config.load is it, with
   finetune / no_load_optim / no_load_rng false; in integrated mode the reference model keeps loading the
   original weights (rl_config.integrated_mode_config.ref_model_load_path).
2. else `ckpt_load_type`: 0 no weights; 1 the converted weights (user_converted_ckpt_path, or the hf2mg
   output) with finetune, no_load_optim, no_load_rng true; 2 user_converted_ckpt_path as a resume.
3. `actor_config.load` given replaces the path (no conversion); the user's own finetune / no_load_* win.

`fill` writes the plan's values into the yaml (paths made absolute, the data prefix, load and save);
`input_problems` checks a real run's inputs (tokenizer directory, data files, weights to load).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends import inputs
from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.mindspeed_rl_experiment.read import MindSpeedRLConfig, absolute
from ascendfactory.backends.common.mindspeed_rl_experiment.tree import RLOutputTree
from ascendfactory.checkpoints.megatron import inspect, iteration_name
from ascendfactory.errors import Problem

BC = "backend_config."
LOAD_FLAGS = ("finetune", "no_load_optim", "no_load_rng")
PATH_KEYS = ("tokenizer_name_or_path", "data_path", "load", "save")


@dataclass
class Load:
    """What the actor loads: the path, its finetune / no_load_* flags, why, and whether hf2mg is needed."""

    path: str | None
    flags: dict[str, bool]
    reason: str
    ref_path: str | None = None  # integrated mode: the reference model's weights when they differ
    convert: bool = True  # the hf2mg output is needed


def decide_load(
    ctx: PlanContext,
    rl: MindSpeedRLConfig,
    layout: RLOutputTree,
    problems: list[Problem],
    warnings: list[str],
) -> Load:
    cfg, d = ctx.config, rl.derived
    converted = layout.converted(d.tp, d.pp)
    explicit = rl.value("actor_config.load") or rl.value("megatron_training.load")
    user = cfg.user_converted_ckpt_path
    original = absolute(explicit or user or converted)
    saved = layout.saved_checkpoints
    state = inspect(saved) if os.path.isdir(saved) else None
    if cfg.train_auto_resume and state is not None and state.resumable:
        return Load(
            saved,
            {f: False for f in LOAD_FLAGS},
            f"train_auto_resume: newest complete checkpoint {iteration_name(int(str(state.tracker)))} in "
            "saved_checkpoints (optimizer and RNG too)",
            ref_path=original if cfg.ckpt_load_type != 0 else None,
            convert=not (explicit or user) and cfg.ckpt_load_type != 0,
        )
    if cfg.ckpt_load_type == 0:
        warnings.append("ckpt_load_type 0: GRPO starts from random weights (nothing is loaded)")
        return Load(explicit and absolute(explicit), {}, "ckpt_load_type 0: no weights loaded", convert=False)
    if cfg.ckpt_load_type == 2:
        if not (user or explicit):
            problems.append(
                ctx.problem(
                    "user_converted_ckpt_path",
                    "ckpt_load_type 2 (resume) needs the saved checkpoint to resume from",
                    "set user_converted_ckpt_path to a saved_checkpoints directory, or use ckpt_load_type 1",
                )
            )
        if rl.integrated and not rl.value("rl_config.integrated_mode_config.ref_model_load_path"):
            warnings.append(
                "ckpt_load_type 2: the reference model loads the resumed actor weights; set "
                "rl_config.integrated_mode_config.ref_model_load_path to the original converted weights "
                "(MindSpeed-RL's resume instructions)"
            )
        return Load(
            absolute(explicit or user),
            {f: False for f in LOAD_FLAGS},
            "ckpt_load_type 2: weights, optimizer and RNG from user_converted_ckpt_path",
            convert=False,
        )
    return Load(
        original,
        {f: True for f in LOAD_FLAGS},
        "ckpt_load_type 1: weights only (finetune, no_load_optim, no_load_rng)",
        convert=not (explicit or user),
    )


def fill(
    ctx: PlanContext,
    rl: MindSpeedRLConfig,
    layout: RLOutputTree,
    load: Load,
    problems: list[Problem],
    warnings: list[str],
    *,
    strict: bool,
) -> tuple[MindSpeedRLConfig, str]:
    """The plan's values in the yaml: paths made absolute, the data prefix, load and save."""
    given = bool(rl.value("megatron_training.data_path") or rl.value("actor_config.data_path"))
    updates: dict[str, Any] = {}
    for section in ("megatron_training", "actor_config", "ref_config", "reward_config"):
        for key in PATH_KEYS:
            value = rl.value(f"{section}.{key}")
            if isinstance(value, str) and value:
                updates[f"{section}.{key}"] = absolute(value)
    save = rl.value("actor_config.save") or rl.value("megatron_training.save")
    if save and absolute(save) != layout.saved_checkpoints:
        problems.append(
            ctx.problem(
                BC + ("actor_config.save" if rl.value("actor_config.save") else "megatron_training.save"),
                f"the actor saves into {layout.saved_checkpoints} (resume, retention and the final "
                "conversion read it)",
                "remove it, or change af_output_dir",
            )
        )
    updates["actor_config.save"] = layout.saved_checkpoints
    updates["megatron_training.save"] = None
    user_flags = {f for f in LOAD_FLAGS if rl.value(f"actor_config.{f}") is not None}
    if load.path is not None:
        updates["actor_config.load"] = load.path
        updates["megatron_training.load"] = None
        for flag, value in load.flags.items():
            if flag not in user_flags or load.ref_path is not None:  # a resume sets them all
                updates[f"actor_config.{flag}"] = value
    if load.ref_path is not None and rl.integrated:
        if not rl.value("rl_config.integrated_mode_config.ref_model_load_path"):
            updates["rl_config.integrated_mode_config.ref_model_load_path"] = load.ref_path
    ref_given = rl.value("rl_config.integrated_mode_config.ref_model_load_path")
    if isinstance(ref_given, str):
        updates["rl_config.integrated_mode_config.ref_model_load_path"] = absolute(ref_given)
    data_path = rl.value("megatron_training.data_path") or rl.value("actor_config.data_path")
    pre = rl.preprocess
    if not data_path and pre and pre.get("input"):
        data_path = os.path.join(layout.preprocessed, _dataset_name(str(pre["input"])))
        updates["megatron_training.data_path"] = data_path
    rl = rl.replace_values(updates)
    inputs.route(
        input_problems(ctx, rl, load, given_data=given), strict=strict, problems=problems, warnings=warnings
    )
    return rl, str(absolute(data_path) or "")


def input_problems(ctx: PlanContext, rl: MindSpeedRLConfig, load: Load, *, given_data: bool) -> list[Problem]:
    """A real run's inputs: the tokenizer directory, the data files, the weights to load."""
    out: list[Problem] = []
    tok = rl.actor.get("tokenizer_name_or_path")
    if isinstance(tok, str) and not os.path.isfile(os.path.join(tok, "config.json")):
        exists = os.path.isdir(tok)
        out.append(
            inputs.missing(
                ctx,
                BC + "megatron_training.tokenizer_name_or_path",
                tok,
                "{path} is not an HF model directory with config.json (the tokenizer and the rollout load it)"
                if exists
                else "directory {path} does not exist (the tokenizer and the rollout load it)",
                "point it at the HF model directory",
            )
        )
    pre = rl.preprocess or {}
    if given_data:
        prefix = str(rl.actor.get("data_path"))
        keys = ["input_ids", "attention_mask", *(rl.actor.get("dataset_additional_keys") or [])]
        lacking = [
            f"{prefix}_packed_{k}_document.{ext}"
            for k in keys
            for ext in ("bin", "idx")
            if not os.path.isfile(f"{prefix}_packed_{k}_document.{ext}")
        ]
        if lacking:
            out.append(
                ctx.problem(
                    BC + "megatron_training.data_path",
                    f"preprocessed data missing: {', '.join(lacking[:4])}"
                    + (f" (+{len(lacking) - 4} more)" if len(lacking) > 4 else "")
                    + " (MindSpeed-RL reads <prefix>_packed_<key>_document.bin/.idx)",
                    "point data_path at the prefix cli/preprocess_data.py wrote, or remove it to preprocess",
                )
            )
    elif pre.get("input") and not os.path.exists(str(pre["input"])):
        out.append(
            inputs.missing(
                ctx,
                BC + "preprocess_data.input",
                str(pre["input"]),
                "{path} does not exist",
                "point it at a json/jsonl/parquet/csv file or a directory of them",
            )
        )
    if load.path and not load.convert and load.path != rl.actor.get("save"):
        state = inspect(load.path) if os.path.isdir(load.path) else None
        if state is None or state.tracker is None:
            out.append(
                ctx.problem(
                    BC + "actor_config.load",
                    f"{load.path} has no latest_checkpointed_iteration.txt (not Megatron weights)",
                    "convert the HF weights first (leave user_converted_ckpt_path and actor_config.load "
                    "unset), or point it at converted weights",
                )
            )
        else:
            out += _tp_pp_matches(ctx, load.path, state.tracker, rl.derived.tp, rl.derived.pp)
    return out


def _dataset_name(source: str) -> str:
    return os.path.splitext(os.path.basename(source.rstrip("/")))[0] or "dataset"


def _tp_pp_matches(ctx: PlanContext, root: str, tracker: int | str, tp: int, pp: int) -> list[Problem]:
    """The mp_rank_TT[_PPP] folders of the loaded iteration fit the actor's TP and PP."""
    it = "release" if tracker == "release" else iteration_name(int(tracker))
    ranks = [os.path.basename(p) for p in glob.glob(os.path.join(root, it, "mp_rank_*"))]
    if not ranks:
        return []
    want = {f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") for t in range(tp) for p in range(pp)}
    if set(ranks) >= want and len(ranks) == tp * pp:
        return []
    return [
        ctx.problem(
            BC + "actor_config.load",
            f"{root}/{it} holds {len(ranks)} shard folders ({', '.join(sorted(ranks)[:4])}...), not the "
            f"{tp * pp} of the actor's TP {tp} x PP {pp}",
            "convert the weights with the actor's TP and PP (target-tensor/pipeline-parallel-size)",
        )
    ]
