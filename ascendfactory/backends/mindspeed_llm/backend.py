"""The `mindspeed-llm` backend: MindSpeed-LLM's own programs, run in its checkout (issue 6), for the
MindSpeed-LLM version the experiment targets (`versions.py`: 2.1.0 on Megatron core_r0.8.0, 26.1.0 on
core_v0.12.1; `backend_config.mindspeed_llm_version`, else the checkout's, else 26.1.0).

preprocess  python preprocess_data.py ...                          (the runner creates its output folder)
hf2mg       python convert_ckpt.py / convert_ckpt_v2.py hf -> mg   (see mindspeed_args.converters for v1 / v2)
train       torchrun ... pretrain_gpt.py (pt) | posttrain_gpt.py --stage sft (sft)
mg2hf       python convert_ckpt(_v2).py mg -> hf into ckpt_converted_mg2hf/ (or hf_save_dir), either converter
plot        training_loss.png from the last rank's log (in-process)

Every program runs with the MindSpeed-LLM directory as cwd (as its example scripts do), so every path the
plan passes is absolute. `backend_config` sections use MindSpeed-LLM's own flag names and are checked
against the real argument lists of that version in `keys/`. Flags filled by the plan (model architecture
from the catalog or config.json, `--split 100,0,0`, `--distributed-backend nccl`, the version's
`plan_flags`, ...) give way to the user's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.base import PlanContext, owned_key_problems
from ascendfactory.backends.common.megatron.config import SEQ_LENGTH
from ascendfactory.backends.common.megatron.read import (
    PATH_KEYS,
    MegatronRun,
    hf2mg_skip_reason,
    read_megatron_run,
    to_flags,
)
from ascendfactory.backends.common.megatron.skeleton import (
    MG2HF_DISABLED,
    TIMEOUT_FLAG,
    MegatronBackend,
    owned_save,
    process,
    timeout_flag,
)
from ascendfactory.backends.environment import Check, InstallStep, third_party_dir
from ascendfactory.backends.mindspeed_llm import environment
from ascendfactory.backends.mindspeed_llm.converters import (
    NAMES_KIND,
    SCRIPTS,
    V1_MLA_FAMILIES,
    ConverterChoice,
    choose_converter,
    hf2mg_options,
    mg2hf_command,
    mg2hf_options,
    v1_model_type,
    v2_mg2hf_warning,
)
from ascendfactory.backends.mindspeed_llm.environment import PLACEHOLDER, Site, resolve_site
from ascendfactory.backends.mindspeed_llm.fsdp2 import trainer as fsdp2_trainer
from ascendfactory.backends.mindspeed_llm.keys import (
    defaults,
    names_file,
    specs,
    unknown_keys,
    valid_names,
    value_problems,
)
from ascendfactory.backends.mindspeed_llm.model_flags import architecture_flags
from ascendfactory.backends.mindspeed_llm.rules import HYBRID_CP, broken_rules
from ascendfactory.backends.mindspeed_llm.versions import (
    DEFAULT,
    RELEASES,
    VERSIONS,
    Release,
    saved_format,
    version_fix,
    version_problem,
)
from ascendfactory.backends.mindspeed_llm.versions import KEY as VERSION_KEY
from ascendfactory.backends.registry import register_backend
from ascendfactory.config.catalog import ModelArch
from ascendfactory.config.devices import VISIBLE_DEVICE_VARS
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.plan import Plan, Role, Step

K = "backend_config.training."
CONVERTERS = tuple(SCRIPTS)
ENTRY_SCRIPTS = {"pt": "pretrain_gpt.py", "sft": "posttrain_gpt.py"}
# what a user does instead of a conversion step the targeted converter cannot run
YOURSELF = {
    "hf2mg": "convert the HF weights yourself and give them as user_converted_ckpt_path",
    "mg2hf": "set backend_config.convert_ckpt_mg2hf: null and convert the saved checkpoint yourself",
}
SECTION_NAMES = {"training": "training", "preprocess_data": "preprocess"}


def model_converter(arch: ModelArch, release: Release) -> dict[str, str]:
    """The template's `converter:` when `release`'s own converter does not take the model but the other
    one it ships does (26.1.0's convert_ckpt_v2.py has no glm4; its convert_ckpt.py has): empty otherwise."""
    default = release.converter
    other = "v1" if default == "v2" else "v2"
    takes = {
        k: (v1_model_type(arch) if k == "v1" else arch.model_type_hf)
        in (getattr(specs(NAMES_KIND[k], release.version).get("model-type-hf"), "choices", None) or ())
        for k in (default, other)
    }
    if takes[default] or not takes[other] or (other == "v2" and release.converter != "v2"):
        return {"model_converter": "", "model_converter_reason": ""}
    return {
        "model_converter": other,
        "model_converter_reason": f"MindSpeed-LLM {release.version}'s {SCRIPTS[default]} has no "
        f"--model-type-hf {arch.model_type_hf if default == 'v2' else v1_model_type(arch)}",
    }


def versions_converting(model_type: str) -> list[str]:
    """'VERSION, whose SCRIPT' for each MindSpeed-LLM version whose shipped converter (2.1.0: v1 only)
    accepts `--model-type-hf model_type` (keys/convert_*.txt, from each converter's argparse)."""
    return [
        f"{release.version}, whose {SCRIPTS[k]}"
        for release in RELEASES.values()
        for k in ("v1", "v2")
        if (k == "v1" or release.converter == "v2")
        and model_type
        in (getattr(specs(NAMES_KIND[k], release.version).get("model-type-hf"), "choices", None) or ())
    ]  # + convert sections: per converter


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


def cp_head_split(training: Mapping[str, Any], cp: int, version: str) -> int | None:
    """The part of CP that splits the attention heads under the context-parallel algorithm this version runs
    (the flag given, else the version's default: ulysses_cp_algo at 2.1.0, megatron_cp_algo at 26.1.0).
    Ulysses splits them by CP, the hybrid algorithms by ulysses-degree-in-cp, the ring algorithms not at all
    (MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py _validate_cp_args, lines 259-333; MindSpeed
    26.1.0_core_r0.12.1 mindspeed/arguments.py, lines 650-690). None: all of CP (a hybrid algorithm without
    a usable ulysses degree, which its own rule refuses)."""
    algo = training.get("context-parallel-algo") or defaults("training", version).get("context-parallel-algo")
    if algo == "ulysses_cp_algo":
        return cp
    if algo in HYBRID_CP:
        uly = training.get("ulysses-degree-in-cp")
        usable = isinstance(uly, int) and not isinstance(uly, bool) and uly >= 1 and cp % uly == 0
        return uly if usable else None
    return 1


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


@dataclass
class Found:
    """What reading the experiment found besides the Megatron facts: the checkout, the MindSpeed-LLM
    version it targets, the converter, and the checkpoint format training saves (`versions.saved_format`
    of the planned flags, set once they are)."""

    site: Site
    converter: ConverterChoice
    checkpoint_format: str = "torch"

    @property
    def release(self) -> Release:
        return self.site.version.release


@register_backend
class MindSpeedLLMBackend(MegatronBackend[Found]):
    name = "mindspeed-llm"
    description = "Ascend MindSpeed-LLM (Megatron): convert_ckpt, preprocess_data, pretrain/posttrain_gpt"
    order = 1
    absolute_paths = True
    # Megatron's check_for_nan_in_loss_and_grad: "Rank N: found NaN in local forward loss calculation" /
    # "... found NaN in local grad norm ...": a restart from the last checkpoint meets the same data again
    unretryable = ("found NaN in",)

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        """The Megatron programs (the skeleton), or with `backend_config.trainer: fsdp2` the FSDP2 trainer
        (`fsdp2/run.py`)."""
        trainer, problems = fsdp2_trainer.trainer_of(ctx)
        if trainer != "fsdp2":
            if problems:
                raise ConfigError(problems)
            return super().plan(ctx, strict_paths=strict_paths)
        from ascendfactory.backends.mindspeed_llm.fsdp2 import run as fsdp2  # its keys and rules: only here

        explicit = self.explicit_version(ctx, problems)
        site = resolve_site(ctx, strict=strict_paths, explicit_version=explicit)
        site.problems[:0] = problems
        run = fsdp2.read(ctx, site, strict_paths=strict_paths)
        return fsdp2.build_plan(ctx, run, fsdp2.facts(run))

    def memory_target(self, run: Any) -> MemoryTarget | None:
        if isinstance(run, MegatronRun):  # the Megatron programs' (no FSDP2 import for them)
            return super().memory_target(run)
        from ascendfactory.backends.mindspeed_llm.fsdp2 import run as fsdp2

        if isinstance(run, fsdp2.FSDP2Run):
            from ascendfactory.backends.mindspeed_llm.fsdp2.memory import fsdp2_target

            return fsdp2_target(run)
        return super().memory_target(run)

    def read(self, ctx: PlanContext, *, strict_paths: bool) -> MegatronRun[Found]:
        problems: list[Problem] = []
        if (ctx.config.backend_config or {}).get("fsdp2") is not None:
            problems.append(
                ctx.problem(
                    fsdp2_trainer.SECTION_KEY,
                    "is read only by the FSDP2 trainer; the Megatron programs would ignore it",
                    fix="add backend_config.trainer: fsdp2, or remove backend_config.fsdp2",
                )
            )
        explicit = self.explicit_version(ctx, problems)
        site = resolve_site(ctx, strict=strict_paths, explicit_version=explicit)
        problems += site.problems
        conv = self.converter(ctx, site, problems)
        problems += self.name_problems(ctx, conv, site.version.version)
        if any(p.message.startswith("must be a mapping") for p in problems):
            raise ConfigError(problems)  # the sections cannot be read further
        try:
            version = site.version.version
            run = read_megatron_run(
                ctx,
                framework=Found(site, conv),
                strict_paths=strict_paths,
                extra_keys=("converter", "mindspeed_llm_version", "trainer", "fsdp2"),
                cp_head_split=lambda training, cp: cp_head_split(training, cp, version),
            )
        except ConfigError as e:
            raise ConfigError(problems + e.problems) from None
        run.warnings += site.warnings
        problems += self.run_problems(ctx, run, run.warnings)
        run.launch = self.launch(ctx, run)
        problems += self.format_problems(ctx, run)
        problems += self.rule_problems(ctx, run, {p.key.removeprefix(K) for p in problems})
        self.raise_if(problems)
        return run

    def facts(self, run: MegatronRun[Found]) -> dict[str, Any]:
        found = run.framework
        return {
            **run.facts(),
            "mindspeed_llm_version": found.release.version,
            "mindspeed_llm_version_reason": found.site.version.reason,
            "megatron": found.release.megatron,
            "checkpoint_format": found.checkpoint_format,
            "converter": found.converter.version,
            "converter_reason": found.converter.reason,
            "mindspeed_llm_dir": found.site.directory,
        }

    def finish_plan(
        self, ctx: PlanContext, run: MegatronRun[Found], plan: Plan, *, strict_paths: bool
    ) -> None:
        found = run.framework
        self.raise_if(self.missing_converter(found.site, found.converter, plan, strict_paths))
        self.raise_if(self.v1_mla_above_tp1(run, plan))
        self.raise_if(self.converter_refuses_model_type(run, plan))

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return environment.checks(environ)

    def model_problem(self, arch: ModelArch, experiment: str | None = None) -> str | None:
        """A catalog model no converter of a supported MindSpeed-LLM version takes, or, for a template of
        one version (`<exp>-2.1.0`), none of that version's (`config` does not offer it: its plan's conversion
        steps would be refused, `converter_refuses_model_type`)."""
        pinned = next((v for v in VERSIONS if experiment and experiment.endswith(f"-{v}")), None)
        found = [
            o
            for o in versions_converting(arch.model_type_hf) + versions_converting(v1_model_type(arch))
            if pinned is None or o.startswith(f"{pinned},")
        ]
        if found:
            return None
        where = (
            f"MindSpeed-LLM {pinned}'s converter converts" if pinned else "MindSpeed-LLM's converters convert"
        )
        return (
            f"{arch.name} (--model-type-hf {arch.model_type_hf}) is not a model {where} "
            f"(keys/convert_v1_*.txt, convert_v2_*.txt)"
        )

    def template_values(self, arch: ModelArch, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        """`<exp>.yaml` targets the default version; `<exp>-2.1.0.yaml` sets mindspeed_llm_version itself."""
        return {
            **super().template_values(arch, devices=devices, tp=tp, pp=pp),
            "mindspeed_llm_version": DEFAULT,
            "mindspeed_llm_versions": " | ".join(VERSIONS),
            # the FSDP2 trainer's chat templates (mindspeed_llm/fsdp2/data/template.py at 26.1.0)
            "fsdp2_template": "qwen3" if arch.hf_model_type.startswith("qwen3") else "empty",
            **model_converter(arch, RELEASES[DEFAULT]),
        }

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return environment.install_plan(third_party_dir(environ), environment.install_version(environ))

    # -- validation ---------------------------------------------------------------------------------
    @staticmethod
    def explicit_version(ctx: PlanContext, problems: list[Problem]) -> str | None:
        """`backend_config.mindspeed_llm_version` when it names a planned version (else a problem)."""
        value = (ctx.config.backend_config or {}).get("mindspeed_llm_version")
        why = version_problem(value)
        if why:
            problems.append(ctx.problem(VERSION_KEY, why, fix=version_fix()))
            return None
        return value

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
        directory = None if site.directory == PLACEHOLDER else site.directory
        return choose_converter(explicit, directory, site.version.release)

    @staticmethod
    def name_problems(ctx: PlanContext, conv: ConverterChoice, version: str) -> list[Problem]:
        """Every key of every section that the receiving program of MindSpeed-LLM `version` does not
        accept."""
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
            problems += unknown_keys(options, kind, version=version, prefix=prefix, source_of=source_of)
            problems += value_problems(options, kind, version=version, prefix=prefix, source_of=source_of)
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
        conv = run.framework.converter
        bad_qkv = v2_mg2hf_warning(run.arch) if run.mg2hf is not None and conv.version == "v2" else None
        if bad_qkv:
            warnings.append(f"mg2hf: {bad_qkv}")
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

    def format_problems(self, ctx: PlanContext, run: MegatronRun[Found]) -> list[Problem]:
        """The final conversion reads the torch layout only (convert_ckpt_v2.py: tasks/checkpoint/
        convert_mg2hf.py get_pt_path_by_tpppep_rank; v1: loader_mg.py through Megatron's legacy load):
        training that saves another format cannot be converted back."""
        fmt, flag = saved_format((run.launch or self.launch(ctx, run)).flags, run.framework.release)
        run.framework.checkpoint_format = fmt
        if fmt == "torch" or run.mg2hf is None:
            return []
        return [
            ctx.problem(
                K + flag,
                f"training would save {fmt} checkpoints, which the final conversion "
                f"({run.framework.converter.script}) cannot read: it reads "
                "iter_N/mp_rank_XX/model_optim_rng.pt",
                fix="set ckpt-format: torch (what MindSpeed-LLM's example scripts pass), or "
                "convert_ckpt_mg2hf: null to keep the Megatron checkpoints",
            )
        ]

    def rule_problems(self, ctx: PlanContext, run: MegatronRun[Found], named: set[str]) -> list[Problem]:
        """The rules across flags (rules.py) on the flags the plan hands the training program."""
        release = run.framework.release
        return [
            ctx.problem(K + rule.key, f"{rule.message} ({rule.source_for(release)})", fix=rule.fix)
            for rule in broken_rules(
                (run.launch or self.launch(ctx, run)).flags, release, skip=named, world_size=run.world_size
            )
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

    @staticmethod
    def v1_mla_above_tp1(run: MegatronRun[Found], plan: Plan) -> list[Problem]:
        """MindSpeed-LLM 2.1.0's v1 convert_ckpt.py cannot write a DeepSeek-V2 model (multi-head latent
        attention) at TP > 1: its saver cuts the fused `linear_qkv` by TP (mindspeed_llm/tasks/checkpoint/
        saver.py `set_model_layer_attn` at v2.1.0) while deepseek_spec.py builds it as LinearNoTP, whole on
        every rank, so the copy fails ("The size of tensor a (136) must match the size of tensor b (68)", run
        on CPU by tests/integration/test_convert_matches_mindspeed_v1.py for deepseek2-lite; deepseek2 runs
        the same code, and its conversion at TP 1 is compared there too). Its DeepSeek-V2 examples convert
        at TP 1. (DeepSeek-V3 is converted by 2.1.0's own examples/mcore/deepseek3/convert_ckpt_deepseek3.py,
        not this saver.)"""
        step = plan.step("hf2mg")
        found = run.framework
        if (
            step is None
            or step.skipped
            or found.converter.version != "v1"
            or found.release.version != "2.1.0"
        ):
            return []
        if run.arch is None or v1_model_type(run.arch) not in V1_MLA_FAMILIES or run.tp <= 1:
            return []
        return [
            Problem(
                key="backend_config.training.tensor-model-parallel-size",
                message=f"{run.tp}: MindSpeed-LLM 2.1.0's convert_ckpt.py cannot convert the multi-head "
                f"latent attention of {run.arch.name} at TP > 1 (its saver cuts the whole-on-every-rank "
                "linear_qkv by TP), so the hf2mg step would fail",
                fix="use tensor-model-parallel-size 1 (as 2.1.0's DeepSeek scripts do), or give weights "
                "already converted at this TP as user_converted_ckpt_path",
            )
        ]

    @staticmethod
    def converter_refuses_model_type(run: MegatronRun[Found], plan: Plan) -> list[Problem]:
        """The `--model-type-hf` each conversion step hands its converter must be one of that converter's
        argparse choices at the targeted version (keys/convert_v1_*.txt, convert_v2_*.txt, generated from its
        parser): MindSpeed-LLM 2.1.0's convert_ckpt.py has no deepseek3, which 2.1.0 converts with its own
        examples/mcore/deepseek3/convert_ckpt_deepseek3.py, so such a step would stop at argparse after
        the job queued."""
        found = run.framework
        kind, version = found.converter.names_kind, found.release.version
        spec = specs(kind, version).get("model-type-hf")
        if spec is None or not spec.choices:
            return []
        problems = []
        for name in ("hf2mg", "mg2hf"):
            step = plan.step(name)
            argv = [] if step is None or step.skipped else step.argv
            if "--model-type-hf" not in argv[:-1]:
                continue
            given = argv[argv.index("--model-type-hf") + 1]
            if given in spec.choices:
                continue
            others = [o for o in versions_converting(given) if not o.startswith(f"{version},")]
            sibling = model_converter(run.arch, found.release) if run.arch is not None else {}
            problems.append(
                Problem(
                    key="model_name_or_path",
                    message=f"the {name} step would hand MindSpeed-LLM {version}'s {found.converter.script} "
                    f"--model-type-hf {given}, which it does not accept (its choices: keys/"
                    f"{names_file(kind, version)})",
                    fix=(
                        f"set backend_config.converter: {sibling['model_converter']} ("
                        f"{SCRIPTS[sibling['model_converter']]} of {version} converts it); or "
                        if sibling.get("model_converter")
                        else ""
                    )
                    + (
                        f"set backend_config.mindspeed_llm_version to {' or '.join(others)} converts it; or "
                        if others
                        else ""
                    )
                    + YOURSELF[name],
                )
            )
        return problems

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
        return defaults("training", run.framework.release.version)

    def train_flags(self, ctx: PlanContext, run: MegatronRun[Found]) -> dict[str, Any]:
        """Filled architecture flags, then the user's, then the plan's data / checkpoint / stage flags."""
        seq = (run.typed.seq_length if run.typed else None) or SEQ_LENGTH
        flags = architecture_flags(
            run.arch, tp=run.tp, pp=run.pp, seq_length=seq, version=run.framework.release.version
        )
        flags.update({"tokenizer-type": "PretrainedFromHF", "tokenizer-name-or-path": run.model_dir})
        flags.update(run.framework.release.plan_flags)  # what every example of the version passes
        user = {k: v for k, v in run.training.items() if k not in PLANNER_TRAIN_KEYS}
        flags.update(user)
        if "save-interval" not in user and isinstance(user.get("train-iters"), int):
            # the plan always passes --save, which Megatron accepts only with --save-interval: save at the end
            flags["save-interval"] = user["train-iters"]
        release = run.framework.release
        if (
            flags.get("wandb-project")
            and not flags.get("use-wandb")
            and "use-wandb" in valid_names("training", release.version)
        ):
            # Megatron turns W&B on by wandb-project; 26.1.0's DPOFeature.validate_args (features_manager/
            # dpo/dpo.py) also refuses wandb-exp-name (which report_to sets) without its use-wandb switch
            flags["use-wandb"] = True
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
