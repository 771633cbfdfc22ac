"""`backend: torch, stage: grpo`: a MindSpeed-RL experiment run by the embedded programs, on any machine.

    preprocess  python -m ascendfactory.engine.data.preprocess   (= cli/preprocess_data.py, R1 handler)
    hf2mg       python -m ascendfactory.engine.convert           hf -> mg, converted_hf2mg_weight_TP*PP1/
    train       torchrun ... -m ascendfactory.engine.rl --config-path <out> --config-name mindspeed_rl_grpo
    mg2hf       python -m ascendfactory.engine.convert           mg -> hf, converted_mg2hf_weight/
    plot        training_loss.png: the verifier rewards and the response length, from rank 0's log

The experiment is the shared MindSpeed-RL experiment (`backends/common/mindspeed_rl_experiment/`, which
registers no backend): read by `common/mindspeed_rl_experiment/read.py` (MindSpeed-RL's keys and config-time
rules of `mindspeed_rl_version`, default the newest shipped list; its cluster-only checks left out) and
planned with `common/mindspeed_rl_experiment/load.py`'s load decision, the output tree
(docs/sources.md#output-tree) and the yaml renderer; then the rendered yaml goes through the embedded
trainer's own reader (`engine/rl/config.read_trainer_yaml`), which refuses by name what it does not implement,
and the dataset keys through the table below.
"""

from __future__ import annotations

import os
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.megatron.read import to_flags
from ascendfactory.backends.common.mindspeed_rl_experiment import keys as keyfiles
from ascendfactory.backends.common.mindspeed_rl_experiment.load import decide_load, fill
from ascendfactory.backends.common.mindspeed_rl_experiment.memory import RLRun
from ascendfactory.backends.common.mindspeed_rl_experiment.read import (
    MindSpeedRLConfig,
    absolute,
    read_config,
    render_yaml,
)
from ascendfactory.backends.common.mindspeed_rl_experiment.shell import grpo_plan
from ascendfactory.backends.common.mindspeed_rl_experiment.tree import TRAIN_CONFIG, RLOutputTree
from ascendfactory.config.catalog import resolve_arch
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.plan import (
    Plan,
    Process,
    Role,
    Step,
    Torchrun,
)

BC = "backend_config."
MG2HF_DISABLED = "final conversion disabled (convert_ckpt_mg2hf: null or convert_mg2hf_at_last: false)"
# DataHandlerConfig key -> the preprocess flag it becomes (None: accepted, no effect on the files written).
PREPROCESS_FLAGS: dict[str, str | None] = {
    "input": "input",
    "handler_name": "handler-name",
    "prompt_type": "prompt-type",
    "map_keys": "map-keys",
    "json_keys": "json-keys",
    "seed": "seed",
    "tokenizer_name_or_path": "tokenizer-name-or-path",
    "tokenizer_not_use_fast": "tokenizer-not-use-fast",
    "append_eod": "append-eod",
    "seq_length": "seq-length",
    "make_vocab_size_divisible_by": "make-vocab-size-divisible-by",
    "workers": "workers",
    "log_interval": "log-interval",
    "tokenizer_type": None,  # HuggingFaceTokenizer = our PretrainedFromHF
    "dataset_impl": None,  # mmap
    "output_prefix": None,  # the plan's (preprocessed_data/<name>)
    "dataset_additional_keys": None,  # [labels]: the R1 handler always writes labels
    "streaming": None,
    "overwrite_cache": None,
    "cache_dir": None,
    "n_subs": None,
}
# DataHandlerConfig keys accepted only at MindSpeed-RL's default value.
PREPROCESS_DEFAULT_ONLY = {
    "split_sentences": False,
    "keep_newlines": False,
    "pack": False,
    "neat_pack": False,
    "enable_thinking": False,
    "interleave_probs": None,
    "prompt_type_path": None,
    "script_data_dir": None,
    "vocab_file": None,
    "merge_file": None,
    "pad_vocab_size_to": None,
    "placeholder_token": None,
    "reward_tokens": None,
    "merge_group_keys": None,
}
TOKENIZER_TYPES = ("HuggingFaceTokenizer", "PretrainedFromHF")


def plan_grpo(backend: Any, ctx: PlanContext, *, strict_paths: bool) -> Plan:
    cfg = ctx.config
    bc = cfg.backend_config or {}
    version = bc.get("mindspeed_rl_version")
    keys = keyfiles.shipped(str(version)) if version in keyfiles.shipped_versions() else None
    problems: list[Problem] = []
    try:
        rl = read_config(ctx, keys=keys or keyfiles.latest(), cluster_checks=False)
    except ConfigError as e:
        raise ConfigError(e.problems) from None
    warnings = [w for w in rl.warnings]
    layout = RLOutputTree(os.path.abspath(cfg.af_output_dir))
    load = decide_load(ctx, rl, layout, problems, warnings)
    user_data = rl.value("megatron_training.data_path") or rl.value("actor_config.data_path")
    rl, data_path = fill(ctx, rl, layout, load, problems, warnings, strict=strict_paths)
    model_dir = str(absolute(rl.actor.get("tokenizer_name_or_path") or ""))
    arch = None
    try:
        arch = resolve_arch(cfg.af_model_name, model_dir or None)
    except ConfigError as e:
        problems += e.problems
    problems += _trainer_problems(ctx, rl) + _preprocess_problems(ctx, rl) + _batch_problems(ctx, rl)
    backend.raise_if(problems)

    plan = _shell(ctx, rl, layout, warnings)
    plan.files[layout.train_yaml] = render_yaml(
        rl,
        header=f"Written by ascendfactory-cli for {cfg.af_model_name}/{cfg.exp_name}: the embedded trainer "
        f"reads it (torchrun ... -m ascendfactory.engine.rl --config-path {layout.root} "
        f"--config-name {TRAIN_CONFIG}), as MindSpeed-RL's cli/train_grpo.py would",
    )
    plan.add(_preprocess_step(ctx, rl, None if user_data else data_path))
    plan.add(_hf2mg_step(ctx, rl, layout, load, arch, model_dir))
    plan.add(_train_step(ctx, rl, layout, load))
    plan.add(_mg2hf_step(ctx, rl, layout, arch, model_dir))
    plan.add(
        Step(
            name="plot",
            role=Role.PLOT,
            outputs=[layout.loss_plot],
            skip_reason=None if cfg.env.NODE_RANK == 0 else "the metrics are printed by rank 0 (node 0)",
        )
    )
    plan.run = RLRun(rl, arch)
    return plan


# -- checks -------------------------------------------------------------------------------------------------
def _trainer_problems(ctx: PlanContext, rl: MindSpeedRLConfig) -> list[Problem]:
    """What the embedded trainer's reader refuses in the yaml it will read (keys outside its subset)."""
    from ascendfactory.engine.rl.config import read_trainer_yaml

    try:
        read_trainer_yaml(rl.sections, source="")
    except ConfigError as e:
        out = []
        for p in e.problems:
            keys = [k.strip() for k in p.key.split(",")]
            dotted = ", ".join(BC + k for k in keys)
            out.append(Problem(dotted, p.message, p.fix, ctx.loaded.source_of(BC + keys[0])))
        return out
    return []


def _preprocess_problems(ctx: PlanContext, rl: MindSpeedRLConfig) -> list[Problem]:
    from ascendfactory.engine.data.templates import list_templates

    pre = rl.preprocess or {}
    out = []
    for key, value in pre.items():
        dotted = f"{BC}preprocess_data.{key}"
        if key in PREPROCESS_DEFAULT_ONLY:
            if value not in (PREPROCESS_DEFAULT_ONLY[key], None, False, [], ""):
                out.append(
                    ctx.problem(
                        dotted,
                        f"{value!r}: not supported by the embedded preprocessing",
                        "remove it, or use backend: mindspeed-rl",
                    )
                )
        elif key not in PREPROCESS_FLAGS:
            out.append(ctx.problem(dotted, "not read by the embedded preprocessing", "remove it"))
    if pre.get("tokenizer_type", TOKENIZER_TYPES[0]) not in TOKENIZER_TYPES:
        out.append(
            ctx.problem(
                f"{BC}preprocess_data.tokenizer_type", f"{pre['tokenizer_type']!r}", "HuggingFaceTokenizer"
            )
        )
    extra = [k for k in pre.get("dataset_additional_keys") or [] if k != "labels"]
    if extra:
        out.append(
            ctx.problem(
                f"{BC}preprocess_data.dataset_additional_keys",
                f"{extra}: the embedded preprocessing writes labels only",
                "dataset_additional_keys: [labels]",
            )
        )
    prompt_type = pre.get("prompt_type", "empty")
    if prompt_type not in list_templates():
        out.append(
            ctx.problem(
                f"{BC}preprocess_data.prompt_type",
                f"{prompt_type!r} is not a template of the embedded preprocessing",
                f"use one of: {', '.join(list_templates())}, or backend: mindspeed-rl",
            )
        )
    return out


def _batch_problems(ctx: PlanContext, rl: MindSpeedRLConfig) -> list[Problem]:
    """How the embedded trainer deals a mini-batch to the data-parallel ranks (prompts, then samples)."""
    d = rl.derived
    if d is None:
        return []
    dp, mini, n, mbs = d.actor_dp, d.mini_batch_prompts, d.n_samples, d.mbs
    out = []
    if mini and d.gbs % mini:
        out.append(
            ctx.problem(
                f"{BC}rl_config.mini_batch_size",
                f"global_batch_size ({d.gbs}) is not a multiple of mini_batch_size ({mini})",
                "use a divisor of global_batch_size",
            )
        )
    if mini and dp and mini % dp:
        out.append(
            ctx.problem(
                f"{BC}rl_config.mini_batch_size",
                f"{mini} prompts per optimizer step cannot be split over {dp} data-parallel ranks "
                "(the embedded trainer keeps each prompt's samples on one rank)",
                f"use a multiple of {dp}",
            )
        )
    elif mini and dp and mbs and (mini // dp * n) % mbs:
        out.append(
            ctx.problem(
                f"{BC}actor_config.micro_batch_size",
                f"{mini // dp * n} samples per rank and optimizer step are not a multiple of it ({mbs})",
                "use a micro_batch_size dividing mini_batch_size / data parallel x n_samples_per_prompt",
            )
        )
    return out


# -- the plan ------------------------------------------------------------------------------------------------
def _shell(ctx: PlanContext, rl: MindSpeedRLConfig, layout: RLOutputTree, warnings: list[str]) -> Plan:
    d = rl.derived
    return grpo_plan(
        ctx,
        rl,
        layout,
        reward_metrics=("grpo/score/mean", *(f"{name}_rewards/mean" for name in d.verifiers)),
        warnings=warnings,
        facts={
            "stage": "grpo (MindSpeed-RL experiment, embedded trainer)",
            "mindspeed_rl_keys": rl.keys.version,
            **{k: v for k, v in d.to_dict().items() if k not in ("verifier_weights", "dispatch")},
        },
    )


def _python_module(ctx: PlanContext, module: str, options: dict[str, Any]) -> Process:
    return Process((ctx.python, "-m", module, *to_flags(options)))


def _preprocess_step(ctx: PlanContext, rl: MindSpeedRLConfig, data_path: str | None) -> Step:
    pre = rl.preprocess
    if not pre or not pre.get("input") or data_path is None:
        return Step(
            name="preprocess",
            role=Role.PREPROCESS,
            skip_reason=f"preprocessed data given: {rl.actor.get('data_path')}",
        )
    options: dict[str, Any] = {
        "input": absolute(str(pre["input"])),
        "tokenizer-name-or-path": absolute(
            pre.get("tokenizer_name_or_path") or rl.actor.get("tokenizer_name_or_path")
        ),
        "output-prefix": data_path,
        "handler-name": pre.get("handler_name") or None,
        "prompt-type": pre.get("prompt_type") or "empty",  # DataHandlerConfig's default
    }
    for key, value in pre.items():
        flag = PREPROCESS_FLAGS.get(key)
        if flag and flag not in options and value not in (None, False):
            options[flag] = value
    if isinstance(options.get("map-keys"), dict):
        import json

        options["map-keys"] = json.dumps(options["map-keys"])
    return Step(
        name="preprocess",
        role=Role.PREPROCESS,
        launch=_python_module(ctx, "ascendfactory.engine.data.preprocess", options),
        inputs=[options["input"], str(options["tokenizer-name-or-path"])],
        outputs=[os.path.dirname(data_path)],
        mkdirs=[os.path.dirname(data_path)],
        only_node0=ctx.config.shared_filesystem and ctx.config.env.NNODES > 1,
    )


def _hf2mg_step(
    ctx: PlanContext, rl: MindSpeedRLConfig, layout: RLOutputTree, load: Any, arch: Any, model_dir: str
) -> Step:
    cfg, d = ctx.config, rl.derived
    reason = None
    if cfg.ckpt_load_type == 0:
        reason = "ckpt_load_type 0: training starts from random weights"
    elif not load.convert:
        given = cfg.user_converted_ckpt_path
        reason = (
            f"user_converted_ckpt_path given: {given}" if given else f"actor_config.load given: {load.path}"
        )
    elif arch is None:
        reason = "no model family known"
    if reason:
        return Step(name="hf2mg", role=Role.CONVERT, skip_reason=reason)
    options: dict[str, Any] = {
        "load-model-type": "hf",
        "save-model-type": "mg",
        "load-dir": model_dir,
        "save-dir": layout.converted(d.tp, d.pp),
        "target-tensor-parallel-size": d.tp,
        "target-pipeline-parallel-size": d.pp,
        "model-type-hf": arch.model_type_hf,
    }
    options.update(rl.hf2mg)
    return Step(
        name="hf2mg",
        role=Role.CONVERT,
        launch=_python_module(ctx, "ascendfactory.engine.convert", options),
        inputs=[model_dir],
        outputs=[layout.converted(d.tp, d.pp)],
        only_node0=cfg.shared_filesystem and cfg.env.NNODES > 1,
    )


def _train_step(ctx: PlanContext, rl: MindSpeedRLConfig, layout: RLOutputTree, load: Any) -> Step:
    cfg = ctx.config
    entry = ["-m", "ascendfactory.engine.rl", "--config-path", layout.root, "--config-name", TRAIN_CONFIG]
    entry += ["--af-metrics-dir", layout.logs]
    if rl.rl.get("use_tensorboard"):
        given = cfg.tensorboard.tensorboard_dir if cfg.tensorboard else None
        entry += ["--af-tensorboard-dir", str(absolute(given) or layout.tensorboard_dir)]
    inputs = [layout.train_yaml]
    if load.path and load.path != layout.saved_checkpoints:
        inputs.append(load.path)
    return Step(
        name="train",
        role=Role.TRAIN,
        launch=Torchrun(
            python=ctx.python,
            entry=tuple(entry),
            nnodes=cfg.env.NNODES,
            nproc_per_node=ctx.devices.count,
            node_rank=cfg.env.NODE_RANK,
            master_addr=cfg.env.MASTER_ADDR,
            master_port=cfg.env.MASTER_PORT,
        ),
        inputs=inputs,
        outputs=[layout.saved_checkpoints],
        notes=[load.reason],
    )


def _mg2hf_step(
    ctx: PlanContext, rl: MindSpeedRLConfig, layout: RLOutputTree, arch: Any, model_dir: str
) -> Step:
    cfg = ctx.config
    if rl.mg2hf is None:
        return Step(
            name="mg2hf", role=Role.EXPORT, inputs=[layout.saved_checkpoints], skip_reason=MG2HF_DISABLED
        )
    if arch is None:
        return Step(name="mg2hf", role=Role.EXPORT, skip_reason="no model family known")
    out = str(absolute(cfg.hf_save_dir) or layout.mg2hf)
    options: dict[str, Any] = {
        "load-model-type": "mg",
        "save-model-type": "hf",
        "load-dir": layout.saved_checkpoints,
        "save-dir": out,
        "hf-cfg-dir": model_dir,
        "model-type-hf": arch.model_type_hf,
    }
    options.update(rl.mg2hf)
    return Step(
        name="mg2hf",
        role=Role.EXPORT,
        launch=_python_module(ctx, "ascendfactory.engine.convert", options),
        inputs=[layout.saved_checkpoints],
        outputs=[out],
        only_node0=cfg.shared_filesystem and cfg.env.NNODES > 1,
    )
