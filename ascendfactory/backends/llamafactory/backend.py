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

import os
from collections.abc import Mapping
from typing import Any

import yaml

from ascendfactory.backends import inputs as input_paths
from ascendfactory.backends.base import Backend, PlanContext
from ascendfactory.backends.doctor import Check
from ascendfactory.backends.install import InstallStep
from ascendfactory.backends.llamafactory import combos, datasets, environment, rules
from ascendfactory.backends.llamafactory.model_facts import read_model
from ascendfactory.backends.llamafactory.programs import PROGRAMS_DIR
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.report_to import TrackerKeys
from ascendfactory.backends.venv import package_version
from ascendfactory.checkpoints.hf_trainer import finished_at, newest_complete
from ascendfactory.config.devices import detect_accelerator
from ascendfactory.config.yamlio import SafeDumper
from ascendfactory.errors import Problem
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
    safe_name,
)

TEMPLATES = {"qwen25": "qwen", "qwen3": "qwen3", "llama2": "llama3", "glm4": "glm4"}
TRAIN_YAML, MERGE_YAML = "llamafactory_train.yaml", "llamafactory_merge.yaml"
CHECK_PROGRAM = os.path.join(PROGRAMS_DIR, "lf_check.py")
# backend_config keys besides `training` (LLaMA-Factory's own keys)
OPTIONS = {
    "training": "LLaMA-Factory's train keys",
    "merge_lora": "merge a LoRA adapter into lora_merged/ at the end (default true)",
    "merge": "extra `llamafactory-cli export` keys for the merge (export_size, export_device, ...)",
    "env_dir": "the LLaMA-Factory environment (default: env AF_LLAMAFACTORY_ENV, else install.sh's)",
}
# Keys the plan sets itself; a user value is an error that says which generic key decides it.
OWNED = {
    "output_dir": "af_output_dir",
    "resume_from_checkpoint": "ckpt_load_type: 2 with user_converted_ckpt_path, or train_auto_resume",
    "overwrite_output_dir": "train_auto_resume (a re-run starts over unless it resumes)",
    "do_train": "the plan (always true)",
}


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

    def memory_target(self, ctx: PlanContext, plan: Plan) -> Any:
        from ascendfactory.backends.llamafactory.memory import lf_target

        return lf_target(ctx, plan)

    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        return environment.checks(environ)

    def install_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        return environment.install_steps(environ)

    # -- plan -----------------------------------------------------------------------------------------
    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        cfg = ctx.config
        bc = dict(cfg.backend_config)
        out = os.path.abspath(cfg.af_output_dir)
        problems: list[Problem] = [
            ctx.problem(
                f"backend_config.{k}",
                "not an option of the llamafactory backend",
                fix="use: " + ", ".join(OPTIONS),
            )
            for k in bc
            if k not in OPTIONS
        ]
        training = bc.get("training")
        if not isinstance(training, dict):
            problems.append(
                ctx.problem(
                    "backend_config.training",
                    "missing: LLaMA-Factory's train keys",
                    fix="set backend_config.training (model_name_or_path, dataset, ...)",
                )
            )
            self.raise_if(problems)
        training = dict(training)

        def problem(key: str, message: str, fix: str) -> Problem:
            return ctx.problem(key, message, fix=fix)

        warnings: list[str] = []
        problems += _top_level_inputs(ctx, training, warnings)
        problems += _retention_problems(ctx, training)

        for key, decided_by in OWNED.items():
            if key in training and not (key == "do_train" and training[key] is True):
                if key == "output_dir" and os.path.abspath(str(training[key])) == out:
                    continue
                problems.append(
                    problem(
                        rules.T + key,
                        f"set by the plan from {decided_by}",
                        f"remove it; set {decided_by.split(' ')[0]} instead",
                    )
                )
        stage = cfg.stage or training.get("stage")
        training["stage"] = stage
        problems += rules.stage_problems(stage, problem)
        key_problems = rules.key_problems(training, problem)
        problems += key_problems
        bad = {p.key.removeprefix(rules.T) for p in key_problems}  # unknown or mistyped: read no further
        training = {k: v for k, v in training.items() if k not in bad}
        problems += rules.template_problems(training.get("template"), problem)
        for key in ("model_name_or_path", "dataset"):
            if not training.get(key) and key not in bad:
                problems.append(
                    problem(rules.T + key, "required key is missing", f"set backend_config.training.{key}")
                )
        accelerator = detect_accelerator()
        device = rules.device_problems(training, accelerator, problem)
        if strict_paths:
            problems += device
        else:  # --dry-run may be checking a cluster's experiment on a laptop
            warnings += [f"{p.key}: {p.message} ({p.fix} to run it here)" for p in device]
        problems += rules.batch_problems(training, problem)
        problems += rules.file_problems(training, problem)
        absent_model = rules.local_model_dir(training)
        if absent_model:
            found = input_paths.missing(
                ctx,
                rules.T + "model_name_or_path",
                absent_model,
                "model directory {path} not found",
                "give an HF model directory",
            )
            input_paths.route([found], strict=strict_paths, problems=problems, warnings=warnings)
        model = str(training.get("model_name_or_path") or "")
        facts = read_model(os.path.expanduser(model)) if model else None
        problems += rules.model_problems(training, facts, problem)
        data = datasets.resolve(
            training.get("dataset") or [], training.get("dataset_dir"), out, key=rules.T + "dataset"
        )
        problems += [problem(k, m, f) for k, m, f in data.problems]
        input_paths.route(
            [problem(k, m, f) for k, m, f in data.missing],
            strict=strict_paths,
            problems=problems,
            warnings=warnings,
        )

        env, env_source = environment.find_env(bc.get("env_dir"), ctx.environ)
        lacking = environment.missing(env)
        if lacking:
            what = f"LLaMA-Factory environment {env} ({env_source}) lacks {', '.join(lacking)}"
            if strict_paths:
                problems.append(
                    Problem(key="backend_config.env_dir", message=what, fix=environment.INSTALL_FIX)
                )
            else:
                warnings.append(f"{what}: {environment.INSTALL_FIX}")
        installed = None if lacking else (lambda dist: package_version(env, dist) is not None)
        named = {p.key for p in problems}
        problems += [
            problem(rules.T + k, m, f)
            for k, m, f in combos.problems(training, installed)
            if rules.T + k not in named
        ]
        self.raise_if(problems)

        # -- the LLaMA-Factory yaml ------------------------------------------------------------------------
        world = ctx.world_size
        nproc = ctx.devices.count
        lf: dict[str, Any] = {"do_train": True, **training, "output_dir": out}
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
        if resume and accelerator == "cpu" and world > 1:
            if cfg.env.NNODES > 1:
                self.raise_if(
                    [
                        problem(
                            "train_auto_resume",
                            "a multi-node CPU run cannot resume: LLaMA-Factory fails to restore "
                            "optimizer state on 'cpu:N' devices",
                            "resume on one node, or start over (train_auto_resume: false)",
                        )
                    ]
                )
            # LLaMA-Factory cannot restore a multi-process CPU checkpoint ("don't know how to restore data
            # location ... cpu:0"); one process with the accumulation scaled by the process count keeps the
            # global batch (and gave bit-identical losses in our runs).
            lf["gradient_accumulation_steps"] = int(lf.get("gradient_accumulation_steps", 1)) * nproc
            warnings.append(
                f"resuming a {nproc}-process CPU run on one process with gradient_accumulation_steps "
                f"{lf['gradient_accumulation_steps']} (LLaMA-Factory cannot restore it on several)"
            )
            world = nproc = 1

        # Credentials LLaMA-Factory's libraries also read from the environment travel there, not in a file.
        secret_env = {var: str(lf.pop(key)) for key, var in ENV_SECRETS.items() if lf.get(key)}
        train_yaml = os.path.join(out, TRAIN_YAML)
        files = dict([ctx.exp_config_file(out)])
        files[train_yaml] = _yaml(lf, "llamafactory-cli train")
        if data.info is not None and data.dataset_dir:
            import json

            files[os.path.join(data.dataset_dir, datasets.INFO)] = json.dumps(data.info, indent=2) + "\n"

        # -- steps ----------------------------------------------------------------------------------------
        py, cli = environment.python_of(env), environment.cli_of(env)
        step_env = {**_step_env(env, accelerator, nproc, ctx.environ), **secret_env}
        plan = Plan(
            backend=self.name,
            exp_name=cfg.exp_name,
            model_name=cfg.af_model_name,
            output_dir=out,
            logs=LogSpec(
                format="llamafactory",
                naming=LogNaming(
                    prefix=f"{safe_name(cfg.af_model_name)}-{safe_name(cfg.exp_name)}",
                    run_log="run_log-R{rank}_WS{world_size}",
                    device_info="npu_info-R{rank}_WS{world_size}",
                ),
                loss_rank="first",
                throughput=ThroughputSpec("llamafactory", devices=world),
                loss_keys=("loss",),
                metrics_file=os.path.join(out, "trainer_log.jsonl"),
                console_format="hf_console",
            ),
            checkpoints=CheckpointSpec(root=out, scheme="hf_trainer"),
            policy=ctx.run_policy(),
            files=files,
            source=ctx.loaded.source,
            warnings=warnings,
            env=cfg.env.extra_vars(),
            facts={
                "world_size": world,
                "nnodes": cfg.env.NNODES,
                "devices_per_node": nproc,
                "devices_source": ctx.devices.source,
                "llamafactory_env": env,
                **rules.batch_facts(lf, world),
            },
        )
        inputs = [train_yaml, *([os.path.join(data.dataset_dir, datasets.INFO)] if data.info else [])]
        complete = (
            f"complete: {os.path.basename(str(resume))} is at the run's end (step {done_at}); nothing to "
            "train (raise max_steps or num_train_epochs to train on, or remove the checkpoints to start over)"
            if done_at is not None
            else None
        )
        plan.add(
            Step(
                name="check",
                role=Role.CHECK,
                launch=Process(
                    (py, CHECK_PROGRAM, train_yaml, f"--data-fit={'fail' if cfg.check_data_fit else 'warn'}")
                ),
                env=step_env,
                inputs=inputs,
                notes=[
                    "LLaMA-Factory's own parser, tokenizer, template and dataset checks, and the sft data "
                    "against cutoff_len (imports LLaMA-Factory: 6-20 s)"
                ],
                skip_reason=complete and "the training is complete",
            )
        )
        if world == 1:
            launch: Process | Torchrun = Process((cli, "train", train_yaml), rank=0)
        else:
            launcher = environment.launcher_script(env) or os.path.join(
                env, "lib", "python3.X", "site-packages", "llamafactory", "launcher.py"
            )
            launch = Torchrun(
                python=py,
                entry=(launcher, train_yaml),
                nnodes=cfg.env.NNODES,
                nproc_per_node=nproc,
                node_rank=cfg.env.NODE_RANK,
                master_addr=cfg.env.MASTER_ADDR,
                master_port=cfg.env.MASTER_PORT,
            )
        plan.add(
            Step(
                name="train",
                role=Role.TRAIN,
                launch=launch,
                env=step_env,
                inputs=inputs,
                outputs=[out],
                skip_reason=complete,
                notes=[f"resumes from {resume} (resume_from_checkpoint)"] if resume and not complete else [],
            )
        )
        if training.get("finetuning_type", "lora") == "lora" and bc.get("merge_lora", True):
            merged = os.path.join(out, "lora_merged")
            merge = {
                "model_name_or_path": lf["model_name_or_path"],
                "adapter_name_or_path": out,
                "template": lf.get("template"),
                "finetuning_type": "lora",
                "trust_remote_code": lf.get("trust_remote_code", False),
                "export_dir": merged,
                "export_size": 5,
                "export_device": "cpu" if accelerator == "cpu" else "auto",
                "export_legacy_format": False,
                **dict(bc.get("merge") or {}),
            }
            merge_yaml = os.path.join(out, MERGE_YAML)
            files[merge_yaml] = _yaml(
                {k: v for k, v in merge.items() if v is not None}, "llamafactory-cli export"
            )
            plan.add(
                Step(
                    name="merge",
                    role=Role.EXPORT,
                    launch=Process((cli, "export", merge_yaml)),
                    env=step_env,
                    inputs=[merge_yaml, os.path.join(out, "adapter_model.safetensors")],
                    outputs=[merged],
                    only_node0=True,
                )
            )
        plan.add(Step(name="plot", role=Role.PLOT, outputs=[os.path.join(out, "training_loss.png")]))
        return plan


def _top_level_inputs(ctx: PlanContext, training: dict[str, Any], warnings: list[str]) -> list[Problem]:
    """The 6.5.90x top-level `model_name_or_path` and `dataset` (a file, a directory or a dataset name)
    fill LLaMA-Factory's keys of the same name when those are not set, as they fill the Megatron backends';
    both given and different: the backend_config value wins, with a warning. `processed_data_dir` (Megatron
    preprocessed data) has no LLaMA-Factory meaning: refused."""
    cfg = ctx.config
    for key in ("model_name_or_path", "dataset"):
        top = getattr(cfg, key)
        if top is None:
            continue
        if training.get(key) in (None, ""):
            training[key] = top
        elif str(training[key]) != str(top):
            warnings.append(
                f"{key}: {top} (top level) is not used: backend_config.training.{key} ({training[key]}) "
                "wins; remove one of them"
            )
    if cfg.processed_data_dir is not None:
        return [
            ctx.problem(
                "processed_data_dir",
                "Megatron preprocessed data: LLaMA-Factory tokenizes its own data",
                "remove it; give the raw data as dataset (top level) or backend_config.training.dataset",
            )
        ]
    return []


def _retention_problems(ctx: PlanContext, training: dict[str, Any]) -> list[Problem]:
    """`save_total_limit` (top level) and `backend_config.training.save_total_limit` both reach
    LLaMA-Factory's one `save_total_limit`: either alone is honoured, both given and different is refused
    naming both (the top-level one, 0 included, would otherwise silently replace the other or be
    ignored)."""
    top = ctx.config.save_total_limit
    own = training.get("save_total_limit")
    if own is None or "save_total_limit" not in ctx.config.model_fields_set or own == top:
        return []
    return [
        ctx.problem(
            rules.T + "save_total_limit",
            f"{own!r} conflicts with save_total_limit: {top} (top level); both set LLaMA-Factory's "
            "save_total_limit",
            fix="keep one of them: remove backend_config.training.save_total_limit, or the top-level "
            "save_total_limit",
        )
    ]


# LLaMA-Factory key -> the environment variable its library reads when the key is not given
# (huggingface_hub: HF_TOKEN, used whenever `token=None`). Other secret keys (ms_hub_token, om_hub_token,
# swanlab_*) stay in llamafactory_train.yaml, which is then written readable by its owner only.
ENV_SECRETS = {"hf_hub_token": "HF_TOKEN"}


def _yaml(data: dict[str, Any], what: str) -> str:
    return f"# Written by ascendfactory-cli train for `{what}`; regenerated on every run.\n" + yaml.dump(
        data, Dumper=SafeDumper, sort_keys=False, allow_unicode=True
    )


def _step_env(env: str, accelerator: str, nproc: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment's bin first on PATH (LLaMA-Factory starts `torchrun` by its bare name); on CPU a
    thread count per process (OpenMP contention made a loaded 2-core box 10-25x slower, same losses)."""
    out = {"PATH": os.path.join(env, "bin") + os.pathsep + environ.get("PATH", os.defpath)}
    if accelerator == "cpu" and "OMP_NUM_THREADS" not in environ:
        out["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, nproc) // 2))
    return out
