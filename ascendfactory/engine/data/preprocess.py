"""`python -m ascendfactory.engine.data.preprocess`: MindSpeed-LLM's `preprocess_data.py`, flag for flag.

This module imports nothing heavy (argparse and the standard library) so that `--help` and
`ascendfactory-cli preprocess` stay fast; tokenizers, numpy and pyarrow are imported inside `main`.

Examples:
    python -m ascendfactory.engine.data.preprocess --input corpus.jsonl \\
        --tokenizer-name-or-path ./qwen2.5-7b --output-prefix out/corpus --append-eod --workers 4
      -> out/corpus_text_document.{bin,idx}

    python -m ascendfactory.engine.data.preprocess --input alpaca.parquet \\
        --tokenizer-name-or-path ./qwen2.5-7b --output-prefix out/alpaca \\
        --handler-name AlpacaStyleInstructionHandler --prompt-type qwen --seq-length 4096
      -> out/alpaca_packed_{input_ids,attention_mask,labels}_document.{bin,idx}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

HANDLER_NAMES = (
    "GeneralPretrainHandler",
    "AlpacaStyleInstructionHandler",
    "SharegptStyleInstructionHandler",
    "GeneralInstructionHandler",
    "R1AlpacaStyleInstructionHandler",
    "Math17kAlpacaStyleInstructionHandler",
)


def _json_dict(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f'must be a JSON object, e.g. \'{{"prompt": "question"}}\': {text!r}'
        )
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (MindSpeed-LLM's flag names and defaults, plus `--on-bad-record`)."""
    p = argparse.ArgumentParser(
        prog="python -m ascendfactory.engine.data.preprocess",
        description="Tokenize json/jsonl/parquet records into Megatron indexed datasets (.bin/.idx).",
        epilog="Outputs: pretraining: <prefix>_<key>_document.{bin,idx} (one per --json-keys key); "
        "instruction handlers: <prefix>_packed_{input_ids,attention_mask,labels}_document.{bin,idx} "
        "(R1/Math17k: input_ids = the prompt, labels = the answer's tokens).",
    )
    g = p.add_argument_group("input data")
    g.add_argument("--input", required=True, help="a json/jsonl/parquet file, or a directory of them")
    g.add_argument(
        "--handler-name",
        default="",
        choices=("", *HANDLER_NAMES),
        metavar="NAME",
        help=f"record handler: {', '.join(HANDLER_NAMES)} (default: GeneralPretrainHandler)",
    )
    g.add_argument("--json-keys", nargs="+", default=["text"], help="fields to tokenize (pretraining)")
    g.add_argument(
        "--prompt-type",
        default=None,
        help="chat template of instruction handlers: qwen, chatml, llama3, llama2, alpaca, empty",
    )
    g.add_argument(
        "--map-keys",
        type=_json_dict,
        default=None,
        help='rename record fields, e.g. \'{"prompt":"question","response":"answer"}\'',
    )
    g.add_argument("--pack", action="store_true", help="pack instruction samples into --seq-length rows")
    g.add_argument(
        "--neat-pack",
        action="store_true",
        help="with packing, mark each sample in the attention mask (1, 2, 3, ...)",
    )
    g.add_argument("--max-samples", type=_positive, default=None, help="read at most this many records")
    g.add_argument("--seed", type=int, default=1234, help="accepted for compatibility (nothing is shuffled)")
    g.add_argument(
        "--on-bad-record",
        choices=("fail", "skip"),
        default="fail",
        help="a record with missing/mistyped fields or unreadable JSON: stop (default) or skip "
        "and report the count",
    )
    g = p.add_argument_group("tokenizer")
    g.add_argument(
        "--tokenizer-type",
        default="PretrainedFromHF",
        choices=("PretrainedFromHF",),
        help="only PretrainedFromHF (a local Hugging Face tokenizer directory)",
    )
    g.add_argument("--tokenizer-name-or-path", required=True, help="local Hugging Face tokenizer/model dir")
    g.add_argument("--tokenizer-not-use-fast", action="store_true", help="load the slow tokenizer")
    g.add_argument("--trust-remote-code", action="store_true", help="allow tokenizer code from the dir")
    g.add_argument("--append-eod", action="store_true", help="end each pretraining document with EOD (eos)")
    g.add_argument(
        "--seq-length",
        type=_positive,
        default=None,
        help="instruction samples are cut to this many tokens; the row length with --pack",
    )
    g.add_argument(
        "--make-vocab-size-divisible-by",
        type=int,
        default=128,
        help="accepted for compatibility (padding the vocabulary is training's business)",
    )
    g = p.add_argument_group("output data")
    g.add_argument("--output-prefix", required=True, help="path prefix of the outputs, without suffix")
    g.add_argument("--dataset-impl", default="mmap", choices=("mmap",), help="only mmap")
    g = p.add_argument_group("runtime")
    g.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="tokenizer processes; the output is byte-identical for every count",
    )
    g.add_argument("--log-interval", type=_positive, default=100, help="progress line every N documents")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the program; returns the exit code (1 on a data error, 2 on a usage/config error)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse exits on --help (0) and on usage errors (2)
        return int(e.code or 0)
    from ascendfactory.errors import AscendFactoryError

    try:
        from ascendfactory.engine.data.runner import bad_record_report, describe, run

        summary = run(args)
    except AscendFactoryError as e:
        if os.environ.get("AF_DEBUG", "") not in ("", "0", "false", "False"):
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted; no output was written", file=sys.stderr)
        return 130
    if summary.skipped:
        print(bad_record_report(summary.skipped), file=sys.stderr)
    print(describe(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
