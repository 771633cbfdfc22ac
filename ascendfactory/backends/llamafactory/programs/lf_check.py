"""LLaMA-Factory's own checks of a train yaml, before anything trains: run in LLaMA-Factory's environment.

    <env>/bin/python lf_check.py llamafactory_train.yaml

1. its argument parser (`llamafactory.hparams.get_train_args`): unknown keys, value types it parses,
   bf16/fp16 support, finetuning method, missing dependencies (deepspeed), an output directory with
   weights but no checkpoint;
2. what the parser leaves to later: the tokenizer loads, the chat template exists, every dataset is
   registered in dataset_info.json.

Writes nothing. Exit 0 with one summary line, or 2 with one `error:` line (the exception's own message).
Imports nothing from ascendfactory (that environment does not have it).
"""

from __future__ import annotations

import sys
import time


def say(text: str) -> None:
    print(f"[lf-check] {text}", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        say("usage: lf_check.py TRAIN_YAML")
        return 2
    t0 = time.perf_counter()
    import yaml

    with open(argv[0], encoding="utf-8") as f:
        args = yaml.safe_load(f)
    try:
        from llamafactory.hparams import get_train_args

        imported = time.perf_counter()
        model_args, data_args, training_args, finetuning_args, _ = get_train_args(args)
        from llamafactory.data import get_template_and_fix_tokenizer
        from llamafactory.data.parser import get_dataset_list
        from llamafactory.model import load_tokenizer

        tokenizer = load_tokenizer(model_args)["tokenizer"]
        get_template_and_fix_tokenizer(tokenizer, data_args)
        found = get_dataset_list(data_args.dataset, data_args.dataset_dir)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the framework's own message is the report
        message = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        say(f"error: {type(e).__name__}: {message}")
        return 2
    done = time.perf_counter()
    say(
        f"ok: stage {finetuning_args.stage}, {finetuning_args.finetuning_type}, "
        f"{len(found)} dataset(s), template {data_args.template}, output {training_args.output_dir} "
        f"(import {imported - t0:.1f} s, checks {done - imported:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
