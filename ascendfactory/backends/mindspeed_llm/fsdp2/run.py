"""The FSDP2 mode of the mindspeed-llm backend: MindSpeed-LLM's `train_fsdp2.py` with its YAML, training
straight from Hugging Face weights (no preprocessing, no hf2mg, no mg2hf: the trainer tokenizes its data and
writes HF weights itself at the end).

    backend_config:
      mindspeed_llm_version: 26.1.0          # the trainer is new in 26.0.0; 2.1.0 has none
      trainer: fsdp2                         # default: megatron (the Megatron programs)
      fsdp2:                                 # the YAML's sections, with the trainer's own keys
        model: {model_name_or_path: ..., ...}
        data: {dataset: ..., template: ..., cutoff_len: ...}
        parallel: {...}
        training: {...}
        optimization: {...}

    train   torchrun ... train_fsdp2.py {af_output_dir}/fsdp2_config.yaml   (cwd: the MindSpeed-LLM directory,
            the environment of examples/fsdp2/env_config.sh)
    plot    training_loss.png from rank 0's log (the trainer logs on rank 0 only)

The plan owns the keys that place and continue the run (changed through the experiment's own keys):
`training.output_dir` = {af_output_dir}/saved_checkpoints (the house's checkpoint folder: the trainer saves
checkpoints/global_step_N there, and at the end the HF weights and training_args.yaml), `training.stage` =
stage, `training.save_total_limit` = save_total_limit (the trainer removes older checkpoints itself; 0 keeps
all), `training.save_hf_weights` = convert_mg2hf_at_last, `model.train_from_scratch` = (ckpt_load_type 0),
`training.resume_from_checkpoint` = the newest resumable checkpoint under train_auto_resume, else
user_converted_ckpt_path with ckpt_load_type 2, and `parallel.fsdp_size` = the process count when not given
(the trainer requires exactly that)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from ascendfactory.backends.base import OwnedKey, PlanContext, owned_key_problems
from ascendfactory.backends.mindspeed_llm.environment import PLACEHOLDER, Site
from ascendfactory.backends.mindspeed_llm.fsdp2 import keys as fsdp2_keys
from ascendfactory.backends.mindspeed_llm.fsdp2.rules import View, broken
from ascendfactory.backends.mindspeed_llm.fsdp2.trainer import SECTION_KEY as SECTION_KEY
from ascendfactory.backends.mindspeed_llm.fsdp2.trainer import TRAINER_KEY as TRAINER_KEY
from ascendfactory.backends.mindspeed_llm.fsdp2.trainer import TRAINERS as TRAINERS
from ascendfactory.backends.mindspeed_llm.fsdp2.trainer import trainer_of as trainer_of
from ascendfactory.checkpoints import fsdp2 as ckpt
from ascendfactory.config.catalog import ModelArch, arch_or_none
from ascendfactory.config.devices import VISIBLE_DEVICE_VARS
from ascendfactory.config.yamlio import SafeDumper
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.output_tree import OutputTree
from ascendfactory.plan import (
    CheckpointSpec,
    LogNaming,
    LogSpec,
    Plan,
    Role,
    Step,
    ThroughputSpec,
    Torchrun,
)

ENTRY = "train_fsdp2.py"
CONFIG_FILE = "fsdp2_config.yaml"
# The Megatron mode's sections: ignored by train_fsdp2.py, so refused beside trainer: fsdp2.
MEGATRON_SECTIONS = ("preprocess_data", "training", "convert_ckpt_hf2mg", "convert_ckpt_mg2hf", "converter")
# MindSpeed-LLM 26.1.0 examples/fsdp2/env_config.sh (its PYTHONPATH line is the checkout, the script's own
# folder, which Python puts on sys.path already).
STEP_ENV = {
    "TRAINING_BACKEND": "mindspeed_fsdp",
    "TASK_QUEUE_ENABLE": "2",
    "CPU_AFFINITY_CONF": "1",
    "MULTI_STREAM_MEMORY_REUSE": "2",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "TORCH_COMPILE_DEBUG": "0",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}
HCCL_TIMEOUT = 1800  # env_config.sh's HCCL_CONNECT_TIMEOUT; node_wait_timeout_s replaces it
# Keys holding local paths (made absolute: the trainer runs in the MindSpeed-LLM directory).
PATH_KEYS = (
    "model.model_name_or_path",
    "model.tokenizer_name_or_path",
    "model.cache_dir",
    "data.dataset_dir",
    "data.tokenized_path",
    "training.profile_save_path",
)
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
LOSS_ON_FIRST_NODE = "the trainer logs the loss on rank 0, which runs on the first node"


@dataclass
class FSDP2Run:
    """What `train_fsdp2.py` will parse (`config`, the YAML as written) and where it runs."""

    config: dict[str, dict[str, Any]]
    version: str
    world: int
    nproc: int
    node_rank: int
    nnodes: int
    site: Site
    output_dir: str  # af_output_dir
    arch: ModelArch | None
    resume: str | None = None
    resume_reason: str = ""
    complete: str | None = None  # why the train step has nothing to do
    warnings: list[str] = field(default_factory=list)

    def value(self, name: str) -> Any:
        """The trainer's value of `section.key` (the YAML's, else the dataclass default), typed."""
        return View(self.config, self.version, self.world, None)[name]

    @property
    def yaml_path(self) -> str:
        return os.path.join(self.output_dir, CONFIG_FILE)

    @property
    def saved(self) -> str:
        """The trainer's `training.output_dir`: the house tree's checkpoint folder."""
        return OutputTree(self.output_dir).saved_checkpoints

    @property
    def checkpoints(self) -> str:
        return ckpt.root_of(self.saved)


def local(value: Any, *, hub: bool = False) -> Any:
    if not isinstance(value, str) or not value:
        return value
    expanded = os.path.expanduser(value)
    if hub and _HUB_ID.match(value) and not value.startswith(".") and not os.path.exists(expanded):
        return value
    return os.path.abspath(expanded)


def read(ctx: PlanContext, site: Site, *, strict_paths: bool) -> FSDP2Run:
    """Check `backend_config` for the FSDP2 trainer and build the YAML it will parse (ConfigError with every
    problem)."""
    cfg, bc = ctx.config, ctx.config.backend_config or {}
    release = site.version.release
    problems: list[Problem] = list(site.problems)
    warnings = list(site.warnings)
    if not fsdp2_keys.listed(release.version):
        problems.append(
            ctx.problem(
                TRAINER_KEY,
                f"MindSpeed-LLM {release.version} has no FSDP2 trainer (train_fsdp2.py is new in 26.0.0)",
                fix="set backend_config.mindspeed_llm_version: 26.1.0 with a 26.1.0 checkout, or "
                "trainer: megatron",
            )
        )
        raise ConfigError(problems)
    for section in MEGATRON_SECTIONS:
        if bc.get(section) not in (None, {}):
            problems.append(
                ctx.problem(
                    f"backend_config.{section}",
                    "is for the Megatron programs; train_fsdp2.py never reads it",
                    fix=f"remove backend_config.{section} (trainer: fsdp2 takes backend_config.fsdp2), or "
                    "use trainer: megatron",
                )
            )
    given = bc.get("fsdp2")
    if not isinstance(given, Mapping):
        problems.append(
            ctx.problem(
                SECTION_KEY,
                "required with trainer: fsdp2: the sections model, data, parallel, training, optimization",
                fix="write `fsdp2:` with at least model.model_name_or_path and data.dataset",
            )
        )
        raise ConfigError(problems)
    problems += fsdp2_keys.problems(given, release.version, ctx.loaded.source_of)
    # every section, as a mapping (a section that is not one is a problem above)
    config: dict[str, dict[str, Any]] = {
        s: dict(body) if isinstance(body := given.get(s), Mapping) else {} for s in fsdp2_keys.SECTIONS
    }
    out = os.path.abspath(cfg.af_output_dir)
    saved = OutputTree(out).saved_checkpoints
    if not config["model"].get("model_name_or_path") and cfg.model_name_or_path:
        config["model"]["model_name_or_path"] = cfg.model_name_or_path  # the experiment's HF model
    model = config["model"].get("model_name_or_path")
    if not model:
        problems.append(
            ctx.problem(
                SECTION_KEY + ".model.model_name_or_path",
                "required: the trainer loads the HF model (weights, config, tokenizer) from it",
                fix="set it to the HF model directory (or a hub id)",
            )
        )
    for name in PATH_KEYS:
        section, key = name.split(".", 1)
        if key in config[section]:
            config[section][key] = local(config[section][key], hub=key.endswith("name_or_path"))
    dataset = config["data"].get("dataset")
    if isinstance(dataset, Mapping) and "dataset_dir" not in config["data"] and "file_name" in dataset:
        # a file named in the experiment is relative to where the experiment is run, not to the checkout
        config["data"]["dataset"] = {**dataset, "file_name": local(dataset["file_name"])}
    resume, why = _resume(ctx, saved, problems)
    owned = {
        "training.output_dir": OwnedKey(
            saved, "af_output_dir", f"the plan sets it to {saved} (resume and the final HF weights read it)"
        ),
        "training.stage": OwnedKey(cfg.stage, "stage"),
        "training.save_total_limit": OwnedKey(cfg.save_total_limit, "save_total_limit"),
        "training.save_hf_weights": OwnedKey(
            bool(cfg.convert_mg2hf_at_last),
            "convert_mg2hf_at_last",
            "the trainer writes HF weights at the end when convert_mg2hf_at_last is true",
        ),
        "model.train_from_scratch": OwnedKey(cfg.ckpt_load_type == 0, "ckpt_load_type (0: random init)"),
        "training.resume_from_checkpoint": OwnedKey(
            resume,
            "train_auto_resume, or ckpt_load_type 2 with user_converted_ckpt_path",
            f"the plan sets it to {resume}" if resume else "the plan decides what to resume",
        ),
    }
    flat = {f"{s}.{k}": v for s, body in config.items() for k, v in body.items()}
    problems += owned_key_problems(ctx, SECTION_KEY + ".", flat, owned)
    if cfg.hf_save_dir:
        problems.append(
            ctx.problem(
                "hf_save_dir",
                f"the FSDP2 trainer writes the final HF weights into {saved} itself",
                fix=f"remove hf_save_dir (the HF weights will be in {saved})",
            )
        )
    for name, own in owned.items():
        section, key = name.split(".", 1)
        if own.value is None:
            config[section].pop(key, None)
        else:
            config[section][key] = own.value
    world = ctx.world_size
    config["parallel"].setdefault("fsdp_size", world)
    arch = arch_or_none(cfg.af_model_name, model if isinstance(model, str) else None)
    named = {p.key.removeprefix(SECTION_KEY + ".") for p in problems}
    view = View(config, release.version, world, arch.heads if arch else None)
    if not any(p.key.startswith(SECTION_KEY) for p in problems):
        for rule in broken(view, named):
            message = f"{rule.message} ({rule.source})"
            problems.append(ctx.problem(SECTION_KEY + "." + rule.key, message, rule.fix))
    if strict_paths and site.found and not os.path.isfile(os.path.join(site.directory, ENTRY)):
        problems.append(
            Problem(
                key="scripts_dir",
                message=f"{site.directory} has no {ENTRY} (MindSpeed-LLM 26.0.0 and later ship it)",
                fix="point scripts_dir at a MindSpeed-LLM 26.1.0 checkout",
            )
        )
    if problems:
        raise ConfigError(problems)
    run = FSDP2Run(
        config=config,
        version=release.version,
        world=world,
        nproc=ctx.devices.count,
        node_rank=cfg.env.NODE_RANK,
        nnodes=cfg.env.NNODES,
        site=site,
        output_dir=out,
        arch=arch,
        resume=resume,
        resume_reason=why,
        warnings=warnings,
    )
    run.complete = _complete(run)
    return run


def _resume(ctx: PlanContext, saved: str, problems: list[Problem]) -> tuple[str | None, str]:
    """What `training.resume_from_checkpoint` names: the newest resumable checkpoint of this run under
    train_auto_resume, else user_converted_ckpt_path with ckpt_load_type 2."""
    cfg = ctx.config
    if cfg.train_auto_resume:
        newest = ckpt.newest_resumable(ckpt.root_of(saved))
        if newest:
            return newest[1], f"train_auto_resume: the newest complete checkpoint, step {newest[0]}"
    given = cfg.user_converted_ckpt_path
    if not given:
        return None, ""
    path = os.path.abspath(os.path.expanduser(given))
    if cfg.ckpt_load_type != 2:
        problems.append(
            ctx.problem(
                "user_converted_ckpt_path",
                "the FSDP2 trainer loads the HF weights of fsdp2.model.model_name_or_path; it has no "
                "converted weights to load",
                fix="set ckpt_load_type: 2 to continue a global_step_N checkpoint, or remove it",
            )
        )
        return None, ""
    if os.path.isdir(path) and not ckpt.complete(path):
        problems.append(
            ctx.problem(
                "user_converted_ckpt_path",
                f"{path} is not a complete FSDP2 checkpoint (no {ckpt.DCP_METADATA})",
                fix="name a checkpoints/global_step_N folder the FSDP2 trainer saved",
            )
        )
    return path, "ckpt_load_type 2: user_converted_ckpt_path"


def _complete(run: FSDP2Run) -> str | None:
    if run.resume is None:
        return None
    m = re.search(r"global_step_(\d+)$", run.resume.rstrip("/"))
    max_steps = run.value("training.max_steps")
    if not m or max_steps <= 0 or int(m.group(1)) < max_steps:
        return None
    return (
        f"complete: {run.resume} is at step {m.group(1)} of max_steps {max_steps}; nothing to train (raise "
        "max_steps to train on, or remove the checkpoints to start over)"
    )


def config_text(run: FSDP2Run) -> str:
    body = {s: v for s, v in run.config.items() if v}
    head = (
        f"# train_fsdp2.py's configuration, written by ascendfactory-cli (MindSpeed-LLM {run.version}).\n"
        f"# torchrun ... {ENTRY} {run.yaml_path}\n"
    )
    return head + yaml.dump(body, Dumper=SafeDumper, sort_keys=False, default_flow_style=False)


def step_env(ctx: PlanContext) -> dict[str, str]:
    env = dict(STEP_ENV)
    timeout = ctx.collective_timeout_s()
    env["HCCL_CONNECT_TIMEOUT"] = str(timeout if timeout is not None else HCCL_TIMEOUT)
    env.update({v: ctx.environ[v] for v in VISIBLE_DEVICE_VARS if ctx.environ.get(v)})
    return env


def build_plan(ctx: PlanContext, run: FSDP2Run, facts: Mapping[str, Any]) -> Plan:
    cfg, out = ctx.config, run.output_dir
    logs = LogSpec(
        format="megatron",  # the trainer's "iteration N/M | consumed samples | ... | lm loss" lines
        naming=LogNaming(prefix=ctx.log_prefix),
        loss_rank="first",
        throughput=ThroughputSpec("megatron", devices=run.world),  # from its consumed tokens
    )
    plan = ctx.new_plan(
        out,
        logs,
        checkpoints=CheckpointSpec(root=run.checkpoints, scheme="mindspeed_fsdp2"),
        files={run.yaml_path: config_text(run)},
        warnings=run.warnings,
        facts=facts,
    )
    model = run.config["model"].get("model_name_or_path")
    inputs = [run.yaml_path, *([model] if isinstance(model, str) and os.path.isabs(model) else [])]
    if run.resume:
        inputs.append(run.resume)
    env = cfg.env
    plan.add(
        Step(
            name="train",
            role=Role.TRAIN,
            launch=Torchrun(
                python=ctx.python,
                entry=(ENTRY, run.yaml_path),
                nnodes=run.nnodes,
                nproc_per_node=run.nproc,
                node_rank=run.node_rank,
                master_addr=env.MASTER_ADDR,
                master_port=env.MASTER_PORT,
            ),
            env=step_env(ctx),
            cwd=run.site.directory,
            inputs=inputs,
            outputs=[run.saved],
            notes=[f"resumes from {run.resume} ({run.resume_reason})"]
            if run.resume and not run.complete
            else [],
            skip_reason=run.complete,
        )
    )
    plan.add(
        Step(
            name="plot",
            role=Role.PLOT,
            outputs=[OutputTree(out).loss_plot],
            skip_reason=None if run.node_rank == 0 else LOSS_ON_FIRST_NODE,
        )
    )
    plan.run = run
    return plan


def facts(run: FSDP2Run) -> dict[str, Any]:
    return {
        "trainer": "fsdp2",
        "mindspeed_llm_version": run.version,
        "mindspeed_llm_version_reason": run.site.version.reason,
        "mindspeed_llm_dir": run.site.directory if run.site.directory != PLACEHOLDER else PLACEHOLDER,
        "checkpoint_format": "torch_dcp",
        "fsdp2_config": run.yaml_path,
        "fsdp_size": run.value("parallel.fsdp_size"),
        "per_device_train_batch_size": run.value("training.per_device_train_batch_size"),
        "gradient_accumulation_steps": run.value("training.gradient_accumulation_steps"),
        "cutoff_len": run.value("data.cutoff_len"),
        "resume_from_checkpoint": run.resume,
    }
