"""`ascendfactory-cli preprocess`: raw data -> Megatron indexed datasets, with preprocess_data.py's flags."""

from __future__ import annotations

import typer

from ascendfactory.cli._forward import register_forwarding

EXAMPLES = [
    "ascendfactory-cli preprocess --input data.jsonl --tokenizer-name-or-path ./qwen2.5-7b "
    "--output-prefix ./out/alpaca --handler-name AlpacaStyleInstructionHandler --prompt-type qwen "
    "--workers 4",
    "ascendfactory-cli preprocess --input ./pretrain/ --tokenizer-name-or-path ./llama3-8b "
    "--output-prefix ./out/corpus --json-keys text --append-eod",
]


def register(app: typer.Typer) -> None:
    register_forwarding(
        app,
        name="preprocess",
        module="ascendfactory.engine.data.preprocess",
        examples=EXAMPLES,
        help="Tokenize json/jsonl/parquet data into Megatron indexed datasets (.bin/.idx), with the flags of "
        "MindSpeed-LLM's preprocess_data.py. Run with --help for every flag.",
    )
