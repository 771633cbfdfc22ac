"""A Megatron-style program's flags as argparse takes them: one `Spec` a flag (from its `add_argument` call),
read from a generated list, and the check of a `backend_config` value against it as our argv writes it
(`read.to_flags`: true -> `--flag`, false/null -> omitted, a list -> its values).

Shared by every backend whose programs parse Megatron-LM's arguments: MindSpeed-LLM's lists
(`backends/mindspeed_llm/keys/`), MindSpeed-MM's (`backends/mindspeed_mm/keys/`).
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Spec:
    """The value argparse takes for one flag (from its add_argument call): `kind` flag (no value), int,
    float, str or other (a converter function); `nargs` ('' one value, '+', '*', '?', a number, append);
    `choices`; `default`, what argparse sets when the flag is not given (`COMPUTED` where the source
    computes it)."""

    kind: str
    nargs: str = ""
    choices: tuple[str, ...] = ()
    default: Any = None


COMPUTED = "<computed in the source>"


_CONSTANTS = {"None": None, "True": True, "False": False}
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")


def _literal(text: str) -> Any:
    """The default's value: `ast.literal_eval` of its text, which the ~1,300 lines of a version's lists would
    parse one by one (~40M instructions a plan); their None / True / False / integers are read directly, to
    the same values."""
    if not text.strip():
        return COMPUTED
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    if _INT.match(text):
        return int(text)
    return ast.literal_eval(text)


def read_specs(path: Path) -> dict[str, Spec]:
    """name (no leading dashes) -> Spec, from a generated list: one `name<TAB>kind<TAB>nargs<TAB>choices
    (|-separated)<TAB>default (a Python literal; empty where the source computes it)` a line, `#` comments."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, flag_kind, nargs, choices, default = (line.split("\t") + ["", "", "", "None"])[:5]
        out[name.strip()] = Spec(
            flag_kind or "str", nargs, tuple(c for c in choices.split("|") if c), _literal(default)
        )
    return out


def nearest(word: str, names: frozenset[str], n: int = 3) -> list[str]:
    """The closest valid names: the same name with dashes for underscores first, then difflib matches."""
    dashed = word.replace("_", "-").lower().lstrip("-")
    if dashed in names and dashed != word:
        return [dashed]
    return difflib.get_close_matches(dashed, sorted(names), n=n, cutoff=0.6)


KIND_WORDS = {"int": "an integer", "float": "a number", "str": "one text or number", "other": "one value"}


def _scalar_ok(value: Any, spec: Spec) -> bool:
    if isinstance(value, (dict, list, tuple)) or value is None:
        return False
    if spec.kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if spec.kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return not isinstance(value, bool) and str(value) != ""  # argparse gets the text


def value_problem(value: Any, spec: Spec) -> str | None:
    """Why argparse (with the flag's own type, nargs and choices) refuses `value` as our argv writes it
    (`read.to_flags`: true -> `--flag`, false/null -> omitted, a list -> its values), or None."""
    if value is None or value is False:
        return None  # omitted
    if spec.kind == "flag":
        return None if value is True else f"is {value!r}, but --flag takes no value: true or false"
    if value is True:
        return None if spec.nargs in ("?", "*") else f"is true, but the flag needs {KIND_WORDS[spec.kind]}"
    many = spec.nargs in ("+", "*", "append") or spec.nargs.isdigit()
    items = list(value) if isinstance(value, (list, tuple)) and many else [value]
    if isinstance(value, (list, tuple)) and not many:
        return f"is a list, but the flag takes {KIND_WORDS[spec.kind]}"
    if isinstance(value, dict):
        return "is a mapping, but the flag takes " + ("values" if many else KIND_WORDS[spec.kind])
    if spec.nargs == "+" and not items:
        return "is an empty list, but the flag needs at least one value"
    if spec.nargs.isdigit() and len(items) != int(spec.nargs):
        return f"has {len(items)} values, but the flag takes {spec.nargs}"
    bad = [v for v in items if not _scalar_ok(v, spec)]
    if bad:
        return f"{bad[0]!r} is not {KIND_WORDS[spec.kind]}"
    if spec.choices:
        off = [v for v in items if str(v) not in spec.choices]
        if off:
            return f"{off[0]!r} is not one of its choices"
    return None
