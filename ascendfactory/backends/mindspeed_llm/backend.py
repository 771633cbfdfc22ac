"""The `mindspeed-llm` backend: MindSpeed-LLM's own programs, run in its checkout (issue 6).

preprocess  python preprocess_data.py ...                          (the runner creates its output folder)
hf2mg       python convert_ckpt.py / convert_ckpt_v2.py hf -> mg   (see mindspeed_args.converters for v1 / v2)
train       torchrun ... pretrain_gpt.py (pt) | posttrain_gpt.py --stage sft (sft)
mg2hf       python convert_ckpt(_v2).py mg -> hf into ckpt_converted_mg2hf/ (or hf_save_dir), either converter
plot        training_loss.png from the last rank's log (in-process)

Every program runs with the MindSpeed-LLM directory as cwd (as its example scripts do), so every path the
plan passes is absolute. `backend_config` sections use MindSpeed-LLM's own flag names and are checked against
the real argument lists in `mindspeed_args/`. Flags filled by the plan (model architecture from the catalog
or config.json, `--split 100,0,0`, `--distributed-backend nccl`, ...) give way to the user's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.base import PlanContext, owned_key_problems
from ascendfactory.backends.doctor import Check
from ascendfactory.backends.install import InstallStep, third_party_dir
from ascendfactory.backends.megatron.config import SEQ_LENGTH
from ascendfactory.backends.megatron.run import (
    PATH_KEYS,
    MegatronRun,
    hf2mg_skip_reason,
    read_megatron_run,
    to_flags,
)
from ascendfactory.backends.megatron.skeleton import (
    MG2HF_DISABLED,
    TIMEOUT_FLAG,
    MegatronBackend,
    owned_save,
    process,
    timeout_flag,
)
from ascendfactory.backends.mindspeed_llm import environment
from ascendfactory.backends.mindspeed_llm.args import defaults, unknown_keys, value_problems
from ascendfactory.backends.mindspeed_llm.converters import (
    SCRIPTS,
    ConverterChoice,
    choose_converter,
    hf2mg_options,
    mg2hf_command,
    mg2hf_options,
)
from ascendfactory.backends.mindspeed_llm.model_flags import architecture_flags
from ascendfactory.backends.mindspeed_llm.rules import broken_rules
from ascendfactory.backends.mindspeed_llm.site import PLACEHOLDER, Site, resolve_site
from ascendfactory.backends.registry import register_backend
from ascendfactory.config.devices import VISIBLE_DEVICE_VARS
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.plan import Plan, Role, Step

K = "backend_config.training."
CONVERTERS = tuple(SCRIPTS)
ENTRY_SCRIPTS = {"pt": "pretrain_gpt.py", "sft": "posttrain_gpt.py"}
SECTION_NAMES = {"training": "training", "preprocess_data": "preprocess"}  # + convert sections: per converter
STEP_ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # every MindSpeed-LLM example exports it
# Training keys the plan decides from other settings (they are read, then set by the plan).
PLANNER_TRAIN_KEYS = ("data-path", "tokenizer-name-or-path", "load", "save", "stage")
# Planner values the user's own training value replaces.
USER_WINS = (
    TIMEOUT_FLAG,
    "split",
    "finetune",
    "no-load-optim",
    "no-load-rng",
    "is-instruction-dataset",
    "prompt-type",
    "distributed-backend",
)
SAVE_STATE_FLAGS = ("no-save-optim", "no-save-rng")
# Flags whose values are paths (megatron.run's list): made absolute, because the programs run in the
# MindSpeed-LLM directory.
PATH_FLAGS = PATH_KEYS
HUB_FLAGS = frozenset({"tokenizer-name-or-path"})  # may name a Hugging Face hub model
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def local_path(value: Any, *, hub: bool = True) -> Any:
    """Absolute form of a local path; numbers (data-path weights) stay as they are, and so do HF hub ids
    (`org/name` that is not a local path) where `hub` allows them (the tokenizer, the model)."""
    if isinstance(value, (list, tuple)):
        return [local_path(v, hub=hub) for v in value]
    if not isinstance(value, str) or not value or value == PLACEHOLDER:
        return value
    if re.fullmatch(r"[0-9.eE+-]+", value):
        return value
    expanded = os.path.expanduser(value)
    if hub and _HUB_ID.match(value) and not value.startswith(".") and not os.path.exists(expanded):
        return value
    return os.path.abspath(expanded)


def absolute(options: dict[str, Any]) -> dict[str, Any]:
    return {k: local_path(v, hub=k in HUB_FLAGS) if k in PATH_FLAGS else v for k, v in options.items()}


@dataclass(frozen=True)
class Found:
    """What reading the experiment found besides the Megatron facts: the checkout and the converter."""

    site: Site
    converter: ConverterChoice


@register_backend
class MindSpeedLLMBackend(MegatronBackend[Found]):
    name = "mindspeed-llm"
    description = "Ascend MindSpeed-LLM (Megatron): convert_ckpt, preprocess_data, pretrain/posttrain_gpt"
    order = 1
    absolute_paths = True
    # Megatron's check_for_nan_in_loss_and_grad: "Rank N: found NaN in local forward loss calculation" /
    # "... found NaN in local grad norm ...": a restart from the last checkpoint meets the same data again
    unretryable = ("found NaN in",)

    def read(self, ctx: PlanContext, *, strict_paths: bool) -> MegatronRun[Found]:
        site = resolve_site(ctx, strict=strict_paths)
        problems = list(site.problems)
        conv = self.converter(ctx, site, problems)
        problems += self.name_problems(ctx, conv)
        if any(p.message.startswith("must be a mapping") for p in problems):
            raise ConfigError(problems)  # the sections cannot be read further
        try:
            run = read_megatron_run(
                ctx, framework=Found(site, conv), strict_paths=strict_paths, extra_keys=("converter",)
            )
        except ConfigError as e:
            raise ConfigError(problems + e.problems) from None
        run.warnings += site.warnings
        if conv.defaulted_without_checkout:
            run.warnings.append(conv.reason)
        problems += self.run_problems(ctx, run, run.warnings)
        run.launch = self.launch(ctx, run)
        problems += self.rule_problems(ctx, run, {p.key.removeprefix(K) for p in problems})
        self.raise_if(problems)
        return run

    def facts(self, run: MegatronRun[Found]) -> dict[str, Any]:
        found = run.framework
        return {
            **run.facts(),
            "converter": found.converter.version,
            "converter_reason": found.converter.reason,
            "mindspeed_llm_dir": found.site.directory,
        }

    def finish_plan(
        self, ctx: PlanContext, run: MegatronRun[Found], plan: Plan, *, strict_paths: bool
    ) -> None:
        found = run.framework
        self.raise_if(self.missing_converter(found.site, found.converter, plan, strict_paths))

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return environment.checks(environ)

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return environment.install_plan(third_party_dir(environ))

    # -- validation ---------------------------------------------------------------------------------
    @staticmethod
    def converter(ctx: PlanContext, site: Site, problems: list[Problem]) -> ConverterChoice:
        explicit = (ctx.config.backend_config or {}).get("converter")
        if explicit is not None and explicit not in CONVERTERS:
            problems.append(
                ctx.problem(
                    "backend_config.converter",
                    f"'{explicit}' is not a converter",
                    fix="use v1 (convert_ckpt.py) or v2 (convert_ckpt_v2.py), or remove "
                    "the key to follow the installed MindSpeed-LLM",
                )
            )
            explicit = None
        return choose_converter(explicit, None if site.directory == PLACEHOLDER else site.directory)

    @staticmethod
    def name_problems(ctx: PlanContext, conv: ConverterChoice) -> list[Problem]:
        """Every key of every section that the receiving MindSpeed-LLM program does not accept."""
        kinds = {
            **SECTION_NAMES,
            "convert_ckpt_hf2mg": conv.names_kind,
            "convert_ckpt_mg2hf": conv.names_kind,
        }
        problems: list[Problem] = []
        for section, kind in kinds.items():
            options = (ctx.config.backend_config or {}).get(section)
            if options is None:
                continue
            if not isinstance(options, dict):
                problems.append(
                    ctx.problem(
                        f"backend_config.{section}",
                        "must be a mapping of flag: value",
                        fix=f"write `{section}:` followed by indented `flag-name: value` lines",
                    )
                )
                continue
            prefix, source_of = f"backend_config.{section}.", ctx.loaded.source_of
            problems += unknown_keys(options, kind, prefix=prefix, source_of=source_of)
            problems += value_problems(options, kind, prefix=prefix, source_of=source_of)
        return problems

    @staticmethod
    def run_problems(ctx: PlanContext, run: MegatronRun[Found], warnings: list[str]) -> list[Problem]:
        problems: list[Problem] = []
        if not run.model_dir:
            problems.append(
                ctx.problem(
                    K + "tokenizer-name-or-path",
                    "required: MindSpeed-LLM reads the "
                    "tokenizer, and the converters the HF config, from the HF model "
                    "directory",
                    fix="set it (or model_name_or_path) to the HF model directory",
                )
            )
        problems += owned_key_problems(ctx, K, run.training, owned_save(run.layout.saved_checkpoints))
        if run.lora and run.load and run.load.load and run.training.get("finetune") is False:
            problems.append(
                ctx.problem(
                    K + "finetune",
                    "LoRA fine-tuning cannot resume a checkpoint "
                    "(MindSpeed-LLM does not support it); finetune: false asks for a "
                    "resume",
                    fix="remove finetune: false (LoRA starts from the base weights each run)",
                )
            )
        for flag in SAVE_STATE_FLAGS:
            if run.training.get(flag):
                state = "optimizer" if flag.endswith("optim") else "RNG"
                impact = (
                    "train_auto_resume is on: resuming will fail"
                    if ctx.config.train_auto_resume
                    else "resuming them (ckpt_load_type 2, train_auto_resume) is impossible"
                )
                warnings.append(f"{K}{flag}: checkpoints hold no {state} state; {impact}")
        return problems

    def rule_problems(self, ctx: PlanContext, run: MegatronRun[Found], named: set[str]) -> list[Problem]:
        """The rules across flags (rules.py) on the flags the plan hands the training program."""
        return [
            ctx.problem(K + rule.key, f"{rule.message} ({rule.source})", fix=rule.fix)
            for rule in broken_rules((run.launch or self.launch(ctx, run)).flags, skip=named)
        ]

    @staticmethod
    def missing_converter(site: Site, conv: ConverterChoice, plan: Plan, strict: bool) -> list[Problem]:
        needed = any(s.role in (Role.CONVERT, Role.EXPORT) and not s.skipped for s in plan.steps)
        if not (strict and needed and site.found):
            return []
        if os.path.isfile(os.path.join(site.directory, conv.script)):
            return []
        other = "v1" if conv.version == "v2" else "v2"
        return [
            Problem(
                key="backend_config.converter",
                message=f"{conv.script} not found in {site.directory} ({conv.reason})",
                fix=f"set backend_config.converter: {other}, or install a MindSpeed-LLM version that "
                "ships it",
            )
        ]

    # -- steps --------------------------------------------------------------------------------------
    def preprocess_step(self, ctx: PlanContext, run: MegatronRun[Found], shared: bool) -> Step:
        if run.preprocess_input is None:
            return Step(
                name="preprocess",
                role=Role.PREPROCESS,
                skip_reason=f"preprocessed data given: {run.data_path}",
            )
        site = run.framework.site
        pre = dict(run.preprocess or {})
        options: dict[str, Any] = {
            "input": run.preprocess_input,
            "tokenizer-name-or-path": run.model_dir,
            "output-prefix": run.preprocess_prefix,
            "tokenizer-type": "PretrainedFromHF",
            "handler-name": run.handler,
        }
        if run.data_is_instruction and "prompt-type" not in pre and run.training.get("prompt-type"):
            options["prompt-type"] = run.training["prompt-type"]
        options = absolute(
            {**options, **pre, "input": run.preprocess_input, "output-prefix": run.preprocess_prefix}
        )
        out_dir = os.path.dirname(options["output-prefix"])
        # preprocess_data.py refuses an --output-prefix whose folder is missing: the runner creates it.
        return Step(
            name="preprocess",
            role=Role.PREPROCESS,
            launch=process([ctx.python, "preprocess_data.py", *to_flags(options)]),
            cwd=site.directory,
            inputs=[x for x in (options["input"], options["tokenizer-name-or-path"]) if x],
            outputs=[out_dir],
            mkdirs=[out_dir],
            only_node0=shared,
        )

    def hf2mg_step(self, ctx: PlanContext, run: MegatronRun[Found], shared: bool) -> Step:
        skip = hf2mg_skip_reason(ctx, run)
        if skip:
            return Step(name="hf2mg", role=Role.CONVERT, skip_reason=skip)
        found = run.framework
        conv = found.converter
        options = absolute(
            {
                **hf2mg_options(
                    conv.version,
                    arch=run.arch,
                    model_dir=run.model_dir or "",
                    save_dir=run.converted_dir,
                    tp=run.tp,
                    pp=run.pp,
                    num_layer_list=run.num_layer_list,
                    training=run.training,
                ),
                **run.hf2mg,
            }
        )
        return Step(
            name="hf2mg",
            role=Role.CONVERT,
            launch=process([ctx.python, conv.script, *to_flags(options)]),
            env=dict(STEP_ENV),
            cwd=found.site.directory,
            inputs=[options["load-dir"]],
            outputs=[options["save-dir"]],
            only_node0=shared,
            notes=[f"converter {conv.version}: {conv.reason}"],
        )

    def train_defaults(self, run: MegatronRun[Found]) -> Mapping[str, Any]:
        return defaults("training")

    def train_flags(self, ctx: PlanContext, run: MegatronRun[Found]) -> dict[str, Any]:
        """Filled architecture flags, then the user's, then the plan's data / checkpoint / stage flags."""
        seq = (run.typed.seq_length if run.typed else None) or SEQ_LENGTH
        flags = architecture_flags(run.arch, tp=run.tp, pp=run.pp, seq_length=seq)
        flags.update({"tokenizer-type": "PretrainedFromHF", "tokenizer-name-or-path": run.model_dir})
        user = {k: v for k, v in run.training.items() if k not in PLANNER_TRAIN_KEYS}
        flags.update(user)
        if "save-interval" not in user and isinstance(user.get("train-iters"), int):
            # the plan always passes --save, which Megatron accepts only with --save-interval: save at the end
            flags["save-interval"] = user["train-iters"]
        load = run.load
        planned: dict[str, Any] = {
            "data-path": run.data_path,
            "split": "100,0,0",
            "load": load.load if load else None,
            **(load.flags if load else {}),
            "save": run.layout.saved_checkpoints,
        }
        if run.stage == "sft":
            prompt = run.training.get("prompt-type") or (run.preprocess or {}).get("prompt-type")
            planned.update(
                {
                    "stage": "sft",
                    "is-instruction-dataset": run.data_is_instruction,
                    "prompt-type": prompt if run.data_is_instruction else None,
                }
            )
        planned["distributed-backend"] = "nccl"
        planned.update(timeout_flag(ctx))  # node_wait_timeout_s, when the experiment sets it
        for key, value in planned.items():
            if key in USER_WINS and key in user:
                continue
            flags[key] = value
        return absolute(flags)

    def train_entry(
        self, ctx: PlanContext, run: MegatronRun[Found]
    ) -> tuple[list[str], dict[str, str], str | None, list[str]]:
        flags = run.launch.flags if run.launch else self.train_flags(ctx, run)
        env = dict(STEP_ENV)
        env.update({v: ctx.environ[v] for v in VISIBLE_DEVICE_VARS if ctx.environ.get(v)})
        inputs = [x for x in (flags.get("data-path"), flags.get("load")) if isinstance(x, str)]
        return [ENTRY_SCRIPTS[run.stage], *to_flags(flags)], env, run.framework.site.directory, inputs

    def mg2hf_step(self, ctx: PlanContext, run: MegatronRun[Found], shared: bool) -> Step:
        if run.mg2hf is None:
            return Step(name="mg2hf", role=Role.EXPORT, skip_reason=MG2HF_DISABLED)
        found = run.framework
        conv = found.converter
        saved = run.layout.saved_checkpoints
        base = run.load.load if run.load and run.load.resume_iteration is None else None
        lora = None
        if run.lora and base:  # merge: base weights + the LoRA training output (ckpt_convert_*_lora.sh)
            lora = {
                "lora-load": saved,
                **{k: run.training.get(k) for k in ("lora-r", "lora-alpha", "lora-target-modules")},
            }
        options = absolute(
            {
                **mg2hf_options(
                    conv.version,
                    arch=run.arch,
                    load_dir=base if lora and base else saved,
                    save_dir=ctx.config.hf_save_dir or run.layout.mg2hf_dir,
                    model_dir=run.model_dir or "",
                    lora=lora,
                    training=run.training,
                ),
                **run.mg2hf,
            }
        )
        out = options["save-dir"]
        command, notes = mg2hf_command(
            conv.version,
            python=ctx.python,
            converter=[ctx.python, conv.script, *to_flags(options)],
            hf_dir=local_path(run.model_dir),
            out_dir=out,
        )
        notes[0] = f"converter {conv.version}: {conv.reason}"
        inputs = [x for x in (options["load-dir"], options.get("lora-load")) if x]
        return Step(
            name="mg2hf",
            role=Role.EXPORT,
            launch=process(command),
            env=dict(STEP_ENV),
            cwd=found.site.directory,
            inputs=inputs,
            outputs=[out],
            only_node0=shared,
            notes=notes,
        )
