"""The mindspeed-mm checks that read the experiment (keys, sources): training flags by name, the model's
pipeline lists and sizes against the HF facts, the parallel layout (the rules themselves: `rules.py`)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ascendfactory.backends.base import PlanContext, owned_key_problems
from ascendfactory.backends.common.megatron.skeleton import T, owned_save
from ascendfactory.backends.mindspeed_mm import flag_rules, rules
from ascendfactory.backends.mindspeed_mm.keys import (
    source_file,
    training_defaults,
    training_names,
    training_values,
)
from ascendfactory.backends.mindspeed_mm.read import LLM_KEY, PLAN_FLAGS, VIT_KEY, MMRun, get
from ascendfactory.config.catalog import ModelArch
from ascendfactory.errors import Problem
from ascendfactory.output_tree import OutputTree

VPP = "virtual-pipeline-model-parallel-size"
REJECTED_FLAGS = {
    "num-layers-per-virtual-pipeline-stage": "MindSpeed-MM Error: --num-layers-per-virtual-pipeline-stage is "
    "deprecated, please use --virtual-pipeline-model-parallel-size instead",
    "virtual-pipeline-model-parallel-size": "this backend plans no virtual pipeline "
    "(nested pipeline_num_layers)",
}


def sourced(ctx: PlanContext, problems: list[Problem]) -> list[Problem]:
    return [dataclasses.replace(p, source=p.source or ctx.loaded.source_of(p.key)) for p in problems]


def value_problems(ctx: PlanContext, key: str, value: Any, generation: str) -> list[Problem]:
    """What argparse refuses in a known flag's value (type=, nargs, choices), by the generation's table
    (keys/training_<gen>.txt: Megatron-LM's, MindSpeed-MM's and MindSpeed's add_argument calls, the later
    one winning as conflict_handler "resolve" does). A generation listing names only is checked by name."""
    from ascendfactory.backends.common.megatron.flag_specs import KIND_WORDS, Spec, value_problem

    own = training_values(generation).get(key)
    spec = Spec(*own) if own else None
    why = value_problem(value, spec) if spec else None
    if why is None or spec is None:
        return []
    fix = (
        "use one of: " + ", ".join(spec.choices)
        if "choices" in why
        else "give " + ("true or false" if spec.kind == "flag" else KIND_WORDS[spec.kind])
    )
    return [
        ctx.problem(
            T + key, f"{why} (pretrain_vlm.py's argparse, {source_file('training', generation)})", fix=fix
        )
    ]


def training_problems(ctx: PlanContext, user: dict[str, Any], generation: str) -> list[Problem]:
    names = training_names(generation)
    problems = []
    for key in user:
        where = T + key
        if key in PLAN_FLAGS:
            problems.append(
                ctx.problem(
                    where,
                    f"is written by the plan: mm_config/{PLAN_FLAGS[key]}.json from "
                    f"backend_config.{PLAN_FLAGS[key]}",
                    fix=f"remove it; put the content under backend_config.{PLAN_FLAGS[key]}",
                )
            )
        elif key in REJECTED_FLAGS and not (key == VPP and user[key] in (None, False, 1)):
            # one virtual stage is none: validate_args_patch.py:197 interleaves only above 1
            problems.append(ctx.problem(where, REJECTED_FLAGS[key], fix="remove it"))
        elif key in names:
            problems += value_problems(ctx, key, user[key], generation)
        else:
            problems.append(
                ctx.problem(
                    where,
                    f"not an argument of pretrain_vlm.py in MindSpeed-MM {generation}"
                    f"{rules.nearest(key, names)}",
                    fix=f"use a flag listed in {source_file('training', generation)} (dash names), "
                    "or remove it",
                )
            )
    saved = OutputTree(os.path.abspath(ctx.config.af_output_dir)).saved_checkpoints
    return problems + owned_key_problems(
        ctx, T, user, owned_save(saved, "resume, retention and mm_to_hf read it")
    )


# validate_args_patch.py:29-34: MindSpeed-MM's validate_args copies these from model.json's text_decoder
FROM_TEXT_DECODER = {
    "num-layers": "num_layers",
    "hidden-size": "hidden_size",
    "num-attention-heads": "num_attention_heads",
    "max-position-embeddings": "max_position_embeddings",
    "ffn-hidden-size": "ffn_hidden_size",
    "num-experts": "num_moe_experts",
}


def flag_rule_problems(ctx: PlanContext, mm: MMRun, flags: dict[str, Any]) -> list[Problem]:
    """flag_rules.py's rules on the flags pretrain_vlm.py gets, with model.json's sizes as MindSpeed-MM's
    validate_args puts them and the environment the training step runs with. Generation 2.1.0 only: the rules
    are MindSpeed-MM 2.1.0's (MindSpeed 077c4137, Megatron-LM core_r0.8.0)."""
    if mm.generation != "2.1.0":
        return []
    seen = dict(flags)
    layout = {
        "tensor-model-parallel-size": mm.tp,
        "pipeline-model-parallel-size": mm.pp,
        "context-parallel-size": mm.cp,
        "micro-batch-size": mm.mbs,
        "global-batch-size": mm.gbs,
    }
    seen.update(
        {k: v for k, v in layout.items() if v is not None}
    )  # the example's ${TP}, ... as the plan fills them
    decoder = get(mm.model, "text_decoder")
    for flag, field in FROM_TEXT_DECODER.items():
        if isinstance(decoder, dict) and decoder.get(field) is not None:
            seen[flag] = decoder[field]
    seen[flag_rules.WORLD] = ctx.config.env.NNODES * ctx.devices.count
    own = ctx.config.env.extra_vars()
    for name, value in {**mm.preset["exports"], **own}.items():
        seen[flag_rules.ENV + name] = value
    user = {**mm.user_training, **{flag_rules.ENV + name: v for name, v in own.items()}}
    return flag_rules.problems(seen, user, training_defaults("2.1.0"))


def checkpoint_args_problems(ctx: PlanContext, mm: MMRun, load: str | None) -> list[Problem]:
    """use-checkpoint-args reads the arguments of the checkpoint it loads: Megatron-LM core_r0.8.0
    megatron/training/initialize.py:51 (initialize_megatron) refuses it without --load."""
    if not mm.user_training.get("use-checkpoint-args") or load:
        return []
    return [
        ctx.problem(
            T + "use-checkpoint-args",
            "needs a checkpoint to load ('--use-checkpoints-args requires --load argument'), and "
            f"ckpt_load_type {ctx.config.ckpt_load_type} loads none",
            fix="remove use-checkpoint-args, or load weights (ckpt_load_type: 1, or training.load)",
        )
    ]


def model_problems(ctx: PlanContext, mm: MMRun, arch: ModelArch) -> list[Problem]:
    problems: list[Problem] = []
    for key, values in ((VIT_KEY, mm.vit_layers), (LLM_KEY, mm.llm_layers)):
        if not values:
            problems.append(
                Problem(
                    f"backend_config.model.{key}",
                    "must be a flat list of non-negative layer counts, one per pipeline stage "
                    f"(got {get(mm.model, key)!r})",
                    fix="e.g. [32, 0, 0, 0] and [1, 10, 10, 7] for PP=4; nested lists (virtual pipeline) "
                    "are not planned",
                )
            )
    model = mm.model
    if not problems:
        problems += rules.pipeline_problems(
            pp=mm.pp,
            vit=mm.vit_layers,
            llm=mm.llm_layers,
            vit_layers=arch.vit_layers or 0,
            llm_layers=arch.layers,
            layers_source=arch.source,
            vit_frozen=bool(get(model, "image_encoder.vision_encoder.freeze")),
            projector_frozen=bool(get(model, "image_encoder.vision_projector.freeze")),
            dummy_optimizer=bool(mm.user_training.get(rules.DUMMY_OPTIMIZER)),
        )
    env = ctx.config.env
    problems += rules.parallel_problems(
        world=env.NNODES * ctx.devices.count,
        world_key=f"env.NNODES({env.NNODES}) x devices per node({ctx.devices.count}, "
        f"from {ctx.devices.source})",
        tp=mm.tp,
        pp=mm.pp,
        cp=mm.cp,
        mbs=mm.mbs,
        gbs=mm.gbs,
        heads=arch.heads,
        kv_heads=arch.kv_heads,
        vit_heads=arch.vit_heads,
    )
    flags = {**mm.flags.merged(), **mm.user_training}
    lr, min_lr = flags.get("lr"), flags.get("min-lr")
    problems += rules.validate_args_problems(flags, get(model, "text_decoder.num_moe_experts") is not None)
    problems += flag_rule_problems(ctx, mm, flags)
    problems += rules.json_config_problems({"data": mm.data, "model": mm.model, "tool": mm.tool})
    problems += rules.lr_problems(lr, min_lr, user_min_lr="min-lr" in mm.user_training)
    problems += rules.model_json_problems(
        model,
        {
            "text_decoder.num_layers": arch.layers,
            "text_decoder.hidden_size": arch.hidden,
            "text_decoder.num_attention_heads": arch.heads,
            "text_decoder.num_query_groups": arch.kv_heads,
            "image_encoder.vision_encoder.num_layers": arch.vit_layers,
            "image_encoder.vision_encoder.num_attention_heads": arch.vit_heads,
        },
        arch.source,
    )
    return problems
