"""LLaMA-Factory's own verdict on train yamls, many per process: run with LLaMA-Factory's python.

    <env>/bin/python lf_worker.py < cases.jsonl > verdicts.jsonl

Each input line: `{"id": ..., "args": {...}}`, the mapping our plan writes to llamafactory_train.yaml.
Each output line: `{"id", "ok", "error"}`. What decides: `llamafactory.hparams.get_train_args` (its
HfArgumentParser, transformers' TrainingArguments checks, and LLaMA-Factory's own rules), then the chat
template lookup `get_template_and_fix_tokenizer` makes first (`template` must be registered).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys


def judge(args: dict, get_train_args, templates) -> str | None:  # noqa: ANN001
    try:
        _, data_args, _, _, _ = get_train_args(dict(args))
        if data_args.template is not None and data_args.template not in templates:
            return f"ValueError: Template {data_args.template} does not exist."
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the framework's refusal is the answer
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[-1] if text else ''}"[:300]
    return None


def main() -> int:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        os.environ.setdefault("LLAMAFACTORY_VERBOSITY", "ERROR")
        from llamafactory.data.template import TEMPLATES
        from llamafactory.hparams import get_train_args

        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            error = judge(request["args"], get_train_args, TEMPLATES)
            out.write(json.dumps({"id": request["id"], "ok": error is None, "error": error}) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
