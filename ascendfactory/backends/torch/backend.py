"""The embedded `torch` backend: MindSpeed-LLM's four steps, run by our own programs.

preprocess  python -m ascendfactory.engine.data.preprocess   (= preprocess_data.py)
hf2mg       python -m ascendfactory.engine.convert           (= convert_ckpt_v2.py hf -> mg)
train       python -m torch.distributed.run ... -m ascendfactory.engine.train   (= posttrain/pretrain_gpt.py)
mg2hf       python -m ascendfactory.engine.convert           (= convert_ckpt_v2.py mg -> hf)
plot        training_loss.png from the last rank's log (in-process)

`stage: grpo` runs a MindSpeed-RL experiment instead (`grpo.py`: preprocess, hf2mg, torchrun
`-m ascendfactory.engine.rl`, mg2hf, plot).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ascendfactory.backends.base import PlanContext, owned_key_problems
from ascendfactory.backends.common.megatron.read import (
    MegatronRun,
    hf2mg_skip_reason,
    read_megatron_run,
    to_flags,
)
from ascendfactory.backends.common.megatron.skeleton import (
    MEGATRON_TRACKERS,
    MG2HF_DISABLED,
    MegatronBackend,
    T,
    owned_save,
    process,
)
from ascendfactory.backends.common.mindspeed_rl_experiment.trackers import MSRL_TRACKERS
from ascendfactory.backends.registry import register_backend
from ascendfactory.backends.report_to import ANY_TRACKER, TrackerKeys
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.engine.train.flags import LORA_DEFAULTS
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.memory.target import MemoryTarget
from ascendfactory.plan import Plan, Role, Step

if TYPE_CHECKING:
    from ascendfactory.backends.environment import Check


def _is_switch(parser: Any, key: str) -> bool:
    """Whether `--key` takes no value in `parser` (store_true and the like)."""
    return any(f"--{key}" in a.option_strings and a.nargs == 0 for a in parser._actions)


# Flags the planner sets itself; a user value for them is folded in, never passed twice.
TRAINING = "backend_config.training."
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


# The embedded trainer: Megatron's TensorBoard and W&B flags, and every tracker it opens itself (MLflow,
# SwanLab, a plugin's: `Tracker.from_env`) by `--af-report-to` (settings and the run to continue from their
# own variables).
TORCH_TRACKERS: dict[str, TrackerKeys] = {
    **MEGATRON_TRACKERS,
    ANY_TRACKER: TrackerKeys(append={"training.af-report-to": "{name}"}),
}
# Its GRPO trainer: MindSpeed-RL's switches, as the mindspeed-rl backend maps them (engine/rl/trackers.py
# reads them); MindSpeed-RL has no MLflow integration, so neither has the GRPO trainer.
GRPO_TRACKERS: dict[str, TrackerKeys] = {k: MSRL_TRACKERS[k] for k in ("tensorboard", "wandb", "swanlab")}


@register_backend
class TorchBackend(MegatronBackend[None]):
    name = "torch"
    description = "embedded PyTorch implementation of the MindSpeed-LLM contract (CPU/GPU/NPU)"
    order = 0
    stages = ("pt", "sft", "grpo")
    # its trainer: "error (rank N): K configuration problem(s):", and the NaN check's "found NaN in"
    unretryable = ("configuration problem", "found NaN in")
    tracker_keys = TORCH_TRACKERS
    # its trainer reports the loss as MindSpore Transformers' MFLossMonitor names it, `loss`
    # (engine/train/monitor.py `training_scalars`), where Megatron's writers say `lm loss`
    tracker_names = {"lm loss": "loss"}
    trains_on_cpu = True  # gloo on CPU; `accelerator: cpu` forces it on a node with accelerators

    def trackers_for(self, stage: str | None) -> Mapping[str, Any]:
        return GRPO_TRACKERS if stage == "grpo" else TORCH_TRACKERS

    memory_engine = "embedded"  # engine/train: 16-bit weights + fp32 masters, chunked cross-entropy

    def memory_target(self, run: Any) -> MemoryTarget | None:
        if isinstance(run, MegatronRun):  # pt/sft: the GRPO reader is not loaded for them
            return super().memory_target(run)
        from ascendfactory.backends.common.mindspeed_rl_experiment.memory import RLRun, rl_target

        return rl_target(run, engine=self.memory_engine) if isinstance(run, RLRun) else None

    def plan(self, ctx: PlanContext, *, strict_paths: bool = True) -> Plan:
        """The plan of the stage; a real run on a Python without the embedded backend's packages (a core
        `pip install .`) is refused here, with every other problem, before anything is written."""
        missing = missing_packages()
        refused = [missing_packages_problem(ctx, missing)] if missing and strict_paths else []
        try:
            if ctx.config.stage == "grpo":
                from ascendfactory.backends.torch.grpo import plan_grpo

                plan = plan_grpo(self, ctx, strict_paths=strict_paths)
            else:
                plan = super().plan(ctx, strict_paths=strict_paths)
        except ConfigError as e:
            raise ConfigError(refused + e.problems) from None
        self.raise_if(refused)
        if missing:
            p = missing_packages_problem(ctx, missing)
            plan.warnings.append(f"{p.message} (a real run stops here; fix: {p.fix})")
        return plan

    # -- steps --------------------------------------------------------------------------------------
    def preprocess_step(self, ctx: PlanContext, run: MegatronRun[None], shared: bool) -> Step:
        if run.preprocess_input is None:
            return Step(
                name="preprocess",
                role=Role.PREPROCESS,
                inputs=[x for x in (run.model_dir,) if x],
                skip_reason=f"preprocessed data given: {run.data_path}",
                only_node0=shared,
            )
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
        return Step(
            name="preprocess",
            role=Role.PREPROCESS,
            launch=process([ctx.python, "-m", "ascendfactory.engine.data.preprocess", *to_flags(options)]),
            inputs=[x for x in (run.preprocess_input, run.model_dir) if x],
            outputs=[run.layout.preprocess_dir],
            only_node0=shared,
        )

    def hf2mg_step(self, ctx: PlanContext, run: MegatronRun[None], shared: bool) -> Step:
        skip = hf2mg_skip_reason(ctx, run)
        inputs = [run.model_dir] if run.model_dir else []
        if skip:
            return Step(name="hf2mg", role=Role.CONVERT, inputs=inputs, skip_reason=skip, only_node0=shared)
        options: dict[str, Any] = {
            "load-model-type": "hf",
            "save-model-type": "mg",
            "load-dir": run.model_dir,
            "save-dir": run.converted_dir,
            "target-tensor-parallel-size": run.tp,
            "target-pipeline-parallel-size": run.pp,
            "num-layer-list": ",".join(map(str, run.num_layer_list)) if run.num_layer_list else None,
            "num-layers-per-virtual-pipeline-stage": _virtual_chunk_layers(run),
            # MoE: the trainer's expert parallelism and expert layout (Megatron's GroupedMLP with
            # --moe-grouped-gemm), so the shards are the ones it loads
            "target-expert-parallel-size": run.training.get("expert-model-parallel-size"),
            "moe-grouped-gemm": run.training.get("moe-grouped-gemm") or None,
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
            role=Role.CONVERT,
            launch=process([ctx.python, "-m", "ascendfactory.engine.convert", *to_flags(options)]),
            inputs=inputs,
            outputs=[run.converted_dir],
            only_node0=shared,
        )

    def train_defaults(self, run: MegatronRun[None]) -> Mapping[str, Any]:
        return trainer_defaults()

    def train_flags(self, ctx: PlanContext, run: MegatronRun[None]) -> dict[str, Any]:
        """The user's training flags, then the plan's data, tokenizer, load, save and monitor flags."""
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
        given = (cfg.tensorboard.tensorboard_dir if cfg.tensorboard else None) or run.training.get(
            "tensorboard-dir"
        )
        if given or cfg.tensorboard or cfg.monitor_config:
            ordered["tensorboard-dir"] = given or run.layout.tensorboard_dir
            # The runner writes the resolved experiment there before any step starts.
            ordered["af-monitor-config"] = run.layout.exp_config
        return ordered

    def train_entry(
        self, ctx: PlanContext, run: MegatronRun[None]
    ) -> tuple[list[str], dict[str, str], str | None, list[str]]:
        flags = run.launch.flags if run.launch else self.train_flags(ctx, run)
        load = flags.get("load")
        inputs = [x for x in (flags.get("data-path"), load) if isinstance(x, str) and x]
        return ["-m", "ascendfactory.engine.train", *to_flags(flags)], {}, None, inputs

    def mg2hf_step(self, ctx: PlanContext, run: MegatronRun[None], shared: bool) -> Step:
        out = ctx.config.hf_save_dir or run.layout.mg2hf_dir
        if run.mg2hf is None:
            return Step(
                name="mg2hf",
                role=Role.EXPORT,
                inputs=[run.layout.saved_checkpoints],
                skip_reason=MG2HF_DISABLED,
                only_node0=shared,
            )
        saved = run.layout.saved_checkpoints
        options: dict[str, Any] = {
            "load-model-type": "mg",
            "save-model-type": "hf",
            "load-dir": saved,
            "save-dir": out,
            "hf-cfg-dir": run.model_dir,
            "model-type-hf": run.arch.model_type_hf,
        }
        notes = []
        if run.lora:  # merge the adapters as MindSpeed-LLM's ckpt_convert_*_mcore2hf_lora.sh does
            shape = {k: run.training.get(k) for k in ("lora-r", "lora-alpha", "lora-target-modules")}
            shape["lora-r"] = shape["lora-r"] or LORA_DEFAULTS["--lora-r"]
            shape["lora-alpha"] = shape["lora-alpha"] or LORA_DEFAULTS["--lora-alpha"]
            base = run.load.load if run.load and run.load.resume_iteration is None else None
            if base:
                options.update({"load-dir": base, "lora-load": saved})
                notes.append(f"LoRA: the base weights {base} + the adapters in {saved}")
            else:
                notes.append(f"LoRA: base weights and adapters both from {saved} (no base was loaded)")
            options.update(shape)
        options.update(run.mg2hf)
        inputs = [x for x in (options["load-dir"], options.get("lora-load")) if x]
        return Step(
            name="mg2hf",
            role=Role.EXPORT,
            launch=process([ctx.python, "-m", "ascendfactory.engine.convert", *to_flags(options)]),
            inputs=list(dict.fromkeys(inputs)),
            outputs=[out],
            only_node0=shared,
            notes=notes,
        )

    def model_problem(self, arch: Any, experiment: str | None = None) -> str | None:
        from ascendfactory.engine.convert.families import FAMILIES
        from ascendfactory.engine.train.arch import SUPPORTED_MODEL_TYPES

        if arch.family is None:
            return (
                f"{arch.name} ({arch.model_type_hf}) is not a model family the embedded backend converts "
                f"({', '.join(FAMILIES)})"
            )
        if arch.hf_model_type not in SUPPORTED_MODEL_TYPES:
            return (
                f"{arch.name} ({arch.hf_model_type}) is not a model type the embedded trainer trains "
                f"({', '.join(SUPPORTED_MODEL_TYPES)})"
            )
        return None

    # -- validation ---------------------------------------------------------------------------------
    def read(self, ctx: PlanContext, *, strict_paths: bool) -> MegatronRun[None]:
        """The shared reading, plus every training flag the embedded trainer does not know: all at once."""
        names = self.flag_name_problems(ctx)
        named = {p.key for p in names}  # a misspelt flag is one problem, not also a wrong value
        problems = names + [p for p in self.value_problems(ctx) if p.key not in named]
        try:
            run = read_megatron_run(ctx, framework=None, strict_paths=strict_paths)
        except ConfigError as e:  # the argv checks cannot run: name the missing required flags now
            named = {p.key for p in problems + e.problems}
            missing = [p for p in self.required_problems(ctx) if p.key not in named]
            raise ConfigError(problems + e.problems + missing) from None
        if isinstance(run.data_path, list):
            key = "backend_config.training.data-path"
            problems.append(
                ctx.problem(
                    key
                    if ctx.config.backend_config.get("training", {}).get("data-path")
                    else "processed_data_dir",
                    f"a blend of {len(run.data_path)} words: the embedded trainer reads one dataset prefix",
                    fix="give one prefix here (blends run on backend mindspeed-llm)",
                )
            )
        problems += owned_key_problems(ctx, T, run.training, owned_save(run.layout.saved_checkpoints))
        self.raise_if(problems)
        return run

    def flag_name_problems(self, ctx: PlanContext) -> list[Problem]:
        from ascendfactory.engine.train import flags as trainer_flags

        training = (ctx.config.backend_config or {}).get("training")
        known = trainer_flags.known_flags()
        return [
            ctx.problem(
                f"backend_config.training.{key}",
                f"not a flag the embedded torch backend knows"
                f"{did_you_mean(key, [k.removeprefix('--') for k in known])}",
                fix="remove it (the lists are in ascendfactory/engine/train/flags.py), "
                "or use backend: mindspeed-llm",
            )
            for key in (training if isinstance(training, dict) else {})
            if f"--{key}" not in known
        ]

    def required_problems(self, ctx: PlanContext) -> list[Problem]:
        """The trainer's required flags the training section lacks (the plan fills the data and the
        tokenizer, so only those two are left to the argv check)."""
        from ascendfactory.engine.train.flags import REQUIRED

        training = (ctx.config.backend_config or {}).get("training")
        training = training if isinstance(training, dict) else {}
        return [
            ctx.problem(TRAINING + flag[2:], "is required", f"set {TRAINING + flag[2:]}: <value>")
            for flag in REQUIRED
            if flag not in ("--tokenizer-name-or-path", "--data-path") and training.get(flag[2:]) is None
        ]

    def value_problems(self, ctx: PlanContext) -> list[Problem]:
        """Values each program's parser refuses (`lr: abc`), found before the layout is known."""
        from ascendfactory.engine.argv_check import parse_known

        bc = ctx.config.backend_config or {}
        problems: list[Problem] = []
        for section, program in (
            ("preprocess_data", "preprocess"),
            ("convert_ckpt_hf2mg", "convert"),
            ("training", "train"),
            ("convert_ckpt_mg2hf", "convert"),
        ):
            options = bc.get(section)
            if not isinstance(options, dict):
                continue
            parser = _parser(program)  # built once per process: the trainer's has ~300 flags
            for key, value in options.items():  # one flag at a time: argparse stops at the first error
                try:
                    _, left = parse_known(parser, to_flags({key: value}), values_only=True)
                    if left:  # a switch given a value, or a list where one value goes
                        switch = _is_switch(parser, key)
                        problems.append(
                            ctx.problem(
                                f"backend_config.{section}.{key}",
                                f"is a switch: true or false (got {value!r:.60})"
                                if switch
                                else f"takes one value, not {type(value).__name__} {value!r:.60}",
                                fix="write true or false" if switch else "give a single value",
                            )
                        )
                except ConfigError as e:
                    dotted = f"backend_config.{section}.{key}"
                    problems += [
                        ctx.problem(dotted, p.message, p.fix)
                        for p in e.problems
                        if p.message != "is required"
                    ]
        return problems

    @staticmethod
    def schedule_problems(ctx: PlanContext, run: MegatronRun[None]) -> list[Problem]:
        """torch.distributed.pipelining's 1F1B needs at least as many micro-batches per step as stages
        (Megatron's schedule takes fewer; ours stops with 'Number of microbatches ... must be greater than or
        equal to the number of stages')."""
        gbs, mbs = run.training.get("global-batch-size"), run.training.get("micro-batch-size", 1)
        if run.pp <= 1 or not isinstance(gbs, int) or not isinstance(mbs, int) or not run.dp or not mbs:
            return []
        micro = gbs // (mbs * run.dp)
        if micro >= run.pp:
            return []
        return [
            ctx.problem(
                "backend_config.training.global-batch-size",
                f"gives {micro} micro-batch(es) per step (global-batch-size {gbs} / (micro-batch-size {mbs} "
                f"x data parallel {run.dp})), fewer than the {run.pp} pipeline stages; the embedded "
                "trainer's pipeline schedule needs at least one per stage",
                fix=f"set backend_config.training.global-batch-size: {run.pp * mbs * run.dp} or more",
            )
        ]

    def finish_plan(
        self, ctx: PlanContext, run: MegatronRun[None], plan: Plan, *, strict_paths: bool
    ) -> None:
        """Every planned argv parsed by its program's own parser (values, ranges, refused features)."""
        from ascendfactory.engine.argv_check import parse
        from ascendfactory.engine.train import flags as trainer_flags

        problems: list[Problem] = self.schedule_problems(ctx, run)

        def collect(section: str, check: Any, argv: list[str]) -> None:
            try:
                check(argv)
            except ConfigError as e:
                for p in e.problems:
                    flags = [f.strip().removeprefix("--") for f in p.key.split(",")]
                    key = ", ".join(f"backend_config.{section}.{f}" for f in flags)
                    fix = yaml_fix(p.fix, section)
                    problems.append(Problem(key, p.message, fix, ctx.loaded.source_of(key.split(", ")[0])))

        for step, section, check in (
            ("preprocess", "preprocess_data", lambda a: parse(_parser("preprocess"), a)),
            ("hf2mg", "convert_ckpt_hf2mg", lambda a: parse(_parser("convert"), a)),
            ("train", "training", lambda a: trainer_flags.parse_args(a, parser=_parser("train"))),
            ("mg2hf", "convert_ckpt_mg2hf", lambda a: parse(_parser("convert"), a)),
        ):
            planned = plan.step(step)
            if planned is None or planned.skipped:
                continue
            argv = planned.argv
            module = next(a for a in argv if a.startswith("ascendfactory.engine."))
            collect(section, check, argv[argv.index(module) + 1 :])
        problems += _interleaved_problems(ctx, run)
        self.raise_if(problems)
        from ascendfactory.backends.torch.data_fit import add_data_fit

        add_data_fit(ctx, run, plan)

    # -- doctor ---------------------------------------------------------------------------------------
    def checks(self, environ: Mapping[str, str]) -> list[Check]:
        from ascendfactory.backends.environment import module_check  # doctor's alone: not a plan's import

        return [
            *(module_check(m) for m in EMBEDDED_PACKAGES),
            *(module_check(m, required=False) for m in ("matplotlib", "tensorboard", "psutil")),
        ]


# What the embedded backend's programs import (preprocess: tokenizers, numpy; hf2mg / mg2hf: torch,
# safetensors; train: torch, transformers): the `torch` extra of pyproject.toml.
EMBEDDED_PACKAGES = ("torch", "transformers", "safetensors", "tokenizers", "numpy")


def missing_packages() -> list[str]:
    """The embedded backend's packages this Python cannot import (found without importing them)."""
    import importlib.util

    return [m for m in EMBEDDED_PACKAGES if importlib.util.find_spec(m) is None]


def missing_packages_problem(ctx: PlanContext, missing: list[str]) -> Problem:
    import sys

    return ctx.problem(
        "backend",
        f"torch: the embedded backend's programs need {', '.join(missing)}, which this Python "
        f"({sys.executable}) lacks (a core install: `pip install .` plans and reads logs, it does not train)",
        fix='pip install ".[torch]" from the checkout (or "ascendfactory-cli[torch]"), or sh install.sh',
    )


def trainer_defaults() -> dict[str, Any]:
    """The embedded trainer's parser defaults (flag -> value, its flag tables in engine/train/flags.py),
    with MindSpeed-LLM's LoRA defaults the trainer applies when --lora-r / --lora-alpha are not given."""
    from ascendfactory.engine.train import flags as trainer

    out = {
        flag[2:]: spec[1]
        for table in (trainer.HONOURED, trainer.ARCHITECTURE)
        for flag, spec in table.items()
    }
    out.update({flag[2:]: value for flag, value in LORA_DEFAULTS.items()})
    return out


def yaml_fix(fix: str, section: str) -> str:
    """A program's fix in the form the user writes: `add --train-iters <value>` -> `set
    backend_config.training.train-iters: <value>`; other `--flag` words -> their backend_config key."""
    fix = re.sub(r"\badd --([a-z][\w-]*) <value>", rf"set backend_config.{section}.\1: <value>", fix)
    return re.sub(r"(?<![\w-])--([a-z][\w-]*)", rf"backend_config.{section}.\1", fix)


def _virtual_chunk_layers(run: MegatronRun[None]) -> int | None:
    """hf2mg's --num-layers-per-virtual-pipeline-stage: the training run's virtual pipeline (None without
    one), so the converted checkpoint holds the model chunks (`model0`, `model1`, ...) the trainer loads."""
    t = run.training
    per_chunk = t.get("num-layers-per-virtual-pipeline-stage")
    chunks = t.get("virtual-pipeline-model-parallel-size")
    try:
        if per_chunk is None and chunks:
            per_chunk = run.arch.layers // run.pp // int(chunks)
        per_chunk = int(per_chunk) if per_chunk is not None else None
    except (TypeError, ValueError, ZeroDivisionError):
        return None  # the trainer's parser names the bad value
    if not per_chunk or run.pp < 2 or run.arch.layers // run.pp <= per_chunk:
        return None
    return per_chunk


@functools.lru_cache(maxsize=None)
def _parser(program: str) -> Any:
    """The program's own parser, built once per process (the value checks and the planned argv's parse
    share it; a bulk dry run builds each once): parsing leaves it as it was."""
    from ascendfactory.engine.convert.__main__ import build_parser as convert_parser
    from ascendfactory.engine.data.preprocess import build_parser as preprocess_parser
    from ascendfactory.engine.train.flags import build_parser as train_parser

    return {"preprocess": preprocess_parser, "convert": convert_parser, "train": train_parser}[program]()


def _interleaved_problems(ctx: PlanContext, run: MegatronRun[None]) -> list[Problem]:
    """Megatron's rule for the interleaved schedule, known once DP is: the micro-batches of an iteration
    (GBS / (MBS x DP)) divisible by PP."""
    if _virtual_chunk_layers(run) is None or not run.dp:
        return []
    mbs = int(run.training.get("micro-batch-size") or 1)
    gbs = int(run.training.get("global-batch-size") or mbs * run.dp)
    if gbs % (mbs * run.dp) or (gbs // (mbs * run.dp)) % run.pp == 0:
        return []
    key = "backend_config.training.global-batch-size"
    return [
        Problem(
            key=key,
            message=f"number of microbatches ({gbs // (mbs * run.dp)}) is not divisible by pipeline-model-"
            f"parallel-size ({run.pp}) when using interleaved schedule (MBS {mbs}, DP {run.dp})",
            fix=f"use a global batch size that is a multiple of {mbs * run.dp * run.pp} (MBS x DP x PP)",
            source=ctx.loaded.source_of(key),
        )
    ]
