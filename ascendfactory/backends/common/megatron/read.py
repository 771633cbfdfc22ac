"""Reading a Megatron-style experiment (`torch`, `mindspeed-llm`): `backend_config`, the parallel layout,
the data and checkpoint-loading decisions, and rendering flags as argv.

The load decision, in one rule (docs/sources.md#resume-and-fault-recovery, whose two editions contradict each
other):

1. `train_auto_resume: true` and `{af_output_dir}/saved_checkpoints` holds a complete checkpoint (tracker
   names an existing `iter_*`): resume from it (`--load saved_checkpoints`, optimizer and RNG loaded).
   This wins over everything else, including `user_converted_ckpt_path`.
2. Otherwise `ckpt_load_type`: 0 = no `--load`; 1 = `--load <user_converted_ckpt_path or the hf2mg output>
   --finetune --no-load-optim --no-load-rng`; 2 = `--load <user_converted_ckpt_path>` (a true resume).
3. An explicit `backend_config.training.load` replaces the path chosen above.

LoRA (the one rule, for both backends): a LoRA run never resumes: rule 1 with a checkpoint present, or
ckpt_load_type 2, is refused, as AscendFactory does for MindSpeed-LLM LoRA jobs; a LoRA run always starts
from the base weights (rule 2, type 1), and the final conversion merges `saved_checkpoints` into them.
(MindSpeed-LLM's trainer can continue a LoRA run with `--load <base> --lora-load <its output>`, which the
embedded trainer implements exactly; the planner does not plan it.)
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ascendfactory.backends import inputs
from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.common.megatron.config import SEQ_LENGTH
from ascendfactory.backends.common.megatron.tree import OutputTree
from ascendfactory.checkpoints.megatron import inspect, iteration_name
from ascendfactory.config.catalog import ModelArch, resolve_arch
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.parallel import LayoutInput, LayoutReport, validate_layout

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ascendfactory.backends.common.megatron.config import PreprocessSection, TrainingSection
    from ascendfactory.backends.common.megatron.launch import TrainArgs

    M = TypeVar("M", bound=BaseModel)

SECTIONS = ("preprocess_data", "convert_ckpt_hf2mg", "convert_ckpt_mg2hf", "training")
INSTRUCTION_HANDLERS = (
    "AlpacaStyleInstructionHandler",
    "SharegptStyleInstructionHandler",
    "GeneralInstructionHandler",
    "MOSSInstructionHandler",
    "LlamaFactoryInstructionHandler",
    "BelleMultiTurnInstructionHandler",
    "MOSSMultiTurnHandler",
    "R1AlpacaStyleInstructionHandler",
    "R1SharegptStyleInstructionHandler",
    "HunyuanInstructionHandler",
    "PPOAlpacaStyleInstructionHandler",
)
PRETRAIN_HANDLERS = ("GeneralPretrainHandler", "AlpacaPretrainHandler", "StackOverflowPythonPretrainHandler")
LOAD_CONTROL_FLAGS = ("finetune", "no-load-optim", "no-load-rng")
K = "backend_config.training."
P = "backend_config.preprocess_data."
# Keys whose value is a path (a text), in any section (`config.PathKeys` reads them; a test keeps the two
# equal): mindspeed-llm makes them absolute.
PATH_KEYS = frozenset(
    {
        "tokenizer-name-or-path",
        "data-path",
        "load",
        "save",
        "input",
        "output-prefix",
        "load-dir",
        "save-dir",
        "hf-cfg-dir",
        "lora-load",
        "tokenizer-model",
        "tensorboard-dir",
    }
)


def _section(
    ctx: PlanContext, bc: dict[str, Any], name: str, problems: list[Problem]
) -> dict[str, Any] | None:
    """`backend_config.<name>` as a mapping (None when absent or null); anything else is a problem."""
    value = bc.get(name)
    if value is None or isinstance(value, dict):
        return value
    problems.append(
        ctx.problem(
            f"backend_config.{name}",
            f"must be a mapping of keys (got {type(value).__name__} {value!r:.60})",
            fix=f"write `{name}:` followed by indented `key: value` lines, or `{name}: {{}}`",
        )
    )
    return None


def blend_words(given: Any) -> list[str] | None:
    """`--data-path` as Megatron's blend (nargs '*'): a list, or a text that starts with a weight
    ("0.3 /data/a 0.7 /data/b", as the example scripts write it); None for one path (spaces allowed)."""
    if isinstance(given, list):
        words = [str(v) for v in given]
    else:
        words = str(given).split()
        words = words if words and _number(words[0]) else []
    return words if len(words) > 1 else None


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def blend_problem(words: list[str]) -> str | None:
    """Megatron's `get_blend_from_list`: an odd count is all prefixes; an even count is weight/prefix pairs
    when every first word of a pair is a number, all prefixes when none is; a mix fails its assertion."""
    if len(words) % 2:
        numbers = [w for w in words if _number(w)]
        return (
            f"{len(words)} words, {len(numbers)} of them numbers: weights need a prefix each"
            if numbers
            else None
        )
    weights = [_number(w) for w in words[::2]]
    if any(weights) and not all(weights):
        return "some datasets have a weight and some do not (Megatron's blend asserts all or none)"
    if all(weights) and any(_number(w) for w in words[1::2]):
        return "a number stands where a dataset prefix belongs (use weight, prefix pairs)"
    if all(weights) and sum(float(w) for w in words[::2]) <= 0:
        return "the weights must sum to more than 0"
    return None


def blend_prefixes(words: list[str]) -> list[str]:
    """The dataset prefixes of a blend (the words that are not weights)."""
    if len(words) % 2 == 0 and all(_number(w) for w in words[::2]):
        return words[1::2]
    return words


@dataclass
class LoadDecision:
    load: str | None
    flags: dict[str, bool]  # finetune / no-load-optim / no-load-rng
    reason: str
    resume_iteration: int | None = None


F = TypeVar("F")  # what a backend found besides the Megatron facts (MindSpeed-LLM: checkout, converter)


@dataclass
class MegatronRun(Generic[F]):
    """The resolved facts of one Megatron-style experiment; `framework`: the backend's own record."""

    arch: ModelArch
    model_dir: str | None
    stage: str
    training: dict[str, Any]
    preprocess: dict[str, Any] | None
    hf2mg: dict[str, Any]
    mg2hf: dict[str, Any] | None  # None = final conversion disabled
    report: LayoutReport
    layout: OutputTree
    nnodes: int
    nproc_per_node: int
    node_rank: int
    tp: int
    pp: int
    cp: int
    num_layer_list: list[int] | None
    lora: bool
    framework: F
    data_path: str | list[str] | None = None  # one prefix, or Megatron's blend (weights, prefixes)
    data_is_instruction: bool = False
    preprocess_prefix: str | None = None
    preprocess_input: str | None = None
    handler: str | None = None
    load: LoadDecision | None = None
    warnings: list[str] = field(default_factory=list)
    typed: TrainingSection | None = None  # the training section as the plan reads it (its defaults)
    # What the training program will parse (`launch.TrainArgs`), set once the plan has decided every flag:
    # the argv, the facts, the throughput's sequence length and the memory job read it.
    launch: TrainArgs | None = None

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def dp(self) -> int:
        return self.report.dims.dp

    @property
    def ep(self) -> int:
        """Expert parallel size (MoE models): training's expert-model-parallel-size, 1 when not given."""
        value = self.training.get("expert-model-parallel-size")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1

    @property
    def converted_dir(self) -> str:
        return self.layout.converted_weights(self.tp, self.pp, self.ep)

    def facts(self) -> dict[str, Any]:
        """What `--dry-run` and the run summary show about the resolved layout and inputs (the sizes as the
        training program will parse them, once the launch is decided)."""
        args = self.launch
        return {
            "model": self.arch.name,
            "arch_source": self.arch.source,
            "stage": self.stage,
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "devices_per_node": self.nproc_per_node,
            "node_rank": self.node_rank,
            "tp": self.tp,
            "pp": self.pp,
            "cp": self.cp,
            "ep": self.ep,
            "dp": self.dp,
            "num_layer_list": self.num_layer_list,
            "data_path": self.data_path,
            "seq_length": args.seq_length if args else self.training.get("seq-length"),
            "micro_batch_size": args.micro_batch_size if args else self.training.get("micro-batch-size"),
            "global_batch_size": args.global_batch_size(self.dp)
            if args
            else self.training.get("global-batch-size"),
            "train_iters": args.number("train-iters") if args else self.training.get("train-iters"),
            "load": self.load.load if self.load else None,
            "load_reason": self.load.reason if self.load else None,
        }


def to_flags(options: dict[str, Any]) -> list[str]:
    """Megatron argv from a flag mapping: true -> `--flag`, false/None -> omitted, list -> repeated values,
    a value that starts with `-` -> `--flag=value`."""
    argv: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = f"--{key}"
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv.append(flag)
            argv.extend(str(v) for v in value)
        elif isinstance(value, dict):
            import json

            argv += [flag, json.dumps(value, separators=(",", ":"))]
        elif (text := _num(value)).startswith("-"):
            argv.append(f"{flag}={text}")  # argparse would take `-1e-05` for an option of its own
        else:
            argv += [flag, text]
    return argv


def _num(value: Any) -> str:
    if isinstance(value, float):
        return repr(value) if value != int(value) or abs(value) < 1 else str(value)
    return str(value)


def read_megatron_run(
    ctx: PlanContext,
    *,
    framework: F,
    strict_paths: bool,
    extra_keys: tuple[str, ...] = (),
    cp_head_split: Callable[[dict[str, Any], int], int | None] | None = None,
) -> MegatronRun[F]:
    """Resolve and validate everything the Megatron-style plans need; raise ConfigError listing all problems.

    `framework`: the backend's own record, carried by the run. `extra_keys`: top-level `backend_config` keys
    a backend reads itself (e.g. mindspeed-llm's `converter`). `cp_head_split(training, cp)`: the part of CP
    that splits the attention heads under the framework's context-parallel algorithm (None, or no function:
    all of CP).
    """
    cfg = ctx.config
    problems: list[Problem] = []
    sections = _read_sections(ctx, extra_keys, problems)
    training, typed = sections.training, sections.typed
    bad = {p.key for p in problems}  # values the typed sections refused (their defaults stand in)
    model_dir = typed.tokenizer_name_or_path or (
        None if K + "tokenizer-name-or-path" in bad else cfg.model_name_or_path
    )
    if model_dir and "tokenizer-name-or-path" not in training:
        training["tokenizer-name-or-path"] = model_dir
    arch = resolve_arch(cfg.af_model_name, model_dir)
    absent: list[Problem] = []  # input paths not on this machine: errors, or a dry run's warnings
    if model_dir and not os.path.isdir(model_dir):
        absent.append(
            inputs.missing(
                ctx,
                K + "tokenizer-name-or-path",
                model_dir,
                "directory {path} does not exist",
                fix="point it at the HF model directory (config.json, tokenizer, weights)",
            )
        )
    stage = cfg.stage or typed.stage or "sft"
    if stage not in ("pt", "sft"):
        problems.append(
            ctx.problem(
                "stage",
                f"'{stage}' is not a stage of this backend",
                fix="use pt (pre-training) or sft (fine-tuning)",
            )
        )
    cp = typed.context_parallel_size or 1
    split = cp_head_split(training, cp) if cp_head_split and cp > 1 else None
    report = _layout(ctx, typed, arch, problems, split)
    env = cfg.env
    run = MegatronRun(
        arch=arch,
        model_dir=model_dir,
        stage=stage,
        training=training,
        preprocess=sections.preprocess,
        hf2mg=sections.hf2mg,
        mg2hf=sections.mg2hf,
        report=report,
        layout=OutputTree(cfg.af_output_dir),
        nnodes=env.NNODES,
        nproc_per_node=ctx.devices.count,
        node_rank=env.NODE_RANK,
        tp=report.dims.tp,
        pp=report.dims.pp,
        cp=report.dims.cp,
        num_layer_list=typed.num_layer_list,
        lora=typed.lora,
        framework=framework,
        warnings=list(report.warnings),
        typed=typed,
    )
    if K + "data-path" not in bad:
        _resolve_data(ctx, run, typed, sections.preprocess_typed, bad, problems, absent)
    inputs.route(absent, strict=strict_paths, problems=problems, warnings=run.warnings)
    run.load = _decide_load(ctx, run, typed.load, problems)
    if problems:
        raise ConfigError(problems)
    return run


@dataclass
class Sections:
    """The four sections as written (their flags reach argv as given) and, typed, what the plan reads."""

    training: dict[str, Any]
    preprocess: dict[str, Any] | None
    hf2mg: dict[str, Any]
    mg2hf: dict[str, Any] | None  # None = final conversion disabled
    typed: TrainingSection
    preprocess_typed: PreprocessSection


def _read_sections(ctx: PlanContext, extra_keys: tuple[str, ...], problems: list[Problem]) -> Sections:
    """The sections, with the problems of unknown sections and of the values the typed sections refuse
    (paths, sizes, the preprocess worker count)."""
    from ascendfactory.backends.common.megatron.config import (
        ConvertSection,
        PreprocessSection,
        TrainingSection,
    )
    from ascendfactory.config.problems import validate_with_defaults

    cfg = ctx.config
    bc = dict(cfg.backend_config or {})
    for section in bc:
        if section not in SECTIONS and section not in extra_keys:
            problems.append(
                ctx.problem(
                    f"backend_config.{section}",
                    f"unknown section{did_you_mean(section, SECTIONS)}",
                    fix="sections are: " + ", ".join(SECTIONS),
                )
            )
    sections = {name: _section(ctx, bc, name, problems) for name in SECTIONS}
    mg2hf: dict[str, Any] | None = dict(sections["convert_ckpt_mg2hf"] or {})
    if ("convert_ckpt_mg2hf" in bc and bc["convert_ckpt_mg2hf"] is None) or not cfg.convert_mg2hf_at_last:
        mg2hf = None
    training = dict(sections["training"] or {})
    preprocess = sections["preprocess_data"]
    hf2mg = dict(sections["convert_ckpt_hf2mg"] or {})

    def typed(model: type[M], values: dict[str, Any] | None, name: str) -> M:
        return validate_with_defaults(
            model,
            values or {},
            source_of=ctx.loaded.source_of,
            prefix=f"backend_config.{name}.",
            problems=problems,
        )

    read = Sections(
        training=training,
        preprocess=preprocess,
        hf2mg=hf2mg,
        mg2hf=mg2hf,
        typed=typed(TrainingSection, training, "training"),
        preprocess_typed=typed(PreprocessSection, preprocess, "preprocess_data"),
    )
    typed(ConvertSection, hf2mg, "convert_ckpt_hf2mg")
    typed(ConvertSection, mg2hf, "convert_ckpt_mg2hf")
    return read


_LAYOUT_KEYS = (
    ("tp", "tensor-model-parallel-size"),
    ("pp", "pipeline-model-parallel-size"),
    ("cp", "context-parallel-size"),
    ("mbs", "micro-batch-size"),
    ("gbs", "global-batch-size"),
    ("seq", "seq-length"),
    ("max_pos", "max-position-embeddings"),
    ("nll", "num-layer-list"),
    ("sp", "sequence-parallel"),
    ("ep", "expert-model-parallel-size"),
)


def _switch(ctx: PlanContext, key: str) -> bool:
    """Whether training's switch `key` is on (given true; a value of the wrong kind is refused by the flag
    checks, and counted as off here)."""
    training = ctx.config.backend_config.get("training")
    return isinstance(training, dict) and training.get(key) is True


def _expert_parallel(ctx: PlanContext) -> int:
    """training's expert-model-parallel-size as a layout degree (1 when not given; a value that is not a
    whole number is refused by the flag checks, and counted as 1 here)."""
    training = ctx.config.backend_config.get("training")
    value = training.get("expert-model-parallel-size") if isinstance(training, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _layout(
    ctx: PlanContext,
    typed: TrainingSection,
    arch: ModelArch,
    problems: list[Problem],
    cp_head_split: int | None = None,
) -> LayoutReport:
    """The layout report (`report.dims`: tp, pp, cp, dp): the typed sizes, checked by `validate_layout`."""
    env = ctx.config.env
    report = validate_layout(
        LayoutInput(
            world_size=env.NNODES * ctx.devices.count,
            tp=typed.tensor_model_parallel_size or 1,
            pp=typed.pipeline_model_parallel_size or 1,
            cp=typed.context_parallel_size or 1,
            mbs=typed.micro_batch_size or 1,
            gbs=typed.global_batch_size,
            num_layers=arch.layers,
            heads=arch.heads,
            kv_heads=arch.kv_heads,
            seq_length=typed.seq_length or SEQ_LENGTH,  # null given: the section's default
            max_position_embeddings=typed.max_position_embeddings or arch.max_pos,
            num_layer_list=typed.num_layer_list,
            sequence_parallel=typed.sequence_parallel,
            ep=_expert_parallel(ctx),
            experts=arch.experts,
            cp_head_split=cp_head_split,
            decrease_batch_size=_switch(ctx, "decrease-batch-size-if-needed"),
            keys={name: K + key for name, key in _LAYOUT_KEYS}
            | {
                "world": f"env.NNODES({env.NNODES}) x devices per node"
                f"({ctx.devices.count}, from {ctx.devices.source})"
            },
        )
    )
    for p in report.problems:
        problems.append(Problem(key=p.key, message=p.message, fix=p.fix, source=ctx.loaded.source_of(p.key)))
    return report


def _resolve_data(
    ctx: PlanContext,
    run: MegatronRun,
    typed: TrainingSection,
    pre: PreprocessSection,
    bad: set[str],
    problems: list[Problem],
    absent: list[Problem],
) -> None:
    """The data to train on (`run.data_path`) and what preprocessing makes it; input paths not on this
    machine go to `absent`; `bad`: the keys whose value was refused."""
    _handler(ctx, run, pre, problems)
    given = typed.data_path or ctx.config.processed_data_dir
    if given:
        key = K + "data-path" if typed.data_path else "processed_data_dir"
        _preprocessed_data(ctx, run, key, given, problems, absent)
    else:
        _data_to_preprocess(ctx, run, pre, P + "input" in bad, problems, absent)


def _handler(ctx: PlanContext, run: MegatronRun, pre: PreprocessSection, problems: list[Problem]) -> None:
    """The preprocessing handler (the stage's default), checked against the stage; whether the data is
    instruction data."""
    handler = pre.handler_name or (
        "GeneralPretrainHandler" if run.stage == "pt" else "AlpacaStyleInstructionHandler"
    )
    run.handler = handler
    if handler in PRETRAIN_HANDLERS and run.stage == "sft":
        problems.append(
            ctx.problem(
                "backend_config.preprocess_data.handler-name",
                f"{handler} makes pre-training data but stage is sft",
                fix="use AlpacaStyleInstructionHandler / SharegptStyleInstructionHandler, or stage: pt",
            )
        )
    if handler in INSTRUCTION_HANDLERS and run.stage == "pt":
        problems.append(
            ctx.problem(
                "backend_config.preprocess_data.handler-name",
                f"{handler} makes instruction data but stage is pt",
                fix="use GeneralPretrainHandler, or stage: sft",
            )
        )
    run.data_is_instruction = handler in INSTRUCTION_HANDLERS


def _preprocessed_data(
    ctx: PlanContext, run: MegatronRun, key: str, given: Any, problems: list[Problem], absent: list[Problem]
) -> None:
    """`training.data-path` or `processed_data_dir` (`key`): one prefix (or a directory of one), or a
    Megatron blend of weight/prefix pairs; each prefix must have files on this machine."""
    words = blend_words(given)
    if not words:
        run.data_path = _data_prefix(str(given), run.data_is_instruction)
        if not glob.glob(run.data_path + "*"):
            absent.append(
                inputs.missing(
                    ctx,
                    key,
                    str(given),
                    "no preprocessed data at {path}",
                    fix="point it at <prefix>_text_document (pt) or the <prefix> of "
                    "<prefix>_packed_*_document files (sft), or remove it to preprocess",
                )
            )
        return
    wrong = blend_problem(words)
    if wrong:
        problems.append(
            ctx.problem(
                key,
                f"{' '.join(words)!r} is not a Megatron data blend: {wrong}",
                fix="give one prefix, or weight/prefix pairs (e.g. [0.3, /data/a, 0.7, /data/b])",
            )
        )
        return
    prefixes = blend_prefixes(words)
    run.data_path = [w if w not in prefixes else _data_prefix(w, run.data_is_instruction) for w in words]
    missing = [p for p in blend_prefixes(run.data_path) if not glob.glob(p + "*")]
    if missing:
        absent.append(
            inputs.missing(
                ctx,
                key,
                missing[0],
                f"no preprocessed data at {', '.join(missing)}",
                "point each prefix at data",
            )
        )


def _data_to_preprocess(
    ctx: PlanContext,
    run: MegatronRun,
    pre: PreprocessSection,
    refused: bool,
    problems: list[Problem],
    absent: list[Problem],
) -> None:
    """No preprocessed data given: `preprocess_data.input` (or the top-level `dataset`) is tokenized with
    the model's tokenizer into `{preprocess_dir}/<name>` (or `output-prefix`). `refused`: the input given
    is not a path (already a problem)."""
    if refused:
        return
    source = pre.input or ctx.config.dataset
    if not source:
        problems.append(
            ctx.problem(
                "backend_config.preprocess_data.input",
                "no training data: neither preprocess_data.input nor training.data-path is set",
                fix="set backend_config.preprocess_data.input to a json/jsonl/parquet file or "
                "directory, or backend_config.training.data-path to preprocessed data",
            )
        )
        return
    if isinstance(source, str) and not os.path.exists(source):
        absent.append(
            inputs.missing(
                ctx,
                "backend_config.preprocess_data.input" if pre.input else "dataset",
                str(source),
                "{path} does not exist",
                fix="point it at a json, jsonl or parquet file, or a directory of them",
            )
        )
    if not run.model_dir:
        problems.append(
            ctx.problem(
                K + "tokenizer-name-or-path",
                "required to tokenize the dataset (neither it nor model_name_or_path is set)",
                fix="set it, or model_name_or_path, to the HF model directory",
            )
        )
    name = os.path.splitext(os.path.basename(str(source).rstrip("/")))[0] or "dataset"
    run.preprocess_input = str(source)
    run.preprocess_prefix = pre.output_prefix or os.path.join(run.layout.preprocess_dir, name)
    run.data_path = (
        run.preprocess_prefix if run.data_is_instruction else f"{run.preprocess_prefix}_text_document"
    )


def _data_prefix(given: str, instruction: bool) -> str:
    """A directory of preprocessed files -> its prefix; a prefix is returned as is."""
    if os.path.isdir(given):
        pattern = "*_packed_input_ids_document.idx" if instruction else "*_text_document.idx"
        found = sorted(glob.glob(os.path.join(given, pattern)))
        if found:
            f = found[0]
            return f[: -len("_packed_input_ids_document.idx")] if instruction else f[: -len(".idx")]
    return given


def load_by_rule(
    ctx: PlanContext,
    *,
    saved: str,
    explicit: str | None,
    problems: list[Problem],
    resume_flags: dict[str, bool],
    weights_only: LoadDecision,
) -> LoadDecision:
    """The one load rule of the Megatron-style backends: `train_auto_resume` with a complete checkpoint in
    `saved` continues it (with `resume_flags`); else `ckpt_load_type` 0 loads nothing (or `explicit`), 2
    resumes `explicit` or `user_converted_ckpt_path` with optimizer and RNG, 1 is `weights_only`, which the
    backend decides (its converted weights and flags)."""
    cfg = ctx.config
    state = inspect(saved) if os.path.isdir(saved) else None  # what a re-run or auto-resume continues
    if cfg.train_auto_resume and state is not None and state.resumable:
        tracker = int(state.tracker)  # type: ignore[arg-type]
        return LoadDecision(
            load=saved,
            flags=resume_flags,
            resume_iteration=tracker,
            reason=f"train_auto_resume: newest complete checkpoint {iteration_name(tracker)} in "
            "saved_checkpoints (wins over user_converted_ckpt_path)",
        )
    if cfg.ckpt_load_type == 0:
        return LoadDecision(
            load=explicit, flags={}, reason="ckpt_load_type 0: no weights loaded (random init)"
        )
    if cfg.ckpt_load_type == 2:
        if not (cfg.user_converted_ckpt_path or explicit):
            problems.append(
                ctx.problem(
                    "user_converted_ckpt_path",
                    "ckpt_load_type 2 (resume) needs the training checkpoint to resume from",
                    fix="set user_converted_ckpt_path to a saved_checkpoints directory, or use "
                    "ckpt_load_type 1",
                )
            )
        return LoadDecision(
            load=explicit or cfg.user_converted_ckpt_path,
            flags={f: False for f in resume_flags},
            reason="ckpt_load_type 2: weights + optimizer + RNG from user_converted_ckpt_path",
        )
    return weights_only


def _decide_load(
    ctx: PlanContext, run: MegatronRun, explicit: str | None, problems: list[Problem]
) -> LoadDecision:
    decision = load_by_rule(
        ctx,
        saved=run.layout.saved_checkpoints,
        explicit=explicit,
        problems=problems,
        resume_flags={},
        weights_only=LoadDecision(
            load=explicit or ctx.config.user_converted_ckpt_path or run.converted_dir,
            flags={f: True for f in LOAD_CONTROL_FLAGS},
            reason="ckpt_load_type 1: weights only (--finetune --no-load-optim --no-load-rng)",
        ),
    )
    if run.lora and decision.resume_iteration is not None:
        problems.append(
            ctx.problem(
                "train_auto_resume",
                "LoRA fine-tuning cannot resume from a checkpoint (MindSpeed-LLM does not support it)",
                fix="set train_auto_resume: false, or move saved_checkpoints away",
            )
        )
    elif run.lora and ctx.config.ckpt_load_type == 2:
        problems.append(
            ctx.problem(
                "ckpt_load_type",
                "LoRA fine-tuning does not support resume (type 2)",
                fix="use ckpt_load_type 1",
            )
        )
    return decision


def hf2mg_skip_reason(ctx: PlanContext, run: MegatronRun) -> str | None:
    """Why the HF -> Megatron conversion is not needed, or None when it must run."""
    cfg = ctx.config
    if cfg.ckpt_load_type == 0:
        return "ckpt_load_type 0: training starts from random weights"
    if run.load and run.load.resume_iteration is not None:
        return "train_auto_resume: resuming from saved_checkpoints, converted weights not needed"
    if cfg.ckpt_load_type == 2:
        return "ckpt_load_type 2: resuming from user_converted_ckpt_path"
    if cfg.user_converted_ckpt_path:
        return f"user_converted_ckpt_path given: {cfg.user_converted_ckpt_path}"
    if run.training.get("load"):
        return f"backend_config.training.load given: {run.training['load']}"
    return None
