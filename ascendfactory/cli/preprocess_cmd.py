"""`ascendfactory-cli preprocess`: raw data -> Megatron indexed datasets, with preprocess_data.py's flags."""

from __future__ import annotations

import typer

from ascendfactory.cli._forward import FORWARD_SETTINGS, forward

EXAMPLES = [
    "ascendfactory-cli preprocess --input data.jsonl --tokenizer-name-or-path ./qwen2.5-7b "
    "--output-prefix ./out/alpaca --handler-name AlpacaStyleInstructionHandler --prompt-type qwen --workers 4",
    "ascendfactory-cli preprocess --input ./pretrain/ --tokenizer-name-or-path ./llama3-8b "
    "--output-prefix ./out/corpus --json-keys text --append-eod",
]


def register(app: typer.Typer) -> None:
    @app.command(
        "preprocess",
        context_settings=FORWARD_SETTINGS,
        add_help_option=False,
        help="Tokenize json/jsonl/parquet data into Megatron indexed datasets (.bin/.idx), with the flags "
        "of MindSpeed-LLM's preprocess_data.py. Run with --help for every flag.",
        epilog="Examples:\n\n" + "\n\n".join(EXAMPLES),
    )
    def preprocess(ctx: typer.Context) -> None:
        forward("ascendfactory.engine.data.preprocess", ctx)
