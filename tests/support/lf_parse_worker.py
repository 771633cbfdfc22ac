"""What `llamafactory-cli train` parses from train yamls, many per process: run with LLaMA-Factory's python.

    <env>/bin/python lf_parse_worker.py < cases.jsonl > parsed.jsonl

Each input line: `{"id": ..., "args": {...}}`, the mapping our plan writes to llamafactory_train.yaml. Each
output line: `{"id", "values": {...}}` with the values the estimate reads, as LLaMA-Factory's parser
(`HfArgumentParser` over `llamafactory.hparams.parser._TRAIN_ARGS`, transformers' `TrainingArguments`
included) holds them, or `{"id", "error"}`.

Two keys are read as written, not through the parser, because transformers refuses them on a machine
without an accelerator or without DeepSpeed, whatever their value would mean elsewhere: `bf16` / `fp16`
("Your setup doesn't support bf16/gpu") and `deepspeed` (it imports DeepSpeed to hold the config). Their
values are plain booleans and a json (path or mapping) the parser passes through unchanged.
Imports nothing from ascendfactory (it runs in LLaMA-Factory's environment).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

AS_WRITTEN = ("bf16", "fp16", "deepspeed")


def parse(args: dict, parser) -> dict:  # noqa: ANN001
    given = {k: v for k, v in args.items() if k not in AS_WRITTEN}
    model, data, training, finetuning, _ = parser.parse_dict(given, allow_extra_keys=False)
    flash = model.flash_attn
    return {
        "per_device_train_batch_size": training.per_device_train_batch_size,
        "gradient_accumulation_steps": training.gradient_accumulation_steps,
        "cutoff_len": data.cutoff_len,
        "finetuning_type": finetuning.finetuning_type,
        "lora_rank": finetuning.lora_rank,
        "freeze_trainable_layers": finetuning.freeze_trainable_layers,
        "pure_bf16": finetuning.pure_bf16,
        "bf16": bool(args.get("bf16", False)),
        "fp16": bool(args.get("fp16", False)),
        "disable_gradient_checkpointing": model.disable_gradient_checkpointing,
        "quantization_bit": model.quantization_bit,
        "flash_attn": getattr(flash, "value", flash),
        "deepspeed": args.get("deepspeed"),
    }


def main() -> int:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        os.environ.setdefault("LLAMAFACTORY_VERBOSITY", "ERROR")
        from llamafactory.hparams.parser import _TRAIN_ARGS
        from transformers import HfArgumentParser

        parser = HfArgumentParser(_TRAIN_ARGS)
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            try:
                reply = {"id": request["id"], "values": parse(request["args"], parser)}
            except (Exception, SystemExit) as e:  # noqa: BLE001 - reported to the test
                reply = {"id": request["id"], "error": f"{type(e).__name__}: {str(e)[:300]}"}
            out.write(json.dumps(reply) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
