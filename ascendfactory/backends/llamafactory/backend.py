"""The `llamafactory` backend: LLaMA-Factory's `train` and `export`, in its own environment.

    check   (CHECK)   <env>/bin/python programs/lf_check.py llamafactory_train.yaml
                      LLaMA-Factory's own parser (get_train_args), tokenizer, template and dataset list
    train   (TRAIN)   llamafactory-cli train llamafactory_train.yaml                        (one process)
                      python -m torch.distributed.run ... llamafactory/launcher.py <yaml>   (several)
    merge   (EXPORT)  llamafactory-cli export llamafactory_merge.yaml -> lora_merged/       (LoRA runs)
    plot    (PLOT)    training_loss.png from trainer_log.jsonl

The experiment's `backend_config.training` holds LLaMA-Factory's own keys; the plan writes them, with
what the experiment's generic keys decide (output_dir, resume point, save_total_limit, the datasets it
registers), to `{af_output_dir}/llamafactory_train.yaml`. Several processes run through our torchrun
launcher with LLaMA-Factory's own `launcher.py` as the entry, the exact program `llamafactory-cli` would
start under `FORCE_TORCHRUN=1`: one log per rank, the rendezvous timeout, no argv re-split at spaces.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.environment import Check, InstallStep, package_version
from ascendfactory.backends.llamafactory import datasets, environment, rules
from ascendfactory.backends.llamafactory.memory import LFLaunch
from ascendfactory.backends.llamafactory.programs import PROGRAMS_DIR
from ascendfactory.backends.llamafactory.read import LFRun, read
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.report_to import TrackerKeys, client_check_args
from ascendfactory.checkpoints.hf_trainer import finished_at, newest_complete
from ascendfactory.config.devices import detect_accelerator
from ascendfactory.config.yamlio import SafeDumper
from ascendfactory.output_tree import OutputTree
from ascendfactory.plan import (
    CheckpointSpec,
    LogNaming,
    LogSpec,
    Plan,
    Process,
    Role,
    Step,
    ThroughputSpec,
    Torchrun,
)

TEMPLATES = {"qwen25": "qwen", "qwen3": "qwen3", "llama2": "llama3", "glm4": "glm4"}
TRAIN_YAML, MERGE_YAML = "llamafactory_train.yaml", "llamafactory_merge.yaml"
CHECK_PROGRAM = os.path.join(PROGRAMS_DIR, "lf_check.py")
# LLaMA-Factory 0.9.5's trackers: transformers' `report_to` integrations (MLflow and W&B read their settings
# and the run to continue from their own variables, in the plan's env), TensorBoard into `logging_dir`,
# SwanLab through its own `use_swanlab` / `swanlab_*` keys (hparams/finetuning_args.py; mode cloud|local).
LF_TRACKERS: dict[str, TrackerKeys] = {
    "tensorboard": TrackerKeys(
        append={"training.report_to": "tensorboard"}, set={"training.logging_dir": "{location}"}
    ),
    # transformers' MLflowCallback logs every TrainingArguments value as a parameter; a resumed segment
    # changes some (resume_from_checkpoint) and MLflow refuses that, so a continued run logs none again.
    "mlflow": TrackerKeys(
        append={"training.report_to": "mlflow"},
        set={"training.run_name": "{run_name}"},
        resume_env={"MLFLOW_MAX_LOG_PARAMS": "0"},
    ),
    "wandb": TrackerKeys(append={"training.report_to": "wandb"}, set={"training.run_name": "{run_name}"}),
    "swanlab": TrackerKeys(
        set={
            "training.use_swanlab": True,
            "training.swanlab_project": "{project}",
            "training.swanlab_run_name": "{run_name}",
            "training.swanlab_mode": "{mode}",
            "training.swanlab_logdir": "{location}",
        }
    ),
}


@register_backend
class LlamaFactoryBackend(Backend):
    name = "llamafactory"
    description = "LLaMA-Factory (llamafactory-cli train / export), in its own environment"
    stages = rules.STAGES
    launcher = "torchrun"
    order = 2
    tracker_keys = LF_TRACKERS
    # LLaMA-Factory's own messages for configuration errors (spec: llamafactory_cpu_run.md section 8)
    unretryable = (
        "Some keys are not used by the HfArgumentParser",
        "Undefined dataset",
        "Please specify dataset",
        "Invalid fine-tuning method",
        "doesn't support bf16/gpu",
    )

    def template_values(self, arch: Any, *, devices: int, tp: int, pp: int) -> dict[str, Any]:
        return {"lf_template": TEMPLATES.get(arch.model_type_hf, "default")}

    def memory_target(self, run: Any) -> Any:
        from ascendfactory.backends.llamafactory.memory import lf_target

        return lf_target(run)

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return environment.checks(environ)

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return environment.install_steps(environ)

    # -- plan: read -> LFRun -> the LLaMA-Factory yaml -> steps ---------------------------------------------
    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        run = read(ctx, detect_accelerator(), strict_paths=strict_paths)
        train = _train_config(ctx, run)
        plan = _plan_shell(ctx, run, train)
        for step in _steps(ctx, run, train, plan.files):
            plan.add(step)
        deepspeed = (
            None if environment.missing(run.env) else package_version(run.env, "deepspeed") is not None
        )
        plan.run = LFLaunch(dict(train.lf), train.world, ctx.config.af_model_name, deepspeed)
        return plan


@dataclass
class TrainConfig:
    """`llamafactory_train.yaml` as planned: its keys, where it resumes from, and the processes it runs on."""

    lf: dict[str, Any]  # LLaMA-Factory's train keys as written
    resume: str | None  # the checkpoint it resumes from
    done_at: int | None  # the step `resume` ends the run at (None: training remains)
    world: int  # processes in all
    nproc: int  # processes on this node
    secret_env: dict[str, str]  # credentials moved from the keys into the environment

    @property
    def complete(self) -> str | None:
        """Why there is nothing to train (the resume point is the run's end), else None."""
        if self.done_at is None:
            return None
        return (
            f"complete: {os.path.basename(str(self.resume))} is at the run's end (step {self.done_at}); "
            "nothing to train (raise max_steps or num_train_epochs to train on, or remove the checkpoints to "
            "start over)"
        )


def _train_config(ctx: PlanContext, run: LFRun) -> TrainConfig:
    """The train keys: the user's, with what the generic keys decide (output, datasets, logging, the
    resume point and the load type)."""
    cfg, out, data = ctx.config, run.out, run.data
    lf: dict[str, Any] = {"do_train": True, **run.training, "output_dir": out}
    lf["dataset"] = ",".join(data.names)
    if data.dataset_dir:
        lf["dataset_dir"] = data.dataset_dir
    lf.setdefault("report_to", "none")
    lf.setdefault("logging_steps", 1)
    lf.setdefault("include_num_input_tokens_seen", True)  # tokens/s in trainer_log.jsonl
    lf["plot_loss"] = False  # training_loss.png is ours, from trainer_log.jsonl
    if cfg.save_total_limit:
        lf["save_total_limit"] = cfg.save_total_limit
    if cfg.ckpt_load_type == 0:
        lf["train_from_scratch"] = True
    timeout = ctx.collective_timeout_s()  # node_wait_timeout_s, when set; a user ddp_timeout wins
    if timeout is not None:
        lf.setdefault("ddp_timeout", timeout)
    resume = newest_complete(out) if cfg.train_auto_resume else None
    done_at = (
        finished_at(resume, max_steps=lf.get("max_steps"), num_train_epochs=lf.get("num_train_epochs"))
        if resume
        else None
    )
    if resume is None and cfg.ckpt_load_type == 2 and cfg.user_converted_ckpt_path:
        resume = os.path.abspath(cfg.user_converted_ckpt_path)
    elif cfg.ckpt_load_type == 1 and cfg.user_converted_ckpt_path:
        lf["model_name_or_path"] = os.path.abspath(cfg.user_converted_ckpt_path)
    if resume:
        lf["resume_from_checkpoint"] = resume
        lf["overwrite_output_dir"] = False  # with it, LLaMA-Factory truncates trainer_log.jsonl
    else:
        lf["overwrite_output_dir"] = True  # else LLaMA-Factory resumes from any checkpoint-N by itself
    world, nproc = ctx.world_size, ctx.devices.count
    if resume and run.accelerator == "cpu" and world > 1:
        world = nproc = _cpu_resume_on_one_process(ctx, lf, nproc, run.warnings)
    # Credentials LLaMA-Factory's libraries also read from the environment travel there, not in a file.
    secret_env = {var: str(lf.pop(key)) for key, var in ENV_SECRETS.items() if lf.get(key)}
    return TrainConfig(lf, resume, done_at, world, nproc, secret_env)


def _cpu_resume_on_one_process(ctx: PlanContext, lf: dict[str, Any], nproc: int, warnings: list[str]) -> int:
    """LLaMA-Factory cannot restore a multi-process CPU checkpoint ("don't know how to restore data location
    ... cpu:0"); one process with the accumulation scaled by the process count keeps the global batch (and
    gave bit-identical losses in our runs). Several nodes: refused. Returns the process count (1)."""
    if ctx.config.env.NNODES > 1:
        Backend.raise_if(
            [
                ctx.problem(
                    "train_auto_resume",
                    "a multi-node CPU run cannot resume: LLaMA-Factory fails to restore "
                    "optimizer state on 'cpu:N' devices",
                    "resume on one node, or start over (train_auto_resume: false)",
                )
            ]
        )
    lf["gradient_accumulation_steps"] = int(lf.get("gradient_accumulation_steps", 1)) * nproc
    warnings.append(
        f"resuming a {nproc}-process CPU run on one process with gradient_accumulation_steps "
        f"{lf['gradient_accumulation_steps']} (LLaMA-Factory cannot restore it on several)"
    )
    return 1


def _plan_shell(ctx: PlanContext, run: LFRun, train: TrainConfig) -> Plan:
    """The plan without its steps: log and checkpoint specs, the files it writes, facts."""
    out, data = run.out, run.data
    files = {os.path.join(out, TRAIN_YAML): _yaml(train.lf, "llamafactory-cli train")}
    if data.info is not None and data.dataset_dir:
        files[os.path.join(data.dataset_dir, datasets.INFO)] = json.dumps(data.info, indent=2) + "\n"
    logs = LogSpec(
        format="llamafactory",
        naming=LogNaming(
            prefix=ctx.log_prefix,
            run_log="run_log-R{rank}_WS{world_size}",
            device_info="npu_info-R{rank}_WS{world_size}",
        ),
        loss_rank="first",
        throughput=ThroughputSpec("llamafactory", devices=train.world),
        loss_keys=("loss",),
        metrics_file=os.path.join(out, "trainer_log.jsonl"),
        console_format="hf_console",
    )
    return ctx.new_plan(
        out,
        logs,
        checkpoints=CheckpointSpec(root=out, scheme="hf_trainer"),
        files=files,
        warnings=run.warnings,
        facts={
            "world_size": train.world,  # the processes it runs (a resumed CPU run: one)
            "devices_per_node": train.nproc,
            "llamafactory_env": run.env,
            **rules.batch_facts(train.lf, train.world),
        },
    )


def _steps(ctx: PlanContext, run: LFRun, train: TrainConfig, files: dict[str, str]) -> list[Step]:
    """check, train, merge (a LoRA run, unless merge_lora is false: its yaml goes into `files`), plot."""
    cfg, out, env = ctx.config, run.out, run.env
    train_yaml = os.path.join(out, TRAIN_YAML)
    py, cli = environment.python_of(env), environment.cli_of(env)
    step_env = {**_step_env(env, run.accelerator, train.nproc, ctx), **train.secret_env}
    info = run.data.dataset_dir if run.data.info is not None else None
    inputs = [train_yaml, *([os.path.join(info, datasets.INFO)] if info else [])]
    complete = train.complete
    check = Step(
        name="check",
        role=Role.CHECK,
        launch=Process(
            (
                py,
                CHECK_PROGRAM,
                train_yaml,
                *client_check_args(cfg.report_to, cfg.backend),
                f"--data-fit={'fail' if cfg.check_data_fit else 'warn'}",
            )
        ),
        env=step_env,
        inputs=inputs,
        notes=[
            "LLaMA-Factory's own parser, tokenizer, template and dataset checks, and the sft data "
            "against cutoff_len (imports LLaMA-Factory: 6-20 s)"
        ],
        skip_reason=complete and "the training is complete",
    )
    resume = train.resume
    steps = [
        check,
        Step(
            name="train",
            role=Role.TRAIN,
            launch=_train_launch(ctx, env, train_yaml, train),
            env=step_env,
            inputs=inputs,
            outputs=[out],
            skip_reason=complete,
            notes=[f"resumes from {resume} (resume_from_checkpoint)"] if resume and not complete else [],
        ),
    ]
    if run.training.get("finetuning_type", "lora") == "lora" and run.options.merge_lora:
        steps.append(_merge_step(run, train, files, cli, step_env))
    steps.append(Step(name="plot", role=Role.PLOT, outputs=[OutputTree(out).loss_plot]))
    return steps


def _train_launch(ctx: PlanContext, env: str, train_yaml: str, train: TrainConfig) -> Process | Torchrun:
    """One process: `llamafactory-cli train`; several: our torchrun with LLaMA-Factory's launcher.py."""
    if train.world == 1:
        return Process((environment.cli_of(env), "train", train_yaml), rank=0)
    launcher = environment.launcher_script(env) or os.path.join(
        env, "lib", "python3.X", "site-packages", "llamafactory", "launcher.py"
    )
    cfg = ctx.config
    return Torchrun(
        python=environment.python_of(env),
        entry=(launcher, train_yaml),
        nnodes=cfg.env.NNODES,
        nproc_per_node=train.nproc,
        node_rank=cfg.env.NODE_RANK,
        master_addr=cfg.env.MASTER_ADDR,
        master_port=cfg.env.MASTER_PORT,
    )


def _merge_step(
    run: LFRun, train: TrainConfig, files: dict[str, str], cli: str, step_env: dict[str, str]
) -> Step:
    """`llamafactory-cli export` of the adapter into lora_merged/ (its yaml added to `files`)."""
    out, lf = run.out, train.lf
    merged = os.path.join(out, "lora_merged")
    merge = {
        "model_name_or_path": lf["model_name_or_path"],
        "adapter_name_or_path": out,
        "template": lf.get("template"),
        "finetuning_type": "lora",
        "trust_remote_code": lf.get("trust_remote_code", False),
        "export_dir": merged,
        "export_size": 5,
        "export_device": "cpu" if run.accelerator == "cpu" else "auto",
        "export_legacy_format": False,
        **run.options.merge,
    }
    merge_yaml = os.path.join(out, MERGE_YAML)
    files[merge_yaml] = _yaml({k: v for k, v in merge.items() if v is not None}, "llamafactory-cli export")
    return Step(
        name="merge",
        role=Role.EXPORT,
        launch=Process((cli, "export", merge_yaml)),
        env=step_env,
        inputs=[merge_yaml, os.path.join(out, "adapter_model.safetensors")],
        outputs=[merged],
        only_node0=True,
    )


# LLaMA-Factory key -> the environment variable its library reads when the key is not given
# (huggingface_hub: HF_TOKEN, used whenever `token=None`). Other secret keys (ms_hub_token, om_hub_token,
# swanlab_*) stay in llamafactory_train.yaml, which is then written readable by its owner only.
ENV_SECRETS = {"hf_hub_token": "HF_TOKEN"}


def _yaml(data: dict[str, Any], what: str) -> str:
    return f"# Written by ascendfactory-cli train for `{what}`; regenerated on every run.\n" + yaml.dump(
        data, Dumper=SafeDumper, sort_keys=False, allow_unicode=True
    )


def _step_env(env: str, accelerator: str, nproc: int, ctx: PlanContext) -> dict[str, str]:
    """The environment's bin first on PATH (LLaMA-Factory starts `torchrun` by its bare name); on CPU a
    thread count per process (OpenMP contention made a loaded 2-core box 10-25x slower, same losses)."""
    environ = ctx.environ
    out = {"PATH": os.path.join(env, "bin") + os.pathsep + environ.get("PATH", os.defpath)}
    if accelerator == "cpu" and "OMP_NUM_THREADS" not in environ:
        out["OMP_NUM_THREADS"] = str(max(1, ctx.cpu_count // max(1, nproc) // 2))
    return out
