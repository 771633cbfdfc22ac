"""MindSpeed-LLM's real argument names, as data, and the check of `backend_config` against them.

The `*.txt` files beside this module list the `--names` each MindSpeed-LLM program accepts, one per line,
gathered from the framework's source by `scripts/gen_mindspeed_args.py` (each file's header names the
repositories, refs, commits and files). Which file checks which `backend_config` section:

    training             training_2.1.0.txt     (Megatron-LM core_r0.8.0 + MindSpeed-LLM 2.1.0)
    preprocess_data      preprocess_2.1.0.txt   (preprocess_data.py)
    convert_ckpt_*       convert_v1_2.1.0.txt   (convert_ckpt.py + its hf/mg loaders and saver)
                         convert_v2_26.1.0.txt  (convert_ckpt_v2.py)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from ascendfactory.errors import Problem

_HERE = Path(__file__).resolve().parent

NAMES_FILES: dict[str, str] = {
    "training": "training_2.1.0.txt",
    "preprocess": "preprocess_2.1.0.txt",
    "convert_v1": "convert_v1_2.1.0.txt",
    "convert_v2": "convert_v2_26.1.0.txt",
}
# Which program a section's keys are passed to, for messages.
PROGRAMS: dict[str, str] = {
    "training": "MindSpeed-LLM 2.1.0 / Megatron-LM core_r0.8.0 training",
    "preprocess": "MindSpeed-LLM 2.1.0 preprocess_data.py",
    "convert_v1": "MindSpeed-LLM 2.1.0 convert_ckpt.py (v1)",
    "convert_v2": "MindSpeed-LLM 26.1.0 convert_ckpt_v2.py (v2)",
}


@lru_cache(maxsize=None)
def valid_names(kind: str) -> frozenset[str]:
    """The argument names (no leading dashes) of `kind`: training, preprocess, convert_v1, convert_v2."""
    lines = (_HERE / NAMES_FILES[kind]).read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def nearest(word: str, names: frozenset[str], n: int = 3) -> list[str]:
    """The closest valid names: the same name with dashes for underscores first, then difflib matches."""
    dashed = word.replace("_", "-").lower().lstrip("-")
    if dashed in names and dashed != word:
        return [dashed]
    return difflib.get_close_matches(dashed, sorted(names), n=n, cutoff=0.6)


def unknown_keys(
    options: dict[str, Any],
    kind: str,
    *,
    prefix: str,
    source_of: Callable[[str], str],
    extra: tuple[str, ...] = (),
) -> list[Problem]:
    """One Problem per key of `options` that `kind`'s program does not accept (besides `extra`)."""
    names = valid_names(kind)
    problems = []
    for key in options:
        if key in names or key in extra:
            continue
        close = nearest(str(key), names)
        hint = f" (did you mean: {', '.join(close)}?)" if close else ""
        problems.append(
            Problem(
                key=f"{prefix}{key}",
                source=source_of(f"{prefix}{key}"),
                message=f"not an argument of {PROGRAMS[kind]}{hint}",
                fix="use the framework's own dash-style name (see ascendfactory/backends/mindspeed_llm/args/"
                f"{NAMES_FILES[kind]}), or remove the key",
            )
        )
    return problems
