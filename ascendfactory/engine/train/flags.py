"""The trainer's command line: MindSpeed-LLM / Megatron flags, sorted into four lists kept here as data.

- HONOURED: flags the embedded trainer implements with Megatron's meaning.
- ARCHITECTURE: model-shape flags MindSpeed scripts pass; they must agree with the HF config.json
  (`arch.check_architecture`), a mismatch is a ConfigError.
- IGNORED: purely-performance flags (fused kernels, overlap, ...): accepted, no effect, listed in one
  info line.
- REFUSED: flags that change the numerics in a way this trainer does not implement: ConfigError naming them.

Nothing heavy is imported here, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ascendfactory.engine.convert.lora import TARGET_MODULES, check_targets
from ascendfactory.engine.train.moe import flags as moe_flags
from ascendfactory.engine.train.recompute import problems as recompute_problems
from ascendfactory.errors import ConfigError, Problem

BOOL, VALUE, LIST = "bool", "value", "list"

# flag -> (kind, default, type, help).  kind: BOOL = store_true, VALUE = one value, LIST = one or more values
HONOURED: dict[str, tuple[str, Any, Any, str]] = {
    "--micro-batch-size": (VALUE, 1, int, "samples per micro-batch per data-parallel rank"),
    "--global-batch-size": (VALUE, None, int, "samples per iteration (default MBS x DP)"),
    "--seq-length": (VALUE, None, int, "tokens per sample"),
    "--train-iters": (VALUE, None, int, "iterations to train"),
    "--lr": (VALUE, None, float, "peak learning rate"),
    "--min-lr": (VALUE, 0.0, float, "learning rate floor of the decay"),
    "--lr-decay-style": (VALUE, "linear", str, "constant | linear | cosine"),
    "--lr-decay-iters": (VALUE, None, int, "iterations of the decay (default --train-iters)"),
    "--lr-warmup-fraction": (VALUE, None, float, "warm-up as a fraction of the decay iterations"),
    "--lr-warmup-iters": (VALUE, 0, int, "warm-up iterations"),
    "--lr-warmup-init": (VALUE, 0.0, float, "learning rate at the start of warm-up"),
    "--weight-decay": (VALUE, 0.01, float, "AdamW weight decay (not on biases and norms)"),
    "--clip-grad": (VALUE, 1.0, float, "gradient-norm clipping (0 = off)"),
    "--adam-beta1": (VALUE, 0.9, float, "Adam beta1"),
    "--adam-beta2": (VALUE, 0.999, float, "Adam beta2"),
    "--adam-eps": (VALUE, 1e-8, float, "Adam epsilon"),
    "--optimizer": (VALUE, "adam", str, "adam (AdamW, as Megatron)"),
    "--seed": (VALUE, 1234, int, "random seed: initialisation and data order"),
    "--init-method-std": (VALUE, 0.02, float, "std of the random initialisation (no --load)"),
    "--bf16": (BOOL, False, None, "compute in bfloat16 over fp32 master weights; checkpoints in bf16"),
    "--fp16": (BOOL, False, None, "compute in float16 with dynamic loss scaling; checkpoints in fp16"),
    "--initial-loss-scale": (VALUE, 2.0**32, float, "first dynamic loss scale (fp16)"),
    "--min-loss-scale": (VALUE, 1.0, float, "smallest dynamic loss scale (fp16)"),
    "--loss-scale-window": (VALUE, 1000, int, "iterations without overflow before the scale doubles (fp16)"),
    "--loss-scale": (VALUE, None, float, "static loss scale (fp16)"),
    "--tensor-model-parallel-size": (VALUE, 1, int, "TP degree"),
    "--pipeline-model-parallel-size": (VALUE, 1, int, "PP degree"),
    "--context-parallel-size": (VALUE, 1, int, "only 1 is supported"),
    "--num-layer-list": (VALUE, None, str, "layers per pipeline stage, e.g. 3,5"),
    "--ckpt-format": (VALUE, "torch", str, "torch: iter_N/mp_rank_XX/model_optim_rng.pt (the only one here)"),
    "--data-path": (LIST, None, str, "dataset prefix (pretrain: <prefix>_text_document; sft: <prefix>)"),
    "--split": (VALUE, "969,30,1", str, "train,valid,test document split (Megatron's rounding)"),
    "--tokenizer-name-or-path": (VALUE, None, str, "HF model folder: config.json (+ tokenizer)"),
    "--tokenizer-type": (VALUE, "PretrainedFromHF", str, "PretrainedFromHF"),
    "--load": (VALUE, None, str, "Megatron checkpoint folder to load"),
    "--save": (VALUE, None, str, "folder to save Megatron checkpoints to"),
    "--save-interval": (VALUE, None, int, "save every N iterations (and at the end)"),
    "--exit-interval": (VALUE, None, int, "save and exit when iteration % N == 0"),
    "--log-interval": (VALUE, 100, int, "print the training_log line every N iterations"),
    "--log-throughput": (BOOL, False, None, "add 'throughput per GPU (TFLOP/s/GPU)' to the log line"),
    "--finetune": (BOOL, False, None, "load weights only; iteration and data position start at 0"),
    "--no-load-optim": (BOOL, False, None, "do not load optimizer/scheduler state"),
    "--no-load-rng": (BOOL, False, None, "do not load RNG state"),
    "--no-save-optim": (BOOL, False, None, "do not save optimizer/scheduler state"),
    "--no-save-rng": (BOOL, False, None, "do not save RNG state"),
    "--exit-on-missing-checkpoint": (BOOL, False, None, "fail when --load has no checkpoint"),
    "--stage": (VALUE, None, str, "pt | sft"),
    "--is-instruction-dataset": (BOOL, False, None, "sft data: loss on response tokens only"),
    "--prompt-type": (VALUE, None, str, "template used at preprocessing (accepted)"),
    "--no-shuffle": (BOOL, False, None, "keep the dataset order"),
    "--full-shuffle-instruction-dataset": (BOOL, False, None, "shuffle all sft samples (always done)"),
    "--attention-dropout": (VALUE, 0.0, float, "attention dropout"),
    "--hidden-dropout": (VALUE, 0.0, float, "hidden dropout (only 0 is supported)"),
    "--distributed-backend": (VALUE, None, str, "nccl | gloo | hccl (mapped to the device found)"),
    "--distributed-timeout-minutes": (
        VALUE,
        None,
        int,
        "collective timeout (default: env "
        "AF_DISTRIBUTED_TIMEOUT_S seconds, set by the runner, else 10 minutes)",
    ),
    "--tensorboard-dir": (VALUE, None, str, "TensorBoard event files under <dir>/rank_{id}/"),
    "--tensorboard-queue-size": (VALUE, 10, int, "TensorBoard writer queue size"),
    "--log-loss-scale-to-tensorboard": (BOOL, False, None, "write loss-scale to TensorBoard"),
    "--log-timers-to-tensorboard": (BOOL, False, None, "write iteration-time / throughput to TensorBoard"),
    "--af-monitor-config": (VALUE, None, str, "YAML/JSON file with `monitor_config` and `tensorboard` keys"),
    # Megatron's W&B flags (training/arguments.py `_add_logging_args`): on when the project is set; the
    # mode (offline, online) and the run id to continue come from wandb's own WANDB_MODE / WANDB_RUN_ID
    "--wandb-project": (VALUE, "", str, "W&B project: the logged scalars go to W&B too"),
    "--wandb-exp-name": (VALUE, "", str, "W&B run name"),
    "--wandb-save-dir": (VALUE, "", str, "where wandb writes its run folder (default <save>/wandb)"),
    "--af-report-to": (
        LIST,
        [],
        str,
        "more trackers for the logged scalars, each with its settings from its own variables: mlflow "
        "(MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, MLFLOW_RUN_ID), swanlab (SWANLAB_MODE, "
        "SWANLAB_LOG_DIR, SWANLAB_PROJ_NAME, SWANLAB_EXP_NAME), or a registered tracker that opens "
        "itself (Tracker.from_env)",
    ),
    # Megatron's defaults (core_r0.8.0 arguments.py): evaluate every 1000 iterations and after training
    "--eval-interval": (VALUE, 1000, int, "validation loss every N iterations (0: only after training)"),
    "--eval-iters": (VALUE, 100, int, "batches per evaluation on the valid/test split (0: no evaluation)"),
    # LoRA, MindSpeed-LLM's flags and defaults (2.1.0 training/arguments.py `_add_lora_args`)
    "--lora-target-modules": (LIST, [], str, "LoRA on these Megatron modules: " + " ".join(TARGET_MODULES)),
    "--lora-r": (VALUE, None, int, "LoRA rank (default 16)"),
    "--lora-alpha": (VALUE, None, int, "LoRA alpha, the scaling is lora_alpha / lora_r (default 32)"),
    "--lora-load": (VALUE, None, str, "a LoRA checkpoint whose adapters (and state) go over --load"),
    "--lora-ckpt-filter": (BOOL, False, None, "save only the LoRA keys"),
    # Megatron's check_for_nan_in_loss_and_grad (on by default, store_false; off with fp16 dynamic scaling)
    "--no-check-for-nan-in-loss-and-grad": (
        BOOL,
        False,
        None,
        "keep training through a NaN loss or gradient norm (by default the run stops at the first one, "
        "naming the iteration)",
    ),
    # Megatron's memory features
    "--use-distributed-optimizer": (
        BOOL,
        False,
        None,
        "Adam state sharded over the data-parallel ranks (reduce-scatter, step on the shard, all-gather); "
        "optimizer shards in distrib_optim.pt",
    ),
    "--sequence-parallel": (
        BOOL,
        False,
        None,
        "with TP > 1: norms and the hidden states between the TP regions split along the sequence "
        "(off with TP 1, as Megatron turns it off)",
    ),
    # virtual pipeline: Megatron's interleaved 1F1B (torch.distributed.pipelining ScheduleInterleaved1F1B)
    "--num-layers-per-virtual-pipeline-stage": (
        VALUE,
        None,
        int,
        "layers per model chunk: each PP rank holds num_layers / PP / N chunks, chunk c of rank r being "
        "virtual stage c x PP + r; checkpoints hold model0, model1, ...",
    ),
    "--virtual-pipeline-model-parallel-size": (
        VALUE,
        None,
        int,
        "model chunks per PP rank (= num_layers / PP / --num-layers-per-virtual-pipeline-stage)",
    ),
    # activation recompute, Megatron's flags and rules (engine/train/recompute.py)
    "--recompute-granularity": (VALUE, None, str, "full (whole layers) | selective (the core attention)"),
    "--recompute-method": (VALUE, None, str, "full: uniform (every layer, in chunks) | block (first N)"),
    "--recompute-num-layers": (VALUE, None, int, "full: layers per chunk (uniform) or recomputed (block)"),
    "--recompute-activations": (BOOL, False, None, "= --recompute-granularity selective"),
    # kernels (engine/train/kernels.py)
    "--use-fused-rmsnorm": (
        BOOL,
        False,
        None,
        "RMSNorm as one fused kernel (torch.nn.functional.rms_norm: normalise and scale in fp32, round once)",
    ),
    "--af-torch-compile": (
        BOOL,
        False,
        None,
        "torch.compile each decoder layer (fuses RoPE, SwiGLU and the norms; the first iterations compile)",
    ),
    # packed sequences (engine/train/packed.py), MindSpeed-LLM's meaning
    "--reset-position-ids": (
        BOOL,
        False,
        None,
        "positions restart after each end-of-document token (EOS) and attention stays within each "
        "document (rows packed by preprocess --pack, or pre-training windows)",
    ),
    "--reset-attention-mask": (
        BOOL,
        False,
        None,
        "attention stays within each document, a document ending with its EOD token (pre-training)",
    ),
    "--neat-pack": (
        BOOL,
        False,
        None,
        "with --reset-position-ids: documents and positions from the attention mask's sample numbers "
        "(preprocess --neat-pack)",
    ),
}

# Model-shape flags, checked against config.json by arch.check_architecture.
ARCHITECTURE: dict[str, tuple[str, Any, Any, str]] = {
    "--num-layers": (VALUE, None, int, "== num_hidden_layers"),
    "--hidden-size": (VALUE, None, int, "== hidden_size"),
    "--ffn-hidden-size": (VALUE, None, int, "== intermediate_size"),
    "--num-attention-heads": (VALUE, None, int, "== num_attention_heads"),
    "--num-query-groups": (VALUE, None, int, "== num_key_value_heads (with --group-query-attention)"),
    "--group-query-attention": (BOOL, False, None, "num_key_value_heads < num_attention_heads"),
    "--kv-channels": (VALUE, None, int, "== head_dim"),
    "--max-position-embeddings": (VALUE, None, int, ">= --seq-length"),
    "--swiglu": (BOOL, False, None, "hidden_act == silu"),
    "--normalization": (VALUE, None, str, "RMSNorm"),
    "--norm-epsilon": (VALUE, None, float, "== rms_norm_eps"),
    "--rotary-base": (VALUE, None, float, "== rope_theta"),
    "--position-embedding-type": (VALUE, None, str, "rope"),
    "--use-rotary-position-embeddings": (BOOL, False, None, "rope"),
    "--untie-embeddings-and-output-weights": (BOOL, False, None, "tie_word_embeddings == false"),
    "--add-qkv-bias": (BOOL, False, None, "q/k/v projections have a bias (Qwen2)"),
    "--disable-bias-linear": (BOOL, False, None, "no bias in o_proj / MLP"),
    "--qk-layernorm": (BOOL, False, None, "q/k RMSNorm (Qwen3)"),
    "--padded-vocab-size": (VALUE, None, int, ">= vocab_size; the model's embedding rows"),
    "--make-vocab-size-divisible-by": (VALUE, 1, int, "vocabulary padding multiple (x TP)"),
}

# Purely-performance flags: accepted, no effect on the numerics here, listed once in an info line.
IGNORED: dict[str, str] = {
    "--use-flash-attn": BOOL,
    "--use-fused-swiglu": BOOL,
    "--use-fused-rotary-pos-emb": BOOL,
    "--use-fused-ring-attention-update": BOOL,
    "--use-mcore-models": BOOL,
    "--overlap-grad-reduce": BOOL,
    "--overlap-param-gather": BOOL,
    "--no-overlap-p2p-communication": BOOL,  # only the PP > 2 rule for a virtual pipeline (_vpp_problems)
    "--no-masked-softmax-fusion": BOOL,
    "--no-gradient-accumulation-fusion": BOOL,
    "--attention-softmax-in-fp32": BOOL,
    "--no-bias-dropout-fusion": BOOL,
    "--no-bias-swiglu-fusion": BOOL,
    "--no-rope-fusion": BOOL,
    "--use-cpu-initialization": BOOL,
    "--swap-attention": BOOL,
    "--tokenizer-not-use-fast": BOOL,
    "--padded-samples": BOOL,
    "--variable-seq-lengths": BOOL,
    "--no-pad-to-seq-lengths": BOOL,
    "--num-workers": VALUE,
    "--manual-gc": BOOL,
    "--manual-gc-interval": VALUE,
    "--no-create-attention-mask-in-dataloader": BOOL,
    "--tp-comm-overlap": BOOL,
    "--use-ascend-mc2": BOOL,
    "--reuse-fp32-param": BOOL,
    "--use-fused-moe": BOOL,
    "--fp16-lm-cross-entropy": BOOL,
    "--cross-entropy-loss-fusion": BOOL,
    "--jit-compile": BOOL,
    "--async-save": BOOL,
    "--profile": BOOL,
    "--timing-log-level": VALUE,
    "--log-timers-to-tensorboard-interval": VALUE,
    "--no-save-args": BOOL,
    "--lora-fusion": BOOL,  # CCLoRA: the same LoRA maths with communication overlapped
    "--lora-register-forward-hook": LIST,  # only for full recompute
    "--lora-modules-to-save": LIST,  # defined but read nowhere by MindSpeed-LLM 2.1.0 / master
}

# Why an IGNORED flag that promises less memory does not change memory or numerics here (printed with the
# info line when one is given; facts from MindSpeed's source).
IGNORED_WHY: dict[str, str] = {
    "--swap-attention": "MindSpeed copies the attention layers' saved activations to pinned host memory "
    "during the forward and prefetches them back for the backward (the same values: no numeric change); "
    "this trainer does not offload, so on CPU (host = device) nothing could be saved and on a GPU/NPU the "
    "activations stay on the device: use --recompute-granularity to lower the activation peak",
    "--reuse-fp32-param": "MindSpeed (bf16 only) folds the bf16 model weights into the fp32 master copy "
    "(fp32 = bf16 + residual, bit-exact), saving the separate bf16 copy (2 bytes per parameter); this "
    "trainer keeps the bf16 weights beside the fp32 masters (Megatron's layout without the flag): the "
    "same numerics, without that saving",
    "--no-overlap-p2p-communication": "the pipeline's sends and receives are not overlapped here either; "
    "it only makes a virtual pipeline need PP > 2, as in Megatron",
    "--use-flash-attn": "MindSpeed selects its fused flash-attention kernel; this trainer's attention is "
    "torch's SDPA, which runs its flash kernel on CUDA for causal rows (and packed rows through the varlen "
    "kernel) without the flag",
    "--use-fused-rotary-pos-emb": "MindSpeed runs RoPE as one NPU kernel; torch has no fused RoPE kernel, "
    "so this trainer applies HF's rotation (--af-torch-compile fuses it)",
    "--use-fused-swiglu": "MindSpeed runs SwiGLU as one NPU kernel; torch has no fused SwiGLU kernel, so "
    "this trainer runs HF's MLP (--af-torch-compile fuses it)",
}

# Flags that change the numerics in a way this trainer does not implement: refused, naming the flag.
REFUSED: dict[str, str] = {
    "--qlora": "QLoRA",
    "--qlora-save-dequantize": "QLoRA",
    "--eod-mask-loss": "EOD loss masking",
    "--rotary-seq-len-interpolation-factor": "RoPE scaling",
    "--apply-layernorm-1p": "LayerNorm1p",
    "--mtp-num-layers": "multi-token prediction",
    "--noop-layers": "no-op layers",
    "--context-parallel-algo": "context parallelism",
    "--ulysses-degree-in-cp": "context parallelism",
    "--fp8": "FP8 training",
    "--dpo-beta": "DPO",
    "--sliding-window": "sliding-window attention",
    "--apply-query-key-layer-scaling": "QK layer scaling",
}
_REFUSED_KIND = {
    "--qlora": BOOL,
    "--qlora-save-dequantize": BOOL,
    "--eod-mask-loss": BOOL,
    "--apply-layernorm-1p": BOOL,
    "--apply-query-key-layer-scaling": BOOL,
}

HONOURED.update(moe_flags.HONOURED)  # mixture of experts (engine/train/moe/flags.py)
ARCHITECTURE.update(moe_flags.ARCHITECTURE)
IGNORED.update(moe_flags.IGNORED)
IGNORED_WHY.update(moe_flags.IGNORED_WHY)
REFUSED.update(moe_flags.REFUSED)
_REFUSED_KIND.update(moe_flags.REFUSED_KIND)

# HONOURED by this trainer, not by the GRPO actor (engine/rl), which refuses them (they change its numerics)
REFUSED_IN_GRPO = ("--reset-position-ids", "--reset-attention-mask", "--neat-pack")

# HONOURED by this trainer, not by the GRPO actor (engine/rl): its info line lists them as ignored
NOT_IN_GRPO = (
    *moe_flags.HONOURED,  # the GRPO actor runs the HF model's own MoE blocks, without expert parallelism
    "--af-torch-compile",  # the sampler runs the same layers at every length: it would recompile
    "--use-distributed-optimizer",
    "--sequence-parallel",
    "--num-layers-per-virtual-pipeline-stage",
    "--virtual-pipeline-model-parallel-size",
)

STAGES = ("pt", "sft")
LORA_DEFAULTS = {"--lora-r": 16, "--lora-alpha": 32}  # MindSpeed-LLM's; None in the parser to see "given"
LR_DECAY_STYLES = ("constant", "linear", "cosine")


def _add(
    group: argparse._ArgumentGroup,
    flag: str,
    kind: str,
    default: Any = None,
    typ: Any = None,
    help: str | None = None,
) -> None:
    if help and help != argparse.SUPPRESS:
        help = help.replace("%", "%%")
    if kind == BOOL:
        group.add_argument(flag, action="store_true", default=default or False, help=help)
    elif kind == LIST:
        group.add_argument(flag, nargs="+", default=default, type=typ or str, help=help)
    else:
        group.add_argument(flag, default=default, type=typ or str, help=help)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun <dist args> -m ascendfactory.engine.train",
        allow_abbrev=False,
        description="Embedded PyTorch trainer with MindSpeed-LLM's flags (pretrain_gpt / posttrain_gpt).",
    )
    honoured = parser.add_argument_group("honoured")
    for flag, (kind, default, typ, text) in HONOURED.items():
        _add(honoured, flag, kind, default, typ, text)
    arch = parser.add_argument_group("architecture (checked against config.json)")
    for flag, (kind, default, typ, text) in ARCHITECTURE.items():
        _add(arch, flag, kind, default, typ, text)
    ignored = parser.add_argument_group("performance flags (accepted, ignored)")
    for flag, kind in IGNORED.items():
        _add(ignored, flag, kind, help=argparse.SUPPRESS)
    refused = parser.add_argument_group("refused")
    for flag in REFUSED:
        kind = _REFUSED_KIND.get(flag, LIST)
        _add(refused, flag, kind if kind == BOOL else LIST, help=argparse.SUPPRESS)
    return parser


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def given(args: argparse.Namespace, flag: str) -> bool:
    """Whether an IGNORED / REFUSED flag was on the command line (an HONOURED one: set to another value
    than its default)."""
    value = getattr(args, _dest(flag), None)
    default = HONOURED[flag][1] if flag in HONOURED else None
    return value is not None and value is not False and value != [] and value != default


def parse_args(
    argv: Sequence[str], *, parser: argparse.ArgumentParser | None = None
) -> tuple[argparse.Namespace, list[str]]:
    """Parse and validate; returns (args, ignored flags given). ConfigError lists every problem at once.
    `parser`: one `build_parser()` made earlier (planning reuses one; building it costs more than parsing)."""
    from ascendfactory.engine.argv_check import parse_known

    args, unknown = parse_known(parser or build_parser(), argv)  # a bad value: ConfigError naming the flag
    problems: list[Problem] = []
    flags = [a.split("=")[0] for a in unknown if a.startswith("--")]
    if flags or unknown:
        problems.append(
            Problem(
                key=", ".join(flags or unknown),
                message="not a flag this trainer knows",
                fix="see `python -m ascendfactory.engine.train --help`; "
                "the lists are in ascendfactory/engine/train/flags.py",
                source="command line",
            )
        )
    for flag, feature in REFUSED.items():
        if given(args, flag):
            problems.append(
                Problem(
                    key=flag,
                    message=f"{feature} changes the numerics and is not supported by "
                    "the embedded torch backend",
                    fix=f"remove {flag}, or use the mindspeed-llm backend",
                    source="command line",
                )
            )
    problems += _check_values(args)
    if problems:
        raise ConfigError(problems)
    return args, [flag for flag in IGNORED if given(args, flag)]


REQUIRED = ("--seq-length", "--train-iters", "--lr", "--tokenizer-name-or-path", "--data-path")


def _check_values(args: argparse.Namespace) -> list[Problem]:
    p: list[Problem] = []

    def need(flag: str, ok: bool, message: str, fix: str) -> None:
        if not ok:
            p.append(Problem(key=flag, message=message, fix=fix, source="command line"))

    for flag in REQUIRED:
        need(flag, getattr(args, _dest(flag)) is not None, "is required", f"add {flag} <value>")
    need(
        "--lr-decay-style",
        args.lr_decay_style in LR_DECAY_STYLES,
        f"'{args.lr_decay_style}' is not supported",
        f"use one of: {', '.join(LR_DECAY_STYLES)}",
    )
    stage = args.stage or ("sft" if args.is_instruction_dataset else "pt")
    need(
        "--stage",
        stage in STAGES,
        f"stage '{stage}' is not supported by the embedded trainer",
        f"use one of: {', '.join(STAGES)}; other stages need the mindspeed-llm backend",
    )
    need(
        "--context-parallel-size",
        args.context_parallel_size == 1,
        f"context parallelism ({args.context_parallel_size}) is not supported by the embedded trainer",
        "use --context-parallel-size 1 (spread the ranks over TP/PP/DP), or the mindspeed-llm backend",
    )
    need(
        "--hidden-dropout",
        not args.hidden_dropout,
        "hidden dropout is not supported (HF Llama/Qwen have none)",
        "use --hidden-dropout 0.0",
    )
    need("--bf16", not (args.bf16 and args.fp16), "--bf16 and --fp16 are both given", "keep one of them")
    # docs/engine-contract.md: the embedded trainer reads and writes Megatron's torch layout, the one
    # MindSpeed-LLM's converters read and 26.1.0's example scripts choose (--ckpt-format torch)
    need(
        "--ckpt-format",
        args.ckpt_format == "torch",
        f"checkpoint format '{args.ckpt_format}' is not written by the embedded trainer",
        "use --ckpt-format torch (iter_N/mp_rank_XX/model_optim_rng.pt, what MindSpeed-LLM's converters "
        "read), or the mindspeed-llm backend for torch_dist",
    )
    need(
        "--optimizer", args.optimizer == "adam", f"optimizer '{args.optimizer}' is not supported", "use adam"
    )
    for flag in (
        "--micro-batch-size",
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--log-interval",
    ):
        value = getattr(args, _dest(flag))
        need(flag, value is not None and value >= 1, f"must be >= 1, got {value}", f"give {flag} 1 or more")
    for flag in ("--train-iters", "--seq-length", "--global-batch-size"):  # when given (required above)
        value = getattr(args, _dest(flag), None)
        need(flag, value is None or value >= 1, f"must be >= 1, got {value}", f"give {flag} 1 or more")
    need(
        "--sequence-parallel",
        not (args.sequence_parallel and args.tensor_model_parallel_size > 1)
        or not args.seq_length
        or args.seq_length % args.tensor_model_parallel_size == 0,
        f"--seq-length {args.seq_length} is not divisible by --tensor-model-parallel-size "
        f"{args.tensor_model_parallel_size}: sequence parallelism splits the sequence over the TP ranks",
        f"use a --seq-length that is a multiple of {args.tensor_model_parallel_size}, "
        "or drop --sequence-parallel",
    )
    need(
        "--neat-pack",
        not args.neat_pack or args.reset_position_ids,
        "Require set `--reset-position-ids` when `--neat-pack` is set. (MindSpeed-LLM's "
        "training/arguments.py)",
        "add --reset-position-ids",
    )
    p += moe_flags.problems(args)
    p += _vpp_problems(args)
    p += distributed_optimizer_switch(args)
    p += _lora_problems(args)
    p += recompute_problems(args)
    for flag in ("--eval-iters", "--eval-interval"):
        value = getattr(args, _dest(flag))
        need(flag, value is not None and value >= 0, f"must be >= 0, got {value}", f"give {flag} 0 or more")
    if args.lr_warmup_fraction is not None and args.lr_warmup_iters:
        p.append(
            Problem(
                key="--lr-warmup-fraction",
                message="both --lr-warmup-fraction and --lr-warmup-iters given",
                fix="keep one of them",
                source="command line",
            )
        )
    args.stage = stage
    return p


def _saved_state_kind(shard: Path) -> str | None:
    """'distributed' / 'replicated' / None (no optimizer state) for one `model_optim_rng.pt`, from the
    files and the pickled dict's key names (the zip's data.pkl: no torch import, no tensor read)."""
    import pickletools
    import zipfile

    if (shard.parent / "distrib_optim.pt").is_file():
        return "distributed"
    try:
        with zipfile.ZipFile(shard) as z:
            pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
        names = {arg for op, arg, _ in pickletools.genops(pkl) if isinstance(arg, str)}
    except (OSError, zipfile.BadZipFile, StopIteration, ValueError):
        return None  # not readable here: the trainer checks it when it loads
    if "opt_param_scheduler" not in names:
        return None
    return "replicated" if "state" in names else "distributed"


def distributed_optimizer_switch(args: argparse.Namespace) -> list[Problem]:
    """Megatron's rule, before launch where --load already holds a checkpoint: a resume with the optimizer
    state keeps the --use-distributed-optimizer setting it was saved with (the trainer checks it again)."""
    if not args.load or args.finetune or args.no_load_optim:
        return []
    root = Path(args.load)
    try:
        iteration = int((root / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return []
    shards = sorted((root / f"iter_{iteration:07d}").glob("mp_rank_*/model_optim_rng.pt"))
    kind = _saved_state_kind(shards[0]) if shards else None
    if kind is None or (kind == "distributed") == bool(args.use_distributed_optimizer):
        return []
    now = "uses" if args.use_distributed_optimizer else "does not use"
    where = {"distributed": "distrib_optim.pt", "replicated": "no distrib_optim.pt"}
    return [
        Problem(
            key="--use-distributed-optimizer",
            message=f"{shards[0].parent} holds the {kind} optimizer's state ({where[kind]}) "
            f"and this run {now} "
            "--use-distributed-optimizer: Megatron cannot load one into the other",
            fix="resume with the same --use-distributed-optimizer setting, or add --no-load-optim (or "
            "--finetune) to take the weights only",
            source="command line",
        )
    ]


def virtual_chunk_layers(args: argparse.Namespace, num_layers: int) -> int | None:
    """Layers per model chunk of the virtual pipeline (None without one), from either flag; 0 when
    --virtual-pipeline-model-parallel-size does not divide the layers (`megatron_io.virtual_stages` then
    refuses it)."""
    pp, per_chunk = args.pipeline_model_parallel_size, args.num_layers_per_virtual_pipeline_stage
    chunks = args.virtual_pipeline_model_parallel_size
    if per_chunk is None and chunks:
        per_chunk = num_layers // pp // chunks if num_layers % (pp * chunks) == 0 else 0
    return per_chunk


def _vpp_problems(args: argparse.Namespace) -> list[Problem]:
    """Megatron core_r0.8.0 validate_args for a virtual pipeline: PP > 1, or PP > 2 with
    --no-overlap-p2p-communication (`overlap_p2p_comm` is on by default: a store_false flag),
    layers divisible by PP, layers per stage divisible by layers per chunk; MindSpeed-LLM: not with
    --num-layer-list. The micro-batch count (divisible by PP) is checked where DP is known (ParallelDims)."""
    per_chunk, chunks = args.num_layers_per_virtual_pipeline_stage, args.virtual_pipeline_model_parallel_size
    if per_chunk is None and chunks is None:
        return []
    flag = (
        "--num-layers-per-virtual-pipeline-stage"
        if per_chunk is not None
        else ("--virtual-pipeline-model-parallel-size")
    )
    value = per_chunk if per_chunk is not None else chunks
    if value < 1:
        return [
            Problem(
                key=flag, message=f"must be >= 1, got {value}", fix="give 1 or more", source="command line"
            )
        ]
    pp, layers = args.pipeline_model_parallel_size, args.num_layers
    out = []

    def bad(message: str, fix: str) -> None:
        out.append(Problem(key=flag, message=message, fix=fix, source="command line"))

    if pp < 2:
        bad(
            "when interleaved schedule is used, pipeline-model-parallel size should be greater than 1 "
            f"(got {pp})",
            "use --pipeline-model-parallel-size 2 or more, or drop " + flag,
        )
    elif pp == 2 and args.no_overlap_p2p_communication:
        bad(
            "when interleaved schedule is used and p2p communication overlap is disabled, "
            f"pipeline-model-parallel size should be greater than 2 (got {pp})",
            "use --pipeline-model-parallel-size 3 or more, drop --no-overlap-p2p-communication, or drop "
            + flag,
        )
    if args.num_layer_list:
        bad(
            "Dynamic pipeline model is not support work with virtual pipeline (--num-layer-list)",
            "drop --num-layer-list (virtual pipeline stages are even) or " + flag,
        )
    if per_chunk is not None and chunks is not None and layers and layers % pp == 0:
        if layers // pp != per_chunk * chunks:
            bad(
                f"{per_chunk} layers per chunk x {chunks} chunks != {layers} layers / PP {pp}",
                "give only one of the two virtual-pipeline flags",
            )
    per = virtual_chunk_layers(args, layers) if layers else None
    if layers and (layers % pp or not per or (layers // pp) % per):
        bad(
            f"--num-layers {layers} over {pp} pipeline stages in chunks of {per or f'1/{chunks}'}: "
            "number of layers should be divisible by the pipeline parallel size, and the layers "
            "per pipeline stage by the layers per virtual pipeline stage",
            "choose a chunk size dividing num_layers / PP",
        )
    return out


def _lora_problems(args: argparse.Namespace) -> list[Problem]:
    """LoRA is on when --lora-target-modules names modules (MindSpeed-LLM's `is_enable_lora`)."""
    problems = check_targets(args.lora_target_modules)
    if len(set(args.lora_target_modules)) != len(args.lora_target_modules):
        problems.append(
            Problem(
                key="--lora-target-modules",
                message=f"{' '.join(args.lora_target_modules)}: a module is named twice",
                fix="name each module once",
                source="command line",
            )
        )
    for flag, default in LORA_DEFAULTS.items():
        value = getattr(args, _dest(flag))
        if value is not None and value < 1:
            problems.append(
                Problem(key=flag, message=f"must be >= 1, got {value}", fix=f"give {flag} 1 or more")
            )
    if not args.lora_target_modules:
        lonely = [
            f for f in ("--lora-r", "--lora-alpha", "--lora-load", "--lora-ckpt-filter") if given(args, f)
        ]
        for flag in lonely:
            problems.append(
                Problem(
                    key=flag,
                    message="has no effect: LoRA is off without --lora-target-modules",
                    fix=f"add --lora-target-modules ({' '.join(TARGET_MODULES)}), or remove {flag}",
                    source="command line",
                )
            )
    for flag, default in LORA_DEFAULTS.items():
        if getattr(args, _dest(flag)) is None:
            setattr(args, _dest(flag), default)
    return problems


def known_flags() -> list[str]:
    """Every flag the trainer accepts (honoured, architecture, ignored or refused), for 'did you mean'."""
    return [*HONOURED, *ARCHITECTURE, *IGNORED, *REFUSED]
