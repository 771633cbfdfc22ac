"""LLaMA-Factory's own verdict on train yamls, many per process: run with LLaMA-Factory's python.

    <env>/bin/python lf_worker.py < cases.jsonl > verdicts.jsonl

Each input line: `{"id": ..., "args": {...}}`, the mapping our plan writes to llamafactory_train.yaml.
Each output line: `{"id", "ok", "error", "at"}` (`at`: a refusal's traceback, `file:line` places).
What decides: `llamafactory.hparams.get_train_args` (its HfArgumentParser, transformers' TrainingArguments
checks, and LLaMA-Factory's own rules), then the chat template lookup `get_template_and_fix_tokenizer`
makes first (`template` must be registered). Each verdict starts from no accelerator state, as a fresh
`llamafactory-cli train` process does.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import judging  # noqa: E402


def judge(args: dict, get_train_args, templates) -> tuple[str | None, list[str]]:  # noqa: ANN001
    """The refusal (None: accepted) and its traceback places (`file:line`, innermost last)."""
    from accelerate.state import AcceleratorState

    # each verdict as a fresh `llamafactory-cli train` process sees it: no accelerator state left by the last
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        _, data_args, _, _, _ = get_train_args(dict(args))
        if data_args.template is not None and data_args.template not in templates:
            return f"ValueError: Template {data_args.template} does not exist.", []
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the framework's refusal is the answer
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[-1] if text else ''}"[:300], judging.places(e)
    return None, []


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
            error, at = judge(request["args"], get_train_args, TEMPLATES)
            out.write(json.dumps({"id": request["id"], "ok": error is None, "error": error, "at": at}) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
