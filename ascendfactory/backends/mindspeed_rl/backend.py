"""The `mindspeed-rl` backend: GRPO with MindSpeed-RL's own programs, on a Ray cluster.

    preprocess  python cli/preprocess_data.py mindspeed_rl_data --config-path <out>      (MindSpeed-RL dir)
    hf2mg       python convert_ckpt.py ... hf -> mg into converted_hf2mg_weight_TP*PP*   (MindSpeed-LLM dir)
    train       Ray: node 0 starts the head with {"NPU": n}, waits for every node, NPU and CPU the placement
                groups take, then runs the driver `python cli/train_grpo.py --config-path <out> --config-name
                mindspeed_rl_grpo` (its metric lines copied into logs/grpo_metrics-<time>.log); the other
                nodes join it
    mg2hf       python convert_ckpt.py ... mg -> hf from saved_checkpoints into converted_mg2hf_weight/
    plot        training_loss.png: the verifier reward and the response length, from node 0's log

The experiment is read and checked by `config.read_config` (MindSpeed-RL's keys and rules of the version in
use); this module adds what concerns this machine and the run: the checkouts, the paths, the load decision,
the files, the steps. Programs run with their checkout as cwd, so every path the plan writes is absolute.

Load decision (one rule, as for the Megatron backends; resume as MindSpeed-RL's docs/zh/algorithms/grpo.md):
1. `train_auto_resume: true` and saved_checkpoints holds a complete checkpoint: actor_config.load is it, with
   finetune / no_load_optim / no_load_rng false; in integrated mode the reference model keeps loading the
   original weights (rl_config.integrated_mode_config.ref_model_load_path).
2. else `ckpt_load_type`: 0 no weights; 1 the converted weights (user_converted_ckpt_path, or the hf2mg
   output) with finetune, no_load_optim, no_load_rng true; 2 user_converted_ckpt_path as a resume.
3. `actor_config.load` given replaces the path (no conversion); the user's own finetune / no_load_* win.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from typing import Any, ClassVar

from ascendfactory.backends import inputs
from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.doctor import Check, ascend_toolkit_status
from ascendfactory.backends.install import InstallStep, third_party_dir
from ascendfactory.backends.megatron.skeleton import MegatronBackend
from ascendfactory.backends.mindspeed_llm.converters import (
    SCRIPTS,
)
from ascendfactory.backends.mindspeed_rl import environment, steps
from ascendfactory.backends.mindspeed_rl.config import MindSpeedRLConfig, absolute, read_config, render_yaml
from ascendfactory.backends.mindspeed_rl.layout import TRAIN_CONFIG, RLLayout
from ascendfactory.backends.mindspeed_rl.shell import grpo_plan
from ascendfactory.backends.mindspeed_rl.steps import Found, Load
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.report_to import TrackerKeys
from ascendfactory.checkpoints.megatron import inspect, iteration_name
from ascendfactory.config.catalog import ModelArch, resolve_arch
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.plan import (
    Plan,
    Role,
    Step,
)

BC = "backend_config."
PLACEHOLDER_RL = "<MINDSPEED_RL_DIR>"
PLACEHOLDER_LLM = "<MINDSPEED_LLM_DIR>"
LOAD_FLAGS = ("finetune", "no_load_optim", "no_load_rng")
PATH_KEYS = ("tokenizer_name_or_path", "data_path", "load", "save")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


# MindSpeed-RL's tracker switches (config_cls/rl_config.py RLConfig): use_tensorboard, use_wandb with
# wandb_project / wandb_exp_name / wandb_save_dir, and (master) use_swanlab with swanlab_*; no MLflow.
MSRL_TRACKERS: dict[str, TrackerKeys] = {
    "tensorboard": TrackerKeys(set={"rl_config.use_tensorboard": True}),
    "wandb": TrackerKeys(
        set={
            "rl_config.use_wandb": True,
            "rl_config.wandb_project": "{project}",
            "rl_config.wandb_exp_name": "{run_name}",
            "rl_config.wandb_save_dir": "{location}",
        }
    ),
    "swanlab": TrackerKeys(
        set={
            "rl_config.use_swanlab": True,
            "rl_config.swanlab_project": "{project}",
            "rl_config.swanlab_exp_name": "{run_name}",
            "rl_config.swanlab_mode": "{mode}",
            "rl_config.swanlab_save_dir": "{location}",
        }
    ),
}


@register_backend
class MindSpeedRLBackend(Backend):
    name = "mindspeed-rl"
    description = "Ascend MindSpeed-RL GRPO (cli/train_grpo.py on Ray; MindSpeed-LLM's converters)"
    stages = ("grpo",)
    launcher = "ray"
    order = 4
    tracker_keys = MSRL_TRACKERS
    run_options: ClassVar[dict[str, Any]] = {**MegatronBackend.run_options, "stage": "grpo"}
    # MindSpeed-RL's configuration errors (validate_rl_args, BaseConfig.update): a restart cannot fix them.
    unretryable = (
        "is missing, causing the setup to fail",
        "should not be set when use_integrated_worker mode is on",
        "Sequence length exceeds vLLM max_model_len",
        "Verifier function and weight length mismatch",
    )

    # -- the plan ------------------------------------------------------------------------------------------
    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        cfg = ctx.config
        found = self.find(ctx, strict=strict_paths)
        problems = self.stage_problems(ctx, cfg.stage) + found.problems
        try:
            rl = read_config(ctx)
        except ConfigError as e:
            raise ConfigError(problems + e.problems) from None
        warnings = [*found.warnings, *rl.warnings]
        out = os.path.abspath(cfg.af_output_dir)
        layout = RLLayout(out)
        d = rl.derived
        arch = self.arch(ctx, rl, problems)
        load = self.load(ctx, rl, layout, problems, warnings)
        user_data = rl.value("megatron_training.data_path") or rl.value("actor_config.data_path")
        rl, data_path = self.fill(ctx, rl, layout, load, problems, warnings, strict=strict_paths)
        problems += self.cluster(ctx, rl, warnings, strict=strict_paths)
        mg2hf_off = rl.mg2hf is None
        if d.nnodes > 1 and not cfg.shared_filesystem and not mg2hf_off and d.tp * d.pp > d.npus_per_node:
            # Megatron saves data-parallel group 0's shards: on node 0 alone when TP x PP fits on a node
            warnings.append(
                f"shared_filesystem: false and TP x PP = {d.tp * d.pp} spans several nodes of "
                f"{d.npus_per_node} NPUs: saved_checkpoints is split over their disks, so the final "
                "conversion is skipped (convert it where the shards are gathered)"
            )
            mg2hf_off = True
        needs_llm = (load.convert and load.path is not None) or not mg2hf_off
        if needs_llm and arch is None:
            problems.append(
                ctx.problem(
                    "af_model_name",
                    "the weight conversion needs the model family (config.json in "
                    "megatron_training.tokenizer_name_or_path, or a catalog model)",
                    "point tokenizer_name_or_path at the HF model directory, or give converted weights "
                    "(user_converted_ckpt_path) and convert_ckpt_mg2hf: null",
                )
            )
        if needs_llm and strict_paths and not found.llm_found:
            problems.append(
                Problem(
                    "(environment)",
                    f"MindSpeed-LLM's converters not found in {found.llm_dir} ({found.llm_source})",
                    environment.LLM_FIX,
                )
            )
        self.raise_if(problems)

        plan = self.shell(ctx, rl, layout, warnings)
        shared = cfg.shared_filesystem and d.nnodes > 1
        plan.files[layout.train_yaml] = render_yaml(
            rl,
            header=f"Written by ascendfactory-cli for {cfg.af_model_name}/{cfg.exp_name}: "
            f"python cli/train_grpo.py --config-path {out} --config-name {TRAIN_CONFIG}",
        )
        plan.add(
            steps.preprocess_step(ctx, rl, layout, found, None if user_data else data_path, plan, shared)
        )
        plan.add(steps.hf2mg_step(ctx, rl, layout, found, load, arch, shared))
        plan.add(steps.train_step(ctx, rl, layout, found, load))
        plan.add(steps.mg2hf_step(ctx, rl, layout, found, arch, mg2hf_off, shared))
        plan.add(
            Step(
                name="plot",
                role=Role.PLOT,
                outputs=[layout.loss_plot],
                skip_reason=None if cfg.env.NODE_RANK == 0 else "the metrics are printed on node 0",
            )
        )
        return plan

    def memory_target(self, ctx: PlanContext, plan: Plan) -> Any:
        from ascendfactory.backends.megatron.memory import rl_target

        return rl_target(ctx, plan, engine="megatron")

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return environment.checks(environ)

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return environment.install_plan(third_party_dir(environ))

    def template_values(self, arch: ModelArch, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        """The rollout's TP: the largest divisor of the heads within the training TP (vLLM and R-V2)."""
        infer = max(x for x in range(1, tp + 1) if arch.heads % x == 0 and tp % x == 0)
        return {"infer_tp": infer, "npus": devices}

    # -- what the machine has ------------------------------------------------------------------------------
    def find(self, ctx: PlanContext, *, strict: bool) -> Found:
        rl_dir, rl_source = environment.find_checkout(ctx.config.scripts_dir, ctx.environ)
        llm_dir, llm_source = environment.find_converter_dir(ctx.environ)
        missing = environment.missing_entry_scripts(rl_dir)
        llm_found = any(os.path.isfile(os.path.join(llm_dir, s)) for s in SCRIPTS.values())
        found = Found(rl_dir, rl_source, llm_dir, llm_source, not missing, llm_found)

        def lacking(problem: Problem, warning: str) -> None:
            (found.problems.append(problem) if strict else found.warnings.append(warning))

        if missing:
            what = (
                f"{rl_dir} ({rl_source}) is not a MindSpeed-RL directory: {', '.join(missing)} missing"
                if os.path.isdir(rl_dir)
                else f"MindSpeed-RL directory {rl_dir} ({rl_source}) not found"
            )
            lacking(
                Problem("scripts_dir", what, environment.INSTALL_FIX, ctx.loaded.source_of("scripts_dir")),
                f"{what}; the plan shows {PLACEHOLDER_RL} as its directory",
            )
            if not strict:
                found.rl_dir = PLACEHOLDER_RL
        if not llm_found and not strict:
            found.llm_dir = PLACEHOLDER_LLM
        ok, detail = ascend_toolkit_status(ctx.environ)
        if not ok:
            lacking(
                Problem(
                    "(environment)",
                    f"Ascend toolkit: {detail}",
                    "source /usr/local/Ascend/ascend-toolkit/set_env.sh (and nnal/atb/set_env.sh), "
                    "then run again",
                ),
                f"Ascend toolkit: {detail}; a real run needs it sourced",
            )
        return found

    def arch(self, ctx: PlanContext, rl: MindSpeedRLConfig, problems: list[Problem]) -> ModelArch | None:
        model_dir = rl.actor.get("tokenizer_name_or_path")
        try:
            return resolve_arch(ctx.config.af_model_name, model_dir if isinstance(model_dir, str) else None)
        except ConfigError:
            return None

    # -- the load decision ---------------------------------------------------------------------------------
    def load(
        self,
        ctx: PlanContext,
        rl: MindSpeedRLConfig,
        layout: RLLayout,
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
                f"train_auto_resume: newest complete checkpoint {iteration_name(int(state.tracker))} in "
                "saved_checkpoints (optimizer and RNG too)",
                ref_path=original if cfg.ckpt_load_type != 0 else None,
                convert=not (explicit or user) and cfg.ckpt_load_type != 0,
            )
        if cfg.ckpt_load_type == 0:
            warnings.append("ckpt_load_type 0: GRPO starts from random weights (nothing is loaded)")
            return Load(
                explicit and absolute(explicit), {}, "ckpt_load_type 0: no weights loaded", convert=False
            )
        if cfg.ckpt_load_type == 2:
            if not (user or explicit):
                problems.append(
                    ctx.problem(
                        "user_converted_ckpt_path",
                        "ckpt_load_type 2 (resume) needs the saved checkpoint to resume from",
                        "set user_converted_ckpt_path to a saved_checkpoints directory, or use "
                        "ckpt_load_type 1",
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

    # -- filling the yaml ----------------------------------------------------------------------------------
    def fill(
        self,
        ctx: PlanContext,
        rl: MindSpeedRLConfig,
        layout: RLLayout,
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
            self.paths(ctx, rl, load, given_data=given), strict=strict, problems=problems, warnings=warnings
        )
        return rl, str(absolute(data_path) or "")

    def paths(
        self, ctx: PlanContext, rl: MindSpeedRLConfig, load: Load, *, given_data: bool
    ) -> list[Problem]:
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
                    "{path} is not an HF model directory with config.json (the tokenizer and the rollout "
                    "load it)"
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
                        "point data_path at the prefix cli/preprocess_data.py wrote, or remove it to "
                        "preprocess",
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

    # -- the cluster ----------------------------------------------------------------------------------------
    def cluster(
        self, ctx: PlanContext, rl: MindSpeedRLConfig, warnings: list[str], *, strict: bool
    ) -> list[Problem]:
        env, d = ctx.config.env, rl.derived
        out: list[Problem] = []
        if env.MASTER_ADDR in LOCAL_HOSTS:
            reach = " (nodes on other machines cannot reach it)" if env.NNODES > 1 else ""
            warnings.append(
                f"env.MASTER_ADDR is {env.MASTER_ADDR}{reach}: MindSpeed-RL's docs ask for node 0's own IP "
                "on the cluster network (HCCL), never localhost"
            )
        cpus = os.cpu_count() or 0
        if d.cpus_per_node > cpus:
            text = (
                f"rl_config.num_cpus_for_placement_group: each node needs {d.cpus_per_node:g} CPUs "
                f"({rl.rl.get('num_cpus_for_placement_group')} per NPU x "
                f"{min(d.npus_per_node, d.actor_npus)} NPUs"
                + (
                    f" + {rl.rl.get('num_cpus_for_local_task')} for the rule reward"
                    if rl.rl.get("rule_reward")
                    else ""
                )
                + f") but this machine has {cpus}: the placement group would wait forever"
            )
            if strict:
                out.append(
                    ctx.problem(
                        BC + "rl_config.num_cpus_for_placement_group",
                        text.split(": ", 1)[1],
                        "lower num_cpus_for_placement_group, or use nodes with more CPUs",
                    )
                )
            else:
                warnings.append(text)
        return out

    # -- the plan's shell and steps ------------------------------------------------------------------------
    def shell(self, ctx: PlanContext, rl: MindSpeedRLConfig, layout: RLLayout, warnings: list[str]) -> Plan:
        d = rl.derived
        return grpo_plan(
            ctx,
            rl,
            layout,
            reward_metrics=d.reward_metrics,
            warnings=warnings,
            facts={
                "mindspeed_rl_version": rl.keys.version,
                "version_reason": rl.version_reason,
                "converter": rl.converter,
                **{k: v for k, v in d.to_dict().items() if k not in ("verifier_weights",)},
            },
        )


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
