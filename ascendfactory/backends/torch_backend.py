"""The embedded `torch` backend: MindSpeed-LLM's four steps, run by our own programs.

preprocess  python -m ascendfactory.engine.data.preprocess   (= preprocess_data.py)
hf2mg       python -m ascendfactory.engine.convert           (= convert_ckpt_v2.py hf -> mg)
train       python -m torch.distributed.run ... -m ascendfactory.engine.train   (= posttrain/pretrain_gpt.py)
mg2hf       python -m ascendfactory.engine.convert           (= convert_ckpt_v2.py mg -> hf)
plot        training_loss.png from the last rank's log (in-process)
"""

from __future__ import annotations

from typing import Any

from ascendfactory.backends.base import BackendAdapter, PlanContext
from ascendfactory.backends.megatron_args import MegatronRun, hf2mg_skip_reason, read_megatron_run, to_flags
from ascendfactory.pipeline.plan import Plan, RankLayout, Step

# Flags the planner sets itself; a user value for them is folded in, never passed twice.
PLANNER_TRAIN_FLAGS = (
    "data-path",
    "tokenizer-name-or-path",
    "save",
    "load",
    "stage",
    "finetune",
    "no-load-optim",
    "no-load-rng",
    "is-instruction-dataset",
    "tensorboard-dir",
)


class TorchAdapter(BackendAdapter):
    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        run = read_megatron_run(ctx, strict_paths=strict_paths)
        cfg = ctx.config
        plan = Plan(
            backend=cfg.backend.value,
            exp_name=cfg.exp_name,
            model_name=cfg.af_model_name,
            output_dir=cfg.af_output_dir,
            warnings=list(run.warnings),
            env=cfg.env.extra_vars(),
            facts=run.facts(),
        )
        py = ctx.python
        shared = cfg.shared_filesystem and run.nnodes > 1
        plan.add(self.preprocess_step(py, run, shared))
        plan.add(self.hf2mg_step(ctx, py, run, shared))
        train = plan.add(self.train_step(ctx, py, run))
        self.check_training_flags(ctx, run, train.argv[train.argv.index("ascendfactory.engine.train") + 1 :])
        plan.add(self.mg2hf_step(py, run, shared, cfg.hf_save_dir))
        plan.add(
            Step(
                name="plot",
                kind="plot",
                argv=[],
                outputs=[run.layout.loss_plot],
                skip_reason=None
                if run.node_rank == run.nnodes - 1
                else "the loss is printed by the last rank, which runs on the last node",
            )
        )
        return plan

    # -- steps --------------------------------------------------------------------------------------
    def preprocess_step(self, py: str, run: MegatronRun, shared: bool) -> Step:
        pre = dict(run.preprocess or {})
        pre.pop("input", None)
        pre.pop("output-prefix", None)
        options: dict[str, Any] = {
            "input": run.preprocess_input,
            "tokenizer-type": pre.pop("tokenizer-type", "PretrainedFromHF"),
            "tokenizer-name-or-path": pre.pop("tokenizer-name-or-path", run.model_dir),
            "output-prefix": run.preprocess_prefix,
            "handler-name": pre.pop("handler-name", run.handler),
        }
        if run.data_is_instruction and "prompt-type" not in pre and run.training.get("prompt-type"):
            options["prompt-type"] = run.training["prompt-type"]
        options.update(pre)
        skip = None
        if run.preprocess_input is None:
            skip = f"preprocessed data given: {run.data_path}"
        return Step(
            name="preprocess",
            kind="preprocess",
            argv=[py, "-m", "ascendfactory.engine.data.preprocess", *to_flags(options)] if not skip else [],
            inputs=[x for x in (run.preprocess_input, run.model_dir) if x],
            outputs=[run.layout.preprocess_dir] if not skip else [],
            skip_reason=skip,
            only_node0=shared,
        )

    def hf2mg_step(self, ctx: PlanContext, py: str, run: MegatronRun, shared: bool) -> Step:
        skip = hf2mg_skip_reason(ctx, run)
        options: dict[str, Any] = {
            "load-model-type": "hf",
            "save-model-type": "mg",
            "load-dir": run.model_dir,
            "save-dir": run.converted_dir,
            "target-tensor-parallel-size": run.tp,
            "target-pipeline-parallel-size": run.pp,
            "num-layer-list": ",".join(map(str, run.num_layer_list)) if run.num_layer_list else None,
            "model-type-hf": run.arch.model_type_hf,
            "params-dtype": "bf16"
            if run.training.get("bf16")
            else "fp16"
            if run.training.get("fp16")
            else None,
        }
        options.update(run.hf2mg)
        return Step(
            name="hf2mg",
            kind="hf2mg",
            argv=[py, "-m", "ascendfactory.engine.convert", *to_flags(options)] if not skip else [],
            inputs=[run.model_dir] if run.model_dir else [],
            outputs=[run.converted_dir] if not skip else [],
            skip_reason=skip,
            only_node0=shared,
        )

    def train_step(self, ctx: PlanContext, py: str, run: MegatronRun) -> Step:
        cfg = ctx.config
        flags = {k: v for k, v in run.training.items() if k not in PLANNER_TRAIN_FLAGS}
        load = run.load
        ordered: dict[str, Any] = {
            "stage": run.stage if run.stage != "pt" else None,
            **flags,
            "data-path": run.data_path,
            "tokenizer-name-or-path": run.model_dir,
            "is-instruction-dataset": run.data_is_instruction or run.training.get("is-instruction-dataset"),
            "load": load.load if load else None,
            **(load.flags if load else {}),
            "save": run.layout.saved_checkpoints,
        }
        tb = dict(cfg.tensorboard or {})
        if tb or cfg.monitor_config:
            ordered["tensorboard-dir"] = tb.get("tensorboard_dir") or run.layout.tensorboard_dir
            # The runner writes the resolved experiment there before any step starts.
            ordered["af-monitor-config"] = run.layout.exp_config
        dist = [
            "--nproc_per_node",
            str(run.nproc_per_node),
            "--nnodes",
            str(run.nnodes),
            "--node_rank",
            str(run.node_rank),
            "--master_addr",
            cfg.env.MASTER_ADDR,
            "--master_port",
            str(cfg.env.MASTER_PORT),
        ]
        argv = [
            py,
            "-m",
            "torch.distributed.run",
            *dist,
            "--tee",
            "3",
            "-m",
            "ascendfactory.engine.train",
            *to_flags(ordered),
        ]
        notes = [load.reason] if load else []
        return Step(
            name="train",
            kind="train",
            argv=argv,
            inputs=[x for x in (run.data_path, load.load if load else None) if x],
            outputs=[run.layout.saved_checkpoints],
            ranks=RankLayout(run.nnodes, run.nproc_per_node, run.node_rank),
            notes=notes,
        )

    def mg2hf_step(self, py: str, run: MegatronRun, shared: bool, hf_save_dir: str | None) -> Step:
        out = hf_save_dir or run.layout.mg2hf_dir
        skip = None
        if run.mg2hf is None:
            skip = "final conversion disabled (convert_ckpt_mg2hf: null or convert_mg2hf_at_last: false)"
        options: dict[str, Any] = {
            "load-model-type": "mg",
            "save-model-type": "hf",
            "load-dir": run.layout.saved_checkpoints,
            "save-dir": out,
            "hf-cfg-dir": run.model_dir,
            "model-type-hf": run.arch.model_type_hf,
        }
        options.update(run.mg2hf or {})
        return Step(
            name="mg2hf",
            kind="mg2hf",
            argv=[py, "-m", "ascendfactory.engine.convert", *to_flags(options)] if not skip else [],
            inputs=[run.layout.saved_checkpoints],
            outputs=[out] if not skip else [],
            skip_reason=skip,
            only_node0=shared,
        )

    # -- validation ---------------------------------------------------------------------------------
    def check_training_flags(self, ctx: PlanContext, run: MegatronRun, train_argv: list[str]) -> None:
        """Refuse, before anything runs, flags the embedded trainer does not know or does not implement."""
        from ascendfactory.config.suggest import did_you_mean
        from ascendfactory.engine.train import flags as trainer_flags
        from ascendfactory.errors import ConfigError, Problem

        known = trainer_flags.known_flags()
        problems: list[Problem] = []
        for key in run.training:
            if f"--{key}" not in known:
                problems.append(
                    ctx.problem(
                        f"backend_config.training.{key}",
                        f"not a flag the embedded torch backend knows{did_you_mean('--' + key, known)}",
                        fix="remove it (the lists are in ascendfactory/engine/train/flags.py), "
                        "or use backend: mindspeed-llm",
                    )
                )
        if not problems:
            try:
                trainer_flags.parse_args(train_argv)
            except ConfigError as e:
                for p in e.problems:
                    key = f"backend_config.training.{p.key.removeprefix('--')}"
                    problems.append(
                        Problem(key=key, message=p.message, fix=p.fix, source=ctx.loaded.source_of(key))
                    )
        self.raise_if(problems)
