"""The `mindspeed-rl` backend: GRPO with MindSpeed-RL's own programs, on a Ray cluster.

    preprocess  python cli/preprocess_data.py mindspeed_rl_data --config-path <out>      (MindSpeed-RL dir)
    hf2mg       python convert_ckpt.py ... hf -> mg into converted_hf2mg_weight_TP*PP*   (MindSpeed-LLM dir)
    train       Ray: node 0 starts the head with {"NPU": n}, waits for every node, NPU and CPU the placement
                groups take, then runs the driver `python cli/train_grpo.py --config-path <out> --config-name
                mindspeed_rl_grpo` (its metric lines copied into logs/grpo_metrics-<time>.log); the other
                nodes join it
    mg2hf       python convert_ckpt.py ... mg -> hf from saved_checkpoints into converted_mg2hf_weight/
    plot        training_loss.png: the verifier reward and the response length, from node 0's log

The experiment is the shared MindSpeed-RL experiment of `backends/common/mindspeed_rl_experiment/` (also
planned by `torch` with `stage: grpo`): read and checked by `mindspeed_rl_experiment.read.read_config`
(MindSpeed-RL's keys and rules of the version in use), its load decision and filled yaml from
`mindspeed_rl_experiment.load`. This module adds what concerns this machine and MindSpeed-RL's own programs:
the checkouts, the cluster, the steps. Programs run with their checkout as cwd, so every path the plan writes
is absolute.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, ClassVar

from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.common.megatron.skeleton import MegatronBackend
from ascendfactory.backends.common.mindspeed_rl_experiment.load import decide_load, fill
from ascendfactory.backends.common.mindspeed_rl_experiment.memory import RLRun
from ascendfactory.backends.common.mindspeed_rl_experiment.read import (
    MindSpeedRLConfig,
    read_config,
    render_yaml,
)
from ascendfactory.backends.common.mindspeed_rl_experiment.shell import grpo_plan
from ascendfactory.backends.common.mindspeed_rl_experiment.trackers import MSRL_TRACKERS
from ascendfactory.backends.common.mindspeed_rl_experiment.tree import TRAIN_CONFIG, RLOutputTree
from ascendfactory.backends.environment import Check, InstallStep, ascend_toolkit_status, third_party_dir
from ascendfactory.backends.mindspeed_llm.converters import (
    SCRIPTS,
)
from ascendfactory.backends.mindspeed_rl import environment, steps
from ascendfactory.backends.mindspeed_rl.steps import Found
from ascendfactory.backends.registry import register_backend
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
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def runtime_env_problems(ctx: PlanContext, rl: MindSpeedRLConfig, found: Found) -> list[Problem]:
    """`rl_config.runtime_env_path`: cli/train_grpo.py's `main` opens it (relative to the MindSpeed-RL
    directory) before Ray starts; an empty or missing one fails there (IsADirectoryError, FileNotFoundError).
    Checked against the directory when there is one."""
    value = rl.rl.get("runtime_env_path")
    if "runtime_env_path" not in rl.rl or value is None:
        return []
    where = os.path.join(found.rl_dir, str(value))
    if isinstance(value, str) and value.strip() and (not found.rl_found or os.path.isfile(where)):
        return []
    return [
        ctx.problem(
            BC + "rl_config.runtime_env_path",
            f"{value!r} names no file in the MindSpeed-RL directory (cli/train_grpo.py opens "
            f"{where} before Ray starts)",
            fix="remove it (the default is configs/envs/runtime_env.yaml), or name a yaml file in "
            "the MindSpeed-RL directory",
        )
    ]


@register_backend
class MindSpeedRLBackend(Backend):
    name = "mindspeed-rl"
    description = "Ascend MindSpeed-RL GRPO (cli/train_grpo.py on Ray; MindSpeed-LLM's converters)"
    stages = ("grpo",)
    launcher = "ray"
    order = 4
    tracker_keys = MSRL_TRACKERS
    run_options: ClassVar[dict[str, Any]] = {**MegatronBackend.run_options, "stage": "grpo"}
    run_option_comments = MegatronBackend.run_option_comments  # Megatron checkpoints (iter_*), load flags
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
        layout = RLOutputTree(out)
        d = rl.derived
        arch = self.arch(ctx, rl, problems)
        load = decide_load(ctx, rl, layout, problems, warnings)
        user_data = rl.value("megatron_training.data_path") or rl.value("actor_config.data_path")
        rl, data_path = fill(ctx, rl, layout, load, problems, warnings, strict=strict_paths)
        problems += self.cluster(ctx, rl, warnings, strict=strict_paths)
        problems += runtime_env_problems(ctx, rl, found)
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
        plan.run = RLRun(rl, arch)
        return plan

    def memory_target(self, run: Any) -> Any:
        from ascendfactory.backends.common.mindspeed_rl_experiment.memory import rl_target

        return rl_target(run, engine="megatron")

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
        cpus = ctx.cpu_count
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
    def shell(
        self, ctx: PlanContext, rl: MindSpeedRLConfig, layout: RLOutputTree, warnings: list[str]
    ) -> Plan:
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
