"""The `mindspeed-mm` backend: MindSpeed-MM's own programs, run in its checkout (issue 17).

    preprocess  (skipped)   MindSpeed-MM tokenizes the data itself at start-up (basic_parameters.cache_dir)
    hf2mg       python -m checkpoint.convert_cli <Converter> hf_to_mm --cfg.*  -> converted_weight_TP*PP*/
    train       torchrun ... pretrain_vlm.py <GPT_ARGS> --mm-data/--mm-model/--mm-tool <OUTPUT_ARGS>
                --distributed-backend nccl                                     -> saved_checkpoints/
    mg2hf       python -m checkpoint.convert_cli <Converter> mm_to_hf --cfg.*  -> ckpt_converted_mg2hf/
    plot        training_loss.png from the last rank's log (loss key `loss`)

Written before the steps: exp-config.yaml and mm_config/{data,model,tools}.json (the example's files of the
generation the installed MindSpeed-MM expects, under the experiment's `data` / `model` / `tool`). Every
program runs in the MindSpeed-MM directory, so every path is absolute. Reading: `read.py`; checks:
`checks.py` and `rules.py` (flags, layout, pipeline lists, data.json keys), `convert.py` (mm-convert
options), `inputs.py` (files, environment); `load.py` (what training loads), `environment.py` (checkout,
generation, install, doctor).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.megatron.read import MegatronRun, hf2mg_skip_reason, to_flags
from ascendfactory.backends.common.megatron.skeleton import MG2HF_DISABLED, MegatronBackend, timeout_flag
from ascendfactory.backends.common.megatron.tree import OutputTree
from ascendfactory.backends.environment import Check, InstallStep
from ascendfactory.backends.mindspeed_mm import convert, environment, rules
from ascendfactory.backends.mindspeed_mm.checks import (
    checkpoint_args_problems,
    model_problems,
    sourced,
    training_problems,
)
from ascendfactory.backends.mindspeed_mm.environment import generation_problem, resolve_site
from ascendfactory.backends.mindspeed_mm.inputs import environment_problems, input_findings
from ascendfactory.backends.mindspeed_mm.keys import (
    data_json,
    preset_name,
    presets,
    source_file,
    training_defaults,
)
from ascendfactory.backends.mindspeed_mm.load import decide_load
from ascendfactory.backends.mindspeed_mm.read import (
    DATASET_KEY,
    LLM_KEY,
    PLAN_FLAGS,
    VARIABLE_FLAGS,
    VIT_KEY,
    MMRun,
    example_flags,
    get,
    merged_json,
    read_layout,
    read_sections,
    resolve_model,
)
from ascendfactory.backends.registry import register_backend
from ascendfactory.config.catalog import ModelArch
from ascendfactory.config.devices import VISIBLE_DEVICE_VARS
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.parallel import LayoutReport, ParallelDims
from ascendfactory.plan import LogSpec, Plan, Role, Step, ThroughputSpec

LEGACY = ("TP", "PP", "CP", "MBS", "GBS", "SEQ_LEN", "LR", "MIN_LR", "TRAIN_ITERS", "SEED", "SAVE_INTERVAL")


@register_backend
class MindSpeedMMBackend(MegatronBackend[MMRun]):
    name = "mindspeed-mm"
    description = "Ascend MindSpeed-MM (mm-convert, pretrain_vlm.py): Qwen2.5-VL full fine-tuning"
    stages = ("sft",)
    order = 5
    absolute_paths = True
    legacy_keys = {k: v for k, v in MegatronBackend.legacy_keys.items() if k in LEGACY}
    # Lines MindSpeed-MM prints for a configuration it refuses: a restart cannot fix them.
    unretryable = ("MindSpeed-MM Error", "One or more config files failed to load", "Key parameter missing")

    def memory_target(self, run: Any) -> MemoryTarget | None:
        from ascendfactory.backends.mindspeed_mm.memory import mm_target

        return mm_target(run) if isinstance(run, MegatronRun) else None

    # -- reading and validation -------------------------------------------------------------------------
    def read(self, ctx: PlanContext, *, strict_paths: bool) -> MegatronRun[MMRun]:
        problems: list[Problem] = self.stage_problems(ctx, ctx.config.stage)
        sections = read_sections(ctx, problems)
        bad_generation = generation_problem(
            sections.get("generation"), ctx.loaded.source_of("backend_config.generation")
        )
        if bad_generation:
            problems.append(bad_generation)
        site = resolve_site(
            ctx, strict=strict_paths, explicit=None if bad_generation else sections.get("generation")
        )
        problems += site.problems
        gen = site.generation
        arch, hf_dir, name = resolve_model(ctx, sections, gen, problems)
        if arch is None or hf_dir is None or name is None:
            raise ConfigError(problems)
        preset = presets(gen)["models"][name]
        data, model, tool = merged_json(site, preset, sections, gen)
        problems += self.top_level_keys(ctx, sections, data, hf_dir)
        problems += sourced(
            ctx,
            rules.data_json_problems(
                data, data_json(gen), generation=gen, names_file=source_file("data_json", gen)
            ),
        )
        user = dict(sections.get("training") or {})
        problems += training_problems(ctx, user, gen)
        tp, pp, cp, mbs, gbs, gbs_reason = read_layout(ctx, preset, user, problems)
        layout = OutputTree(os.path.abspath(ctx.config.af_output_dir))
        mm = MMRun(
            site=site,
            generation=gen,
            preset_name=name,
            preset=preset,
            arch=arch,
            hf_dir=hf_dir,
            data=data,
            model=model,
            tool=tool,
            flags=example_flags(preset),
            user_training=user,
            tp=tp,
            pp=pp,
            cp=cp,
            mbs=mbs,
            gbs=gbs,
            gbs_reason=gbs_reason,
            vit_layers=rules.layer_list(get(model, VIT_KEY)) or [],
            llm_layers=rules.layer_list(get(model, LLM_KEY)) or [],
            hf2mg={},
            mg2hf=None,
            layout=layout,
            warnings=list(site.warnings),
        )
        problems += sourced(ctx, model_problems(ctx, mm, arch))
        problems += environment_problems(ctx, tp=tp, cp=cp, generation=gen)
        run = self.megatron_run(ctx, mm, user)
        mm.mg2hf = convert.section_options(ctx, mm, sections, "mm_to_hf", problems)
        mm.hf2mg = convert.section_options(ctx, mm, sections, "hf_to_mm", problems) or {}
        run.hf2mg, run.mg2hf = mm.hf2mg, mm.mg2hf
        problems += sourced(ctx, convert.same_structure_problems(mm.hf2mg, mm.mg2hf))
        problems += sourced(ctx, convert.overwrite_problems(hf_dir, mm.hf2mg, mm.mg2hf))
        load = decide_load(ctx, mm, run, problems)
        run.load = load
        problems += checkpoint_args_problems(ctx, mm, load.load if load else None)
        self.fill_flags(mm, load, timeout_flag(ctx))
        for p in input_findings(
            ctx,
            data=data,
            training=mm.user_training,
            hf_dir=hf_dir,
            hf2mg_hf_dir=get(sections.get("convert_ckpt_hf2mg") or {}, "cfg.hf_config.hf_dir"),
            needs_index=mm.mg2hf is not None,
        ):
            if strict_paths:
                problems.append(p)
            else:
                mm.warnings.append(f"{p.key}: {p.message} ({p.fix})")
        if ctx.config.env.NNODES > 1 and ctx.config.shared_filesystem:
            mm.warnings.append(
                "multi-node: give each node its own data.json basic_parameters.cache_dir "
                "(MindSpeed-MM's README: "
                "not one mounted directory for every node), e.g. --backend_config.data.dataset_param."
                "basic_parameters.cache_dir=<a local path> per node"
            )
        self.raise_if(problems)
        run.warnings = mm.warnings
        return run

    @staticmethod
    def megatron_run(ctx: PlanContext, mm: MMRun, user: dict[str, Any]) -> MegatronRun[MMRun]:
        """The Megatron skeleton's view of the run (steps, logs, checkpoints); MindSpeed-MM's facts go in
        `framework`."""
        env = ctx.config.env
        world = env.NNODES * ctx.devices.count
        return MegatronRun(
            arch=mm.arch,
            model_dir=mm.hf_dir,
            stage="sft",
            training=user,
            preprocess=None,
            hf2mg={},
            mg2hf=None,
            report=LayoutReport(dims=ParallelDims(world, mm.tp, mm.pp, mm.cp)),
            layout=mm.layout,
            nnodes=env.NNODES,
            nproc_per_node=ctx.devices.count,
            node_rank=env.NODE_RANK,
            tp=mm.tp,
            pp=mm.pp,
            cp=mm.cp,
            num_layer_list=None,
            lora=False,
            warnings=mm.warnings,
            framework=mm,
        )

    @staticmethod
    def fill_flags(mm: MMRun, load: Any, timeout: dict[str, int]) -> None:
        """The example's flags with the plan's values, then the user's: the layout, the json files, the load
        decision, the save directory and the collective timeout (node_wait_timeout_s, when set)."""
        flags = mm.flags
        for flag, value in timeout.items():
            flags.set(flag, value)
        values = {"TP": mm.tp, "PP": mm.pp, "CP": mm.cp, "MBS": mm.mbs, "GBS": mm.gbs}
        for var, flag in VARIABLE_FLAGS.items():
            flags.set(flag, values[var])
        for flag, section in PLAN_FLAGS.items():
            flags.set(flag, mm.config_files[section], group="MM_ARGS")
        flags.set("save", mm.layout.saved_checkpoints, group="OUTPUT_ARGS")
        for key, value in mm.user_training.items():
            if key not in PLAN_FLAGS and key != "save" and key not in VARIABLE_FLAGS.values():
                flags.set(key, value)
        flags.set("load", os.path.abspath(os.path.expanduser(load.load)) if load and load.load else None)
        for flag, value in (load.flags if load else {}).items():
            if flag not in mm.user_training:
                flags.set(flag, value)

    @staticmethod
    def top_level_keys(
        ctx: PlanContext, sections: dict[str, Any], data: dict[str, Any], hf_dir: str
    ) -> list[Problem]:
        """The 6.5.90x top-level keys in data.json: `model_name_or_path` (the HF directory resolved above) and
        `dataset` fill what `data` does not set; `processed_data_dir` has no meaning here."""
        cfg = ctx.config
        dataset = data.get("dataset_param") or {}
        if isinstance(dataset.get("preprocess_parameters"), dict):
            dataset["preprocess_parameters"]["model_name_or_path"] = hf_dir
        basic = dataset.get("basic_parameters")
        if cfg.dataset and isinstance(basic, dict) and not get(sections.get("data"), DATASET_KEY):
            basic["dataset"] = ",".join(
                os.path.abspath(os.path.expanduser(p)) for p in cfg.dataset.split(",")
            )
        if cfg.processed_data_dir:
            return [
                ctx.problem(
                    "processed_data_dir",
                    "MindSpeed-MM reads no preprocessed data: it tokenizes the dataset at start-up",
                    fix="remove it; name the dataset in "
                    "backend_config.data.dataset_param.basic_parameters.dataset",
                )
            ]
        return []

    def facts(self, run: MegatronRun[MMRun]) -> dict[str, Any]:
        mm = run.framework
        general = {k: v for k, v in run.facts().items() if k not in ("num_layer_list", "data_path")}
        return {
            **general,
            "generation": mm.generation,
            "generation_reason": mm.site.generation_reason,
            "mindspeed_mm_dir": mm.site.directory,
            "example": f"{mm.preset_name} ({', '.join(mm.preset['source']['files'][:3])} "
            f"@ {mm.preset['source']['ref']})",
            "converter": mm.converter,
            "vit_pipeline_num_layers": mm.vit_layers,
            "llm_pipeline_num_layers": mm.llm_layers,
            "global_batch_size_from": mm.gbs_reason,
            "mm_config": mm.config_files,
        }

    # -- the plan ----------------------------------------------------------------------------------------
    def log_spec(self, ctx: PlanContext, run: MegatronRun[MMRun], logs: LogSpec) -> LogSpec:
        """Megatron's log lines with MindSpeed-MM's loss key and throughput (samples/s, no sequence)."""
        return dataclasses.replace(
            logs,
            loss_keys=("loss",),
            throughput=ThroughputSpec("mindspeed_mm", seq_length=None, devices=ctx.world_size),
        )

    def finish_plan(
        self, ctx: PlanContext, run: MegatronRun[MMRun], plan: Plan, *, strict_paths: bool
    ) -> None:
        """Called by the skeleton once the steps are built: adds what MindSpeed-MM needs besides the
        Megatron plan: the json files (before any step) and their paths as train inputs."""
        mm = run.framework
        for section, path in mm.config_files.items():
            doc = {"data": mm.data, "model": mm.model, "tool": mm.tool}[section]
            plan.files[path] = json.dumps(doc, indent=4, ensure_ascii=False) + "\n"
        train = plan.with_role(Role.TRAIN)
        if train is not None:
            train.inputs = [*train.inputs, *mm.config_files.values()]

    # -- steps -------------------------------------------------------------------------------------------
    def preprocess_step(self, ctx: PlanContext, run: MegatronRun[MMRun], shared: bool) -> Step:
        mm = run.framework
        cache = get(mm.data, "dataset_param.basic_parameters.cache_dir")
        return Step(
            name="preprocess",
            role=Role.PREPROCESS,
            skip_reason="MindSpeed-MM tokenizes the dataset when training starts "
            f"(rank 0 first; cache: {cache})",
        )

    def hf2mg_step(self, ctx: PlanContext, run: MegatronRun[MMRun], shared: bool) -> Step:
        mm = run.framework
        options = mm.hf2mg
        skip = hf2mg_skip_reason(ctx, run) or convert.converted_already(options["cfg.mm_dir"], mm.tp, mm.pp)
        if skip:
            return Step(name="hf2mg", role=Role.CONVERT, skip_reason=skip)
        return Step(
            name="hf2mg",
            role=Role.CONVERT,
            launch=convert_process(ctx, mm, "hf_to_mm", options),
            env=self.step_env(ctx, mm),
            cwd=mm.site.directory,
            inputs=[options["cfg.hf_config.hf_dir"]],
            outputs=[options["cfg.mm_dir"]],
            only_node0=shared,
            notes=[f"mm-convert {mm.converter} hf_to_mm (nested layer lists, MindSpeed-MM {mm.generation})"],
        )

    def train_defaults(self, run: MegatronRun[MMRun]) -> Mapping[str, Any]:
        return training_defaults(run.framework.generation)

    def train_flags(self, ctx: PlanContext, run: MegatronRun[MMRun]) -> dict[str, Any]:
        """The example's flags (GPT_ARGS, MM_ARGS, OUTPUT_ARGS, then the trailing ones, in its order) as
        `fill_flags` left them: the plan's values and the user's in place."""
        return run.framework.flags.merged()

    def train_entry(
        self, ctx: PlanContext, run: MegatronRun[MMRun]
    ) -> tuple[list[str], dict[str, str], str | None, list[str]]:
        mm = run.framework
        flags = run.launch.flags if run.launch else self.train_flags(ctx, run)
        env = self.step_env(ctx, mm)
        env.update({v: ctx.environ[v] for v in VISIBLE_DEVICE_VARS if ctx.environ.get(v)})
        load = flags.get("load")
        return (
            [mm.preset["entry"], *to_flags(flags)],
            env,
            mm.site.directory,
            [load] if isinstance(load, str) else [],
        )

    def mg2hf_step(self, ctx: PlanContext, run: MegatronRun[MMRun], shared: bool) -> Step:
        mm = run.framework
        if mm.mg2hf is None:
            return Step(name="mg2hf", role=Role.EXPORT, skip_reason=MG2HF_DISABLED)
        options = mm.mg2hf
        return Step(
            name="mg2hf",
            role=Role.EXPORT,
            launch=convert_process(ctx, mm, "mm_to_hf", options),
            env=self.step_env(ctx, mm),
            cwd=mm.site.directory,
            inputs=[options["cfg.mm_dir"]],
            outputs=[options["cfg.save_hf_dir"]],
            only_node0=shared,
            notes=[f"mm-convert {mm.converter} mm_to_hf (flat layer lists): reads the tracker of cfg.mm_dir"],
        )

    @staticmethod
    def step_env(ctx: PlanContext, mm: MMRun) -> dict[str, str]:
        """The example script's exports, except those the experiment's env sets itself (the user's win)."""
        own = ctx.config.env.extra_vars()
        return {k: v for k, v in mm.preset["exports"].items() if k not in own}

    # -- environment -------------------------------------------------------------------------------------
    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return environment.checks(environ)

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return environment.install_plan(environ)

    def model_problem(self, arch: ModelArch, experiment: str | None = None) -> str | None:
        if preset_name(arch.name, arch, environment.DEFAULT_GENERATION) is None:
            return f"'{arch.name}' has no MindSpeed-MM example (Qwen2.5-VL models only)"
        return None

    def template_values(self, arch: ModelArch, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        return environment.template_values(arch, devices=devices)


def convert_process(ctx: PlanContext, mm: MMRun, subcommand: str, options: Mapping[str, Any]) -> Any:
    from ascendfactory.backends.common.megatron.skeleton import process

    return process(convert.argv(ctx.python, mm.converter, subcommand, options))
