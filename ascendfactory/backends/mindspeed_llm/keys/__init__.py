"""MindSpeed-LLM's real argument names, as data, per version, and the check of `backend_config` against them.

The `*.txt` files beside this module list the `--names` each MindSpeed-LLM program accepts, one per line,
with the value argparse takes and its default, gathered from the framework's source by
`scripts/gen_mindspeed_args.py --version V` (each file's header names the repositories, refs, commits and
files). Which file checks which `backend_config` section is the
release's `names` (`versions.RELEASES`):

    section              kind          2.1.0                   26.1.0
    training             training      training_2.1.0.txt      training_26.1.0.txt
                                       (Megatron core_r0.8.0)  (Megatron core_v0.12.1, the built parser)
    preprocess_data      preprocess    preprocess_2.1.0.txt    preprocess_26.1.0.txt
    convert_ckpt_* (v1)  convert_v1    convert_v1_2.1.0.txt    convert_v1_26.1.0.txt
    convert_ckpt_* (v2)  convert_v2    convert_v2_26.1.0.txt   convert_v2_26.1.0.txt
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from ascendfactory.backends.common.megatron.flag_specs import (
    KIND_WORDS,
    Spec,
    nearest,
    read_specs,
    value_problem,
)
from ascendfactory.backends.mindspeed_llm.versions import RELEASES
from ascendfactory.errors import Problem

_HERE = Path(__file__).resolve().parent

KINDS = ("training", "preprocess", "convert_v1", "convert_v2")
# Which program a section's keys are passed to, for messages ({v}: the version whose list checks it).
_PROGRAMS: dict[str, str] = {
    "training": "MindSpeed-LLM {v} / Megatron-LM {megatron} training",
    "preprocess": "MindSpeed-LLM {v} preprocess_data.py",
    "convert_v1": "MindSpeed-LLM {v} convert_ckpt.py (v1)",
    "convert_v2": "MindSpeed-LLM {v} convert_ckpt_v2.py (v2)",
}


def names_file(kind: str, version: str) -> str:
    """The keys/ file listing `kind`'s names for MindSpeed-LLM `version`."""
    return RELEASES[version].names[kind]


def program(kind: str, version: str) -> str:
    """How messages name the program `kind`'s keys go to (the version the list was generated from)."""
    listed = names_file(kind, version).removesuffix(".txt").rsplit("_", 1)[1]
    return _PROGRAMS[kind].format(v=listed, megatron=RELEASES[listed].megatron)


@lru_cache(maxsize=None)
def specs(kind: str, version: str) -> dict[str, Spec]:
    """name (no leading dashes) -> Spec, for `kind` (training, preprocess, convert_v1, convert_v2) of
    MindSpeed-LLM `version`."""
    return read_specs(_HERE / names_file(kind, version))


@lru_cache(maxsize=None)
def defaults(kind: str, version: str) -> dict[str, Any]:
    """name -> argparse's default, for `kind` of MindSpeed-LLM `version` (the values a flag not on the
    command line takes)."""
    return {name: spec.default for name, spec in specs(kind, version).items()}


def valid_names(kind: str, version: str) -> frozenset[str]:
    """The argument names (no leading dashes) of `kind` in MindSpeed-LLM `version`."""
    return frozenset(specs(kind, version))


def unknown_keys(
    options: dict[str, Any],
    kind: str,
    *,
    version: str,
    prefix: str,
    source_of: Callable[[str], str],
    extra: tuple[str, ...] = (),
) -> list[Problem]:
    """One Problem per key of `options` that `kind`'s program in `version` does not accept (besides
    `extra`)."""
    names = valid_names(kind, version)
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
                message=f"not an argument of {program(kind, version)}{hint}",
                fix="use the framework's own dash-style name (see ascendfactory/backends/mindspeed_llm/keys/"
                f"{names_file(kind, version)}), or remove the key",
            )
        )
    return problems


def value_problems(
    options: dict[str, Any], kind: str, *, version: str, prefix: str, source_of: Callable[[str], str]
) -> list[Problem]:
    """One Problem per known key whose value the program's argparse refuses (type=, nargs, choices)."""
    table = specs(kind, version)
    out = []
    for key, value in options.items():
        spec = table.get(key)
        why = value_problem(value, spec) if spec else None
        if why and spec:
            fix = (
                "use one of: " + ", ".join(spec.choices)
                if "choices" in why
                else "give " + ("true or false" if spec.kind == "flag" else KIND_WORDS[spec.kind])
            )
            out.append(
                Problem(
                    key=f"{prefix}{key}",
                    source=source_of(f"{prefix}{key}"),
                    message=f"{why} ({program(kind, version)}'s argparse: keys/{names_file(kind, version)})",
                    fix=fix,
                )
            )
    return out
