"""`ascendfactory-cli convert`: HF <-> Megatron weight conversion with MindSpeed-LLM's converter flags."""

from __future__ import annotations

import typer

from ascendfactory.cli._forward import register_forwarding

EXAMPLES = [
    "ascendfactory-cli convert --load-model-type hf --save-model-type mg --load-dir ./qwen2.5-7b "
    "--save-dir ./qwen_mcore --target-tensor-parallel-size 4 --target-pipeline-parallel-size 2 "
    "--model-type-hf qwen25",
    "ascendfactory-cli convert --load-model-type mg --save-model-type hf --load-dir ./saved_checkpoints "
    "--save-dir ./hf_out --hf-cfg-dir ./qwen2.5-7b",
    "ascendfactory-cli convert --load-model-type mg --save-model-type mg --load-dir ./tp4pp2 "
    "--save-dir ./tp2pp1 --target-tensor-parallel-size 2 --target-pipeline-parallel-size 1",
]


def register(app: typer.Typer) -> None:
    register_forwarding(
        app,
        name="convert",
        module="ascendfactory.engine.convert.__main__",
        examples=EXAMPLES,
        help="Convert weights HF->Megatron, Megatron->HF or Megatron->Megatron (reshard), with the flags of "
        "MindSpeed-LLM's convert_ckpt_v2.py. Run with --help for every flag.",
    )
