"""The `verl` backend: `python -m verl.trainer.main_ppo` on a Ray cluster, in verl's own environment.

    check   (CHECK)   programs/verl_check.py: verl's own Hydra composition, validate_config and
                      OmegaConf.resolve on the same overrides, what main_ppo runs before ray.init
    train   (TRAIN)   programs/ray_node.py on every node: node 0 starts the Ray head, waits for the nodes and
                      the resources verl will ask for, runs `python -m verl.trainer.main_ppo <overrides>`,
                      and stops the cluster it started; the others join it
    merge   (EXPORT)  programs/verl_merge.py: `python -m verl.model_merger merge` of the newest
                      saved_checkpoints/global_step_N/actor into .../actor/huggingface
    plot    (PLOT)    training_loss.png: critic/score/mean and response_length/mean, raw and smoothed

Before anything starts, every problem at once: the overrides composed against verl's own config
(`composer`), verl's rules and the ones it checks only on the workers (`rules`), the prompts longer than
`data.max_prompt_length` in the data files (`prompts`), the Ray CPUs TransferQueue and the workers need,
the environment and, for a real run, an accelerator (verl 0.9.1 has no CPU platform and its rollouts need
vLLM, SGLang or TensorRT-LLM on a GPU or NPU).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from ascendfactory.backends.base import EXP_CONFIG, Backend, PlanContext
from ascendfactory.backends.common.hydra.schema import get_path
from ascendfactory.backends.environment import Check, InstallStep
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.report_to import TrackerKeys, client_check_args
from ascendfactory.backends.verl import composer, environment, prompts, rules
from ascendfactory.backends.verl import read as verl_read
from ascendfactory.backends.verl.memory import VerlLaunch
from ascendfactory.backends.verl.programs import PROGRAMS_DIR
from ascendfactory.checkpoints.verl import TRACKER
from ascendfactory.config.devices import detect_accelerator
from ascendfactory.config.yamlio import SafeDumper
from ascendfactory.errors import BackendNotRunnableError, Problem
from ascendfactory.monitors import TensorboardConfig
from ascendfactory.output_tree import OutputTree
from ascendfactory.plan import (
    CheckpointSpec,
    LogNaming,
    LogSpec,
    Plan,
    Process,
    Ray,
    Role,
    Step,
    ThroughputSpec,
    safe_name,
)
from ascendfactory.secrets import mask_secrets

BC = "backend_config."
MERGE_PROGRAM = os.path.join(PROGRAMS_DIR, "verl_merge.py")
CHECK_PROGRAM = os.path.join(PROGRAMS_DIR, "verl_check.py")
DRIVER = ("-m", "verl.trainer.main_ppo")
# Ray resources verl asks for (0.9.1): every worker process's placement-group bundle holds
# `max_colocate_count` (3) CPUs and one device (single_controller/ray/base.py, STRICT_PACK per node);
# TransferQueue holds one CPU for its controller and one per storage unit (transfer_queue/controller.py,
# storage/simple_storage.py); the TaskRunner actor needs one CPU to be scheduled.
CPUS_PER_WORKER = 3
TQ_UNITS_KEY = "transfer_queue.backend.SimpleStorage.num_data_storage_units"
PLOT_METRICS = ("critic/score/mean", "response_length/mean")
SUMMARY_METRICS = (
    "critic/score/mean",
    "critic/rewards/mean",
    "response_length/mean",
    "response_length/clip_ratio",
    "actor/entropy",
    "actor/kl_loss",
    "actor/pg_clipfrac",
    "actor/grad_norm",
    "timing_s/step",
    "perf/max_memory_allocated_gb",
)
NO_ACCELERATOR = (
    "verl cannot train on this machine: it has no GPU or NPU (verl 0.9.1 has no CPU platform, and its "
    "rollouts need vLLM, SGLang or TensorRT-LLM on an accelerator). The experiment is valid; nothing was "
    "started or written. Run the same command on a GPU or NPU node; `train --dry-run` shows the plan here."
)


# verl's trackers (verl/utils/tracking.py `Tracking`): `trainer.logger` names them, `trainer.project_name` /
# `trainer.experiment_name` are the project and run; MLflow reads MLFLOW_TRACKING_URI (and continues
# MLFLOW_RUN_ID through `mlflow.start_run`), SwanLab SWANLAB_LOG_DIR / SWANLAB_MODE, TensorBoard
# TENSORBOARD_DIR; W&B's run id is verl's own, `<project>--<experiment>`.
VERL_NAMES = {"trainer.project_name": "{project}", "trainer.experiment_name": "{run_name}"}
VERL_TRACKERS: dict[str, TrackerKeys] = {
    "tensorboard": TrackerKeys(append={"trainer.logger": "tensorboard"}, set=VERL_NAMES),
    "mlflow": TrackerKeys(append={"trainer.logger": "mlflow"}, set=VERL_NAMES),
    "wandb": TrackerKeys(append={"trainer.logger": "wandb"}, set=VERL_NAMES, run_id="{project}--{run_name}"),
    "swanlab": TrackerKeys(append={"trainer.logger": "swanlab"}, set=VERL_NAMES),
}
# The 6.5.90x top-level input keys and where verl takes them (its Hydra keys): refused, never ignored.
TOP_LEVEL_INPUTS = {
    "model_name_or_path": "actor_rollout_ref.model.path",
    "dataset": "data.train_files",
    "processed_data_dir": "data.train_files (verl reads parquet files, no preprocessed prefix)",
}


@register_backend
class VerlBackend(Backend):
    name = "verl"
    description = "Volcano Engine RL: python -m verl.trainer.main_ppo on Ray, in its own environment"
    stages = ("ppo", "grpo", "dapo")
    launcher = "ray"
    order = 3
    tracker_keys = VERL_TRACKERS
    # No `stage` here: a template's algorithm keys say what it is (stage, when given, must agree).
    run_options: ClassVar[dict[str, Any]] = {
        "ckpt_load_type": 1,
        "train_auto_resume": "true",
        "save_total_limit": 0,
    }
    run_option_comments: ClassVar[dict[str, str]] = {
        "ckpt_load_type": "1: start from the HF weights at actor_rollout_ref.model.path (or "
        "user_converted_ckpt_path). 2: resume from user_converted_ckpt_path, a global_step_N directory "
        "(trainer.resume_mode: resume_path). 0 is refused: verl always loads weights.",
        "train_auto_resume": "Fault recovery: trainer.resume_mode auto, from the newest global_step_N in "
        "{af_output_dir}/saved_checkpoints; when training fails, and whenever the same command is run again.",
        "save_total_limit": "Keep the newest N global_step_N checkpoints (trainer.max_actor_ckpt_to_keep and "
        "max_critic_ckpt_to_keep); 0 keeps all.",
    }
    # verl's own messages for configuration errors a restart cannot fix (validate_config, Hydra, the
    # config classes), and a cluster without the devices asked for.
    unretryable = (
        "Could not override",
        "must be divisible by",
        "Please set at least one of",
        "You have set both",
        "Invalid loss_agg_mode",
        "must be >= actor.ppo_mini_batch_size",
        "is less than total desired GPUs",
        "num_samples should be a positive integer value",
    )

    def template_values(self, arch: Any, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        heads = getattr(arch, "heads", 0) or 1
        rollout_tp = max(t for t in (1, 2, 4, 8) if heads % t == 0 and devices % t == 0)
        return {"rollout_tp": rollout_tp}

    def memory_target(self, run: Any) -> Any:
        from ascendfactory.backends.verl.memory import verl_target

        return verl_target(run)

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return environment.checks(environ, detect_accelerator())

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return environment.install_steps(environ)

    # -- plan: read -> VerlRun -> composed and checked (Checked) -> plan shell -> steps --------------------
    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        machine = detect_accelerator()
        found = Findings(list(self.stage_problems(ctx, ctx.config.stage)))
        accelerator = _planned_device(ctx, machine, found)
        run = _read(ctx, accelerator, found)
        checked = _compose(ctx, run, strict_paths, found)
        _check_rules(checked, found)
        _check_resources(ctx, checked, accelerator, strict_paths, found)
        if strict_paths and machine == "cpu":
            if not found.problems:
                raise BackendNotRunnableError(NO_ACCELERATOR)
            # named with the experiment's own problems: every reason at once, not one per try
            found.problems.append(
                Problem(
                    key="(environment)",
                    message="this machine has no GPU or NPU: verl 0.9.1 cannot train here (no CPU platform; "
                    "its rollouts need vLLM, SGLang or TensorRT-LLM on an accelerator)",
                    fix="run the same command on a GPU or NPU node; `train --dry-run` shows the plan here",
                )
            )
        self.raise_if(found.problems)
        if machine == "cpu":
            found.warnings.append(
                "no GPU or NPU on this machine: a real `train` of this experiment stops before Ray starts "
                "(verl 0.9.1 has no CPU platform; its rollouts need vLLM/SGLang on an accelerator)"
                + (f"; planned for trainer.device {accelerator}" if accelerator != "cpu" else "")
            )
        plan = _plan_shell(ctx, checked, _device(accelerator), found.warnings)
        step_env = _step_env(
            checked.env,
            accelerator,
            plan.output_dir,
            ctx.config.env.NODE_RANK,
            ctx.config.tensorboard,
            ctx.environ,
        )
        plan.add(_check_step(ctx, checked, step_env))
        plan.add(_train_step(ctx, checked, accelerator, step_env))
        plan.add(
            self._merge_step(
                checked.config,
                run,
                _checkpoint_root(ctx),
                checked.python,
                step_env,
                ctx.config,
                checked.facts,
            )
        )
        plan.add(
            Step(
                name="plot",
                role=Role.PLOT,
                outputs=[plan.tree.loss_plot],
                skip_reason=None
                if ctx.config.env.NODE_RANK == 0
                else "verl prints its metrics on the first node",
            )
        )
        plan.run = VerlLaunch(checked.config, ctx.world_size, ctx.config.af_model_name)
        return plan

    def _merge_step(self, config, run, root, py, step_env, cfg, facts) -> Step:  # noqa: ANN001
        strategy = str(get_path(config, ["actor_rollout_ref", "actor", "strategy"], "fsdp"))
        backend = "megatron" if strategy == "megatron" else "fsdp"
        argv: tuple[str, ...] = (py, MERGE_PROGRAM, root, "--backend", backend)
        extra = []
        if get_path(config, ["actor_rollout_ref", "model", "trust_remote_code"], False) is True:
            extra.append("--trust-remote-code")
        if extra:
            argv = (*argv, "--", *extra)
        save_freq = get_path(config, ["trainer", "save_freq"], -1)
        skip = None
        if not run.options.merge:
            skip = "backend_config.merge: false"
        elif strategy not in ("fsdp", "fsdp2", "megatron"):
            skip = f"verl's model merger reads FSDP and Megatron checkpoints, not {strategy}"
        elif not isinstance(save_freq, int) or save_freq <= 0:
            skip = f"trainer.save_freq is {save_freq}: verl saves no checkpoint to merge"
        elif cfg.env.NODE_RANK != 0 and not cfg.shared_filesystem:
            skip = "the merge runs on NODE_RANK 0"
        steps_total = prompts.total_steps(config, None) or facts.get("total_training_steps")
        notes = ["resolves the newest complete global_step_N, then runs python -m verl.model_merger merge"]
        if steps_total:
            notes.append(
                f"expected: {root}/global_step_{steps_total}/actor -> .../actor/huggingface "
                f"({steps_total} training steps)"
            )
        return Step(
            name="merge",
            role=Role.EXPORT,
            launch=Process(argv),
            env=step_env,
            inputs=[os.path.join(root, TRACKER)],
            only_node0=True,
            skip_reason=skip,
            notes=notes,
        )


@dataclass
class Findings:
    """The problems and warnings the plan gathers before it refuses or plans (every problem at once)."""

    problems: list[Problem]
    warnings: list[str] = field(default_factory=list)

    def extend(self, problems: Iterable[Problem], *, top: Collection[str] = ()) -> None:
        """Problems keyed in verl's config, named under backend_config (a key in `top`: a top-level key)."""
        self.problems += [p if p.key in top else dataclasses.replace(p, key=BC + p.key) for p in problems]


@dataclass
class Checked:
    """The run composed into verl's own config, with what the checks found out on the way."""

    run: verl_read.VerlRun
    env: str  # the verl environment
    env_source: str  # where its path came from
    lacking: list[str]  # what the environment lacks (a dry run goes on with the shipped key lists)
    composition: composer.Composition
    view: rules.View  # the composed config as the rules read it
    need_cpus: int = 0  # the Ray CPUs verl asks for
    facts: dict[str, Any] = field(default_factory=dict)  # the data's facts (prompts.check)

    @property
    def config(self) -> dict[str, Any]:
        return self.composition.config

    @property
    def python(self) -> str:
        return environment.python_of(self.env)


def _device(accelerator: str) -> str:
    return accelerator if accelerator in ("npu", "cuda") else "cpu"


DEVICES = ("npu", "cuda")


def _planned_device(ctx: PlanContext, machine: str, found: Findings) -> str:
    """The device the plan is for: the machine's, or `backend_config.trainer.device` (npu | cuda) on a
    machine without one (a dry run preparing an Ascend job elsewhere). verl picks the device itself when
    torch_npu is installed (verl/plugin/platform/platform_npu.py is_platform_available); the plan writes
    `trainer.device` so that the job, its Ray resources ("NPU") and its logs say which."""
    trainer = (ctx.config.backend_config or {}).get("trainer")
    asked = trainer.get("device") if isinstance(trainer, dict) else None
    if asked is None or machine != "cpu":
        return machine  # a value that differs from the machine's is refused with the owned keys
    if asked not in DEVICES:
        found.problems.append(
            Problem(
                "backend_config.trainer.device",
                f"'{asked}' is not a device verl 0.9.1 trains on",
                "use npu (Ascend: vLLM-Ascend rollouts, HCCL) or cuda, or remove it",
            )
        )
        return machine
    return str(asked)


def _checkpoint_root(ctx: PlanContext) -> str:
    return OutputTree(os.path.abspath(ctx.config.af_output_dir)).saved_checkpoints


def _read(ctx: PlanContext, accelerator: str, found: Findings) -> verl_read.VerlRun:
    """backend_config read into verl's overrides (`run.read`); the top-level inputs verl does not read."""
    cfg = ctx.config
    run = verl_read.read(
        cfg.backend_config,
        stage=cfg.stage,
        af_model_name=cfg.af_model_name,
        exp_name=cfg.exp_name,
        output_dir=os.path.abspath(cfg.af_output_dir),
        nnodes=cfg.env.NNODES,
        devices_per_node=ctx.devices.count,
        device=_device(accelerator),
        train_auto_resume=cfg.train_auto_resume,
        ckpt_load_type=cfg.ckpt_load_type,
        user_converted_ckpt_path=cfg.user_converted_ckpt_path,
        save_total_limit=cfg.save_total_limit,
        tensorboard=cfg.tensorboard,
        cwd=ctx.cwd,
    )
    found.extend(run.problems, top=("ckpt_load_type", "user_converted_ckpt_path"))
    found.extend(
        [
            Problem(key, "verl does not read this top-level key", f"give it as backend_config.{where}")
            for key, where in TOP_LEVEL_INPUTS.items()
            if getattr(cfg, key) is not None
        ],
        top=TOP_LEVEL_INPUTS,
    )
    return run


def _compose(ctx: PlanContext, run: verl_read.VerlRun, strict_paths: bool, found: Findings) -> Checked:
    """The verl environment (what it lacks: a problem on a real run), and the overrides composed against
    verl's own config (in that environment when it is complete, else against the shipped key lists)."""
    env, env_source = environment.find_env(run.options.env_dir, ctx.environ)
    lacking = environment.missing(env)
    if lacking:
        what = f"verl environment {env} ({env_source}) lacks {', '.join(lacking)}"
        if strict_paths:
            found.extend([Problem("env_dir", what, environment.INSTALL_FIX)])
        else:
            found.warnings.append(f"{what}: {environment.INSTALL_FIX}; checked against the shipped key lists")
    py = environment.python_of(env)
    composition = composer.compose(None if lacking else py, run, dict(ctx.environ))
    found.warnings += composition.warnings
    found.extend(composition.problems)
    config = composition.config
    model_path = str(get_path(config, ["actor_rollout_ref", "model", "path"], "") or "")
    heads, kv_heads = _heads(model_path, ctx.config.af_model_name)
    view = rules.View(config, user=run.user, schema=run.schema, heads=heads, kv_heads=kv_heads)
    return Checked(run, env, env_source, lacking, composition, view)


def _check_rules(checked: Checked, found: Findings) -> None:
    """verl's rules over the composed config (a key already named is not named twice)."""
    already = {p.key for p in found.problems}
    found.extend(p for p in rules.run(checked.view) if BC + p.key not in already)


def _check_resources(
    ctx: PlanContext, checked: Checked, accelerator: str, strict_paths: bool, found: Findings
) -> None:
    """The data (prompt lengths), the model path, the Ray CPUs and the rollout engine."""
    config, run = checked.config, checked.run
    data_facts, data_problems, data_warnings = prompts.check(
        config, checked.view.int("data.train_batch_size"), strict=strict_paths
    )
    checked.facts.update(data_facts)
    found.extend(data_problems)
    found.warnings += data_warnings
    model_path = str(get_path(config, ["actor_rollout_ref", "model", "path"], "") or "")
    if model_path and not os.path.isdir(os.path.expanduser(model_path)):
        found.warnings.append(
            f"{BC}actor_rollout_ref.model.path: '{model_path}' is not a directory here; verl "
            "will look it up as a Hugging Face hub id on every node"
        )
    nnodes, per_node = ctx.config.env.NNODES, ctx.devices.count
    checked.need_cpus = _cpu_need(config, nnodes, per_node)
    offered = run.num_cpus if run.num_cpus is not None else float(ctx.cpu_count)
    short = _cpu_shortage(checked.need_cpus, offered, nnodes, per_node, user_set=run.num_cpus is not None)
    if short:  # this machine's CPUs matter only where it would run
        if (strict_paths and accelerator != "cpu") or run.num_cpus is not None:
            found.extend([Problem("ray_kwargs.ray_init.num_cpus", *short)])
        else:
            found.warnings.append(f"{BC}ray_kwargs.ray_init.num_cpus: {short[0]} ({short[1]})")
    rollout_name = get_path(config, ["actor_rollout_ref", "rollout", "name"])
    if strict_paths and not checked.lacking and accelerator != "cpu":
        engines = environment.rollout_engines(checked.env)
        if rollout_name in environment.ROLLOUT_DISTRIBUTIONS and rollout_name not in engines:
            found.extend(
                [
                    Problem(
                        "actor_rollout_ref.rollout.name",
                        f"is {rollout_name}, which is not installed in the verl environment {checked.env}",
                        f"install {environment.ROLLOUT_DISTRIBUTIONS[rollout_name]} into it"
                        + (" (with vllm-ascend on NPU)" if accelerator == "npu" else ""),
                    )
                ]
            )


def _plan_shell(ctx: PlanContext, checked: Checked, device: str, warnings: list[str]) -> Plan:
    """The plan without its steps: logs, checkpoints, the files it writes, facts."""
    cfg, config, run = ctx.config, checked.config, checked.run
    out = os.path.abspath(cfg.af_output_dir)
    world = ctx.world_size
    seq = _int(config, "data.max_prompt_length") + _int(config, "data.max_response_length")
    tail = f"run_log-N{{nnodes}}-WS{world}" + ("" if cfg.env.NODE_RANK == 0 else "-node{node_rank}")
    logs = LogSpec(
        format="verl",
        naming=LogNaming(
            prefix=f"verl_{safe_name(cfg.exp_name)}-{safe_name(cfg.af_model_name)}-{seq}-{device}",
            run_log=tail,
            device_info=f"npu_info-N{{nnodes}}-WS{world}-node{{node_rank}}",
        ),
        loss_rank="first",
        throughput=ThroughputSpec("verl", devices=world),
        loss_keys=("actor/pg_loss", "actor/loss"),
        plot_metrics=PLOT_METRICS,
        summary_metrics=SUMMARY_METRICS,
    )
    composition = checked.composition
    _, experiment_text = ctx.exp_config_file(out)  # the resolved experiment, beside the manifests
    files = {
        os.path.join(out, EXP_CONFIG): _exp_config(config, run, composition.by),
        OutputTree(out).records("experiment.yaml"): experiment_text,
    }
    return ctx.new_plan(
        out,
        logs,
        checkpoints=CheckpointSpec(root=_checkpoint_root(ctx), scheme="verl", retain=cfg.save_total_limit),
        files=files,
        warnings=warnings,
        facts={
            "verl_env": f"{checked.env} ({checked.env_source})",
            "model_engine": run.engine,
            "composed_by": composition.by,
            **({"compose_s": composition.seconds} if composition.seconds is not None else {}),
            "resume": run.resume,
            "reference_policy": checked.view.need_ref,
            "critic": checked.view.need_critic,
            "ray_cpus_needed": checked.need_cpus,
            **checked.facts,
        },
    )


def _check_step(ctx: PlanContext, checked: Checked, step_env: dict[str, str]) -> Step:
    """verl's own composition and validate_config, on node 0 before Ray starts."""
    return Step(
        name="check",
        role=Role.CHECK,
        launch=Process(
            (
                checked.python,
                CHECK_PROGRAM,
                *client_check_args(ctx.config.report_to, ctx.config.backend),
                *checked.run.texts(),
            )
        ),
        env=step_env,
        skip_reason=None if ctx.config.env.NODE_RANK == 0 else "verl's own checks run on NODE_RANK 0",
        notes=["verl's own Hydra composition and validate_config, before Ray starts (imports verl)"],
    )


def _train_step(ctx: PlanContext, checked: Checked, accelerator: str, step_env: dict[str, str]) -> Step:
    """ray_node.py on every node; node 0 runs verl's main_ppo once the cluster holds what it asks for."""
    cfg, run, py = ctx.config, checked.run, checked.python
    nnodes = cfg.env.NNODES
    world = nnodes * ctx.devices.count
    root = _checkpoint_root(ctx)
    device_resource = "NPU" if accelerator == "npu" else "GPU"
    return Step(
        name="train",
        role=Role.TRAIN,
        launch=Ray(
            python=py,
            driver=(py, *DRIVER, *run.texts()),
            nnodes=nnodes,
            node_rank=cfg.env.NODE_RANK,
            head_address=cfg.env.MASTER_ADDR,
            port=cfg.env.MASTER_PORT,
            resources=(("CPU", float(checked.need_cpus)), (device_resource, float(world))),
            node_resources=(("CPU", run.num_cpus),) if run.num_cpus is not None else (),
            job_id=safe_name(cfg.exp_name),
        ),
        env=step_env,
        outputs=[root],
        mkdirs=[root],
        notes=[f"resume: {run.resume}", f"config composed by {checked.composition.by}"],
    )


def _int(config: dict[str, Any], key: str) -> int:
    value = get_path(config, key.split("."), 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _heads(model_path: str, model_name: str) -> tuple[int | None, int | None]:
    from ascendfactory.config.catalog import from_catalog, from_hf_dir
    from ascendfactory.errors import ConfigError

    arch = None
    path = os.path.expanduser(model_path) if model_path else ""
    if path and os.path.isdir(path):
        try:
            arch = from_hf_dir(path, model_name)
        except (OSError, ValueError):
            arch = None
    if arch is None:
        try:
            arch = from_catalog(model_name)
        except ConfigError:
            return None, None
    return (arch.heads or None), (arch.kv_heads or None)


def _cpu_need(config: dict[str, Any], nnodes: int, per_node: int) -> int:
    units = get_path(config, TQ_UNITS_KEY.split("."), 8)
    units = units if isinstance(units, int) and not isinstance(units, bool) and units > 0 else 8
    return CPUS_PER_WORKER * nnodes * per_node + 1 + units


def _cpu_shortage(
    need: int, offered: float, nnodes: int, per_node: int, *, user_set: bool
) -> tuple[str, str] | None:
    per_node_need = CPUS_PER_WORKER * per_node
    total = offered * nnodes
    source = "ray_kwargs.ray_init.num_cpus" if user_set else f"this machine's {offered:g} CPUs"
    if offered < per_node_need or total < need:
        return (
            f"{offered:g} logical CPUs per node ({source}) are fewer than verl asks Ray for: "
            f"{CPUS_PER_WORKER} per worker x {per_node} workers per node, plus 1 for "
            "TransferQueue's controller "
            f"and 1 per storage unit ({TQ_UNITS_KEY}), {need} in all; Ray would wait for them forever",
            "set ray_kwargs.ray_init.num_cpus (each node's logical CPUs for Ray; they may exceed "
            "the cores) to "
            f"at least {max(per_node_need, -(-need // nnodes))}, or lower {TQ_UNITS_KEY}",
        )
    return None


def _exp_config(config: dict[str, Any], run: verl_read.VerlRun, by: str) -> str:
    shown = dict(config)
    lines = [
        "# verl's configuration for this run: what `python -m verl.trainer.main_ppo` composes from its own",
        f"# config and the overrides below (composed by {by}; secrets masked). Written by ascendfactory-cli",
        "# train on every run. Overrides, in order:",
        *(f"#   {t}" for t in run.texts()),
    ]
    body = yaml.dump(mask_secrets(shown), Dumper=SafeDumper, sort_keys=False, allow_unicode=True)
    return "\n".join(lines) + "\n" + body


def _step_env(
    env: str,
    accelerator: str,
    out: str,
    node_rank: int,
    tensorboard: TensorboardConfig | None,
    environ: Mapping[str, str],
) -> dict[str, str]:
    """verl's environment first on PATH; Hydra's full tracebacks in the log; CANN's operator logs under
    plog/rank<NODE_RANK>; TensorBoard's directory when the experiment has one."""
    step = {
        "PATH": os.path.join(env, "bin") + os.pathsep + environ.get("PATH", os.defpath),
        "HYDRA_FULL_ERROR": "1",
    }
    if accelerator == "npu":
        step["ASCEND_PROCESS_LOG_PATH"] = os.path.join(out, "plog", f"rank{node_rank}")
    if tensorboard:
        where = tensorboard.tensorboard_dir or environ.get("MA_SUMMARY_LOG_DIR")
        step["TENSORBOARD_DIR"] = os.path.abspath(where) if where else OutputTree(out).tensorboard_dir
    return step
