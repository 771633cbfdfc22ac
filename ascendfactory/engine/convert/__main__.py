"""`python -m ascendfactory.engine.convert`: HF <-> Megatron weights with convert_ckpt_v2.py's flags.

`build_parser()` imports nothing heavy (the CLI's `convert --help` stays fast); `main(argv)` returns an exit
code: 0, 1 for an `AscendFactoryError`, 2 for a `ConfigError` or a bad flag.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence

from ascendfactory.engine.convert.families import FAMILIES
from ascendfactory.errors import AscendFactoryError, ConfigError, Problem

log = logging.getLogger("ascendfactory.convert")

# Flags of the v1 converter (convert_ckpt.py) that v2 dropped; old scripts still pass them.
V1_FLAGS_WITH_VALUE = ("--model-type", "--tokenizer-model")
V1_SWITCHES = ("--use-mcore-models", "--add-qkv-bias")
# v1's `--spec MODULE FUNCTION` (nargs='*': the layer spec its Megatron model is built from); here the
# weights' layout follows --model-type-hf and --target-mindspeed-llm
V1_FLAGS_WITH_VALUES = ("--spec",)

EXAMPLES = """examples:
  python -m ascendfactory.engine.convert --load-model-type hf --save-model-type mg \\
      --load-dir ./qwen2.5-7b --save-dir ./qwen_mcore --target-tensor-parallel-size 4 \\
      --target-pipeline-parallel-size 2 --model-type-hf qwen25
  python -m ascendfactory.engine.convert --load-model-type mg --save-model-type hf \\
      --load-dir ./saved_checkpoints --save-dir ./hf_out --hf-cfg-dir ./qwen2.5-7b
  python -m ascendfactory.engine.convert --load-model-type mg --save-model-type mg \\
      --load-dir ./tp4pp2 --save-dir ./tp2pp1 --target-tensor-parallel-size 2
"""


def build_parser() -> argparse.ArgumentParser:
    """The converter's flags (dashes exactly as in MindSpeed-LLM)."""
    p = argparse.ArgumentParser(
        prog="python -m ascendfactory.engine.convert",
        allow_abbrev=False,
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Convert weights HF->Megatron (mg), Megatron->HF, or reshard Megatron->Megatron. "
        "Megatron checkpoints use MindSpeed-LLM's layout (iter_0000001/mp_rank_TT[_PPP]/model_optim_rng.pt).",
    )
    p.add_argument("--load-model-type", choices=["hf", "mg"], default="hf", help="source format (default hf)")
    p.add_argument("--save-model-type", choices=["mg", "hf"], default="mg", help="target format (default mg)")
    p.add_argument("--load-dir", required=True, help="source: HF model folder, or Megatron checkpoint root")
    p.add_argument("--save-dir", required=True, help="output folder (created if missing)")
    p.add_argument("--target-tensor-parallel-size", type=int, default=1, help="TP of the Megatron output")
    p.add_argument("--target-pipeline-parallel-size", type=int, default=1, help="PP of the Megatron output")
    p.add_argument("--num-layer-list", default=None, help="layers per pipeline stage, e.g. 3,5 (uneven PP)")
    p.add_argument(
        "--num-layers-per-virtual-pipeline-stage",
        type=int,
        default=None,
        help="hf->mg: virtual pipeline (interleaved 1F1B) with this many layers per model chunk; each "
        "shard then holds model0, model1, ... (mg->hf reads such checkpoints without this flag)",
    )
    p.add_argument(
        "--target-expert-parallel-size",
        type=int,
        default=1,
        help="EP of the Megatron output: each EP rank holds num_experts / EP routed experts (MoE models)",
    )
    p.add_argument(
        "--moe-grouped-gemm",
        action="store_true",
        help="write each EP rank's experts in Megatron's grouped-GEMM layout (mlp.experts.weight1/weight2), "
        "as training with --moe-grouped-gemm loads them; mg->hf reads either layout without it",
    )
    p.add_argument(
        "--target-mindspeed-llm",
        choices=["2.1.0", "26.1.0"],
        default="26.1.0",
        help="hf->mg, mg->mg: the MindSpeed-LLM whose trainer loads the output (default 26.1.0). They "
        "differ in three MLA tensors (DeepSeek): 2.1.0's linear_qb, linear_kvb, k_layernorm are 26.1.0's "
        "(Megatron core's) linear_q_up_proj, linear_kv_up_proj, kv_layernorm; mg->hf reads both",
    )
    p.add_argument(
        "--model-type-hf",
        default=None,
        choices=list(FAMILIES),
        help="model family, MindSpeed-LLM's spelling (default: from config.json model_type)",
    )
    p.add_argument(
        "--params-dtype",
        choices=["bf16", "fp16", "fp32"],
        default=None,
        help="cast weights to this dtype (default: keep the source dtype)",
    )
    p.add_argument(
        "--hf-cfg-dir",
        default=None,
        help="mg->hf: HF folder whose config and tokenizer files are copied to --save-dir",
    )
    p.add_argument(
        "--make-vocab-size-divisible-by",
        type=int,
        default=1,
        help="pad the vocabulary to a multiple of this times TP (default 1)",
    )
    lora = p.add_argument_group(
        "LoRA merge (mg -> hf / mg): W + lora_alpha / lora_r * B @ A, as MindSpeed-LLM's converter"
    )
    lora.add_argument(
        "--lora-load",
        default=None,
        help="the LoRA training output (its --save folder); --load-dir is then the base checkpoint it loaded",
    )
    lora.add_argument("--lora-r", type=int, default=None, help="the training run's --lora-r")
    lora.add_argument("--lora-alpha", type=int, default=None, help="the training run's --lora-alpha")
    lora.add_argument(
        "--lora-target-modules",
        nargs="+",
        default=[],
        help="the training run's targets (linear_qkv linear_proj linear_fc1 linear_fc2); checked",
    )
    p.add_argument("--max-shard-size", default="5GB", help="mg->hf: largest safetensors file (default 5GB)")
    p.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="skip the check of tensor names, shapes and dtypes after conversion",
    )
    p.add_argument(
        "--verify-logits",
        action="store_true",
        help="also run the HF model with source and converted weights and compare logits",
    )
    return p


def _strip_v1_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """Remove v1-only flags (and their values); return (remaining argv, the flags removed)."""
    out, dropped, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in V1_SWITCHES:
            dropped.append(arg)
        elif name in V1_FLAGS_WITH_VALUE:
            dropped.append(name)
            if "=" not in arg and i + 1 < len(argv):
                i += 1
        elif name in V1_FLAGS_WITH_VALUES:
            dropped.append(name)
            while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                i += 1
        else:
            out.append(arg)
        i += 1
    return out, dropped


def _validate(a: argparse.Namespace) -> None:
    problems = []
    if a.load_model_type == "hf" and a.save_model_type == "hf":
        problems.append(
            Problem(
                key="--save-model-type",
                message="hf -> hf is not a conversion",
                fix="use --save-model-type mg",
                source="command line",
            )
        )
    for flag, value in (
        ("--target-tensor-parallel-size", a.target_tensor_parallel_size),
        ("--target-pipeline-parallel-size", a.target_pipeline_parallel_size),
        ("--target-expert-parallel-size", a.target_expert_parallel_size),
        ("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by),
    ):
        if value < 1:
            problems.append(
                Problem(
                    key=flag,
                    message=f"must be >= 1, got {value}",
                    fix=f"give {flag} 1 or more",
                    source="command line",
                )
            )
    problems += _lora_problems(a)
    problems += _vpp_problems(a)
    if problems:
        raise ConfigError(problems)


def _vpp_problems(a: argparse.Namespace) -> list[Problem]:
    """--num-layers-per-virtual-pipeline-stage: hf->mg only, >= 1, not with --num-layer-list (MindSpeed-LLM's
    converter: `num_layer_list and vpp cannot be configured at the same time`). The layer divisibility is
    checked with the model's layer count (`megatron_io.virtual_stages`)."""
    per_chunk, flag = a.num_layers_per_virtual_pipeline_stage, "--num-layers-per-virtual-pipeline-stage"
    if per_chunk is None:
        return []
    problems = []
    if (a.load_model_type, a.save_model_type) != ("hf", "mg"):
        problems.append(
            Problem(
                key=flag,
                message=f"is for hf -> mg; this is {a.load_model_type} -> {a.save_model_type}",
                fix="drop it (mg -> hf reads model0, model1, ... by itself; mg -> mg writes no virtual "
                "pipeline: convert mg -> hf -> mg for one)",
                source="command line",
            )
        )
    if per_chunk < 1:
        problems.append(
            Problem(
                key=flag,
                message=f"must be >= 1, got {per_chunk}",
                fix="give 1 or more",
                source="command line",
            )
        )
    if a.num_layer_list:
        problems.append(
            Problem(
                key=flag,
                message="num_layer_list and vpp cannot be configured at the same time",
                fix="drop --num-layer-list (virtual pipeline stages are even) or this flag",
                source="command line",
            )
        )
    return problems


def _lora_problems(a: argparse.Namespace) -> list[Problem]:
    from ascendfactory.engine.convert.lora import check_targets

    given = [f for f, v in (("--lora-load", a.lora_load), ("--lora-r", a.lora_r)) if v is not None]
    problems: list[Problem] = []
    if a.lora_target_modules:
        problems += check_targets(a.lora_target_modules)
        if not given:
            given.append("--lora-target-modules")
    if not given and a.lora_alpha is None:
        return problems

    def bad(key: str, message: str, fix: str) -> None:
        problems.append(Problem(key=key, message=message, fix=fix, source="command line"))

    if a.load_model_type != "mg":
        bad(given[0] if given else "--lora-alpha", "merges LoRA adapters of a Megatron checkpoint",
            "use it with --load-model-type mg")  # fmt: skip
    for flag, value in (("--lora-r", a.lora_r), ("--lora-alpha", a.lora_alpha)):
        if value is None:
            bad(flag, "is required to merge LoRA adapters (the scaling is lora_alpha / lora_r)",
                f"give the training run's {flag}")  # fmt: skip
        elif value < 1:
            bad(flag, f"must be >= 1, got {value}", f"give the training run's {flag}")
    return problems


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at the time (it may be replaced after set-up, e.g. by tests)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def _setup_logging() -> None:
    if not log.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[convert] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Parse argv, run the conversion, and turn errors into an exit code."""
    _setup_logging()
    args_list, dropped = _strip_v1_flags(list(sys.argv[1:] if argv is None else argv))
    try:
        a = build_parser().parse_args(args_list)
    except SystemExit as e:  # --help (0) or a bad flag (2)
        return int(e.code or 0)
    if dropped:
        log.info(
            "ignoring v1-only flags (convert_ckpt_v2.py reads them from config.json): %s", " ".join(dropped)
        )
    t0 = time.perf_counter()
    try:
        _validate(a)
        from ascendfactory.engine.convert.run import run

        run(a)
    except AscendFactoryError as e:
        if os.environ.get("AF_DEBUG", "") not in ("", "0", "false", "False"):
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    log.info("done: %s -> %s in %.1fs", a.load_model_type, a.save_model_type, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
