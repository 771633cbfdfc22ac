"""The training command of a framework's example shell script, as argv: the flags the script hands its entry
program, with its shell variables expanded (golden tests read the frameworks' own files; nothing of them is
copied into this repository).

Handles what MindSpeed-LLM's examples use: `NAME=value`, `NAME="..."` spanning lines, `$NAME` / `${NAME}`,
backslash continuations, `| tee ...` after the command. `$((...))` arithmetic is left unexpanded (only
`WORLD_SIZE` uses it, which no training flag reads).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _variables(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _ASSIGN.match(lines[i].strip())
        i += 1
        if not m:
            continue
        name, value = m.groups()
        if value.startswith('"') and (value.count('"') % 2 == 1):  # a quoted value spanning lines
            parts = [value[1:]]
            while i < len(lines) and '"' not in lines[i]:
                parts.append(lines[i])
                i += 1
            if i < len(lines):
                parts.append(lines[i].split('"', 1)[0])
                i += 1
            value = "\n".join(parts)
        else:
            value = value.strip().strip('"')
        out[name] = value.replace("\\\n", " ").replace("\\", " ")
    return out


def _expand(text: str, env: dict[str, str]) -> str:
    for _ in range(5):  # values may name other variables
        text = _VAR.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)
    return text


def entry_argv(script: str | Path, entry: str, values: dict[str, str] | None = None) -> list[str]:
    """The tokens after `entry` (e.g. `posttrain_gpt.py`) on the script's launch command, variables expanded;
    `values` replaces variables first (the placeholder paths)."""
    text = Path(script).read_text(encoding="utf-8")
    env = {**_variables(text), **(values or {})}
    joined = re.sub(r"\\\s*\n", " ", text)
    line = next(ln for ln in joined.splitlines() if entry in ln.split() and not ln.lstrip().startswith("#"))
    tail = line.split(entry, 1)[1].split("|", 1)[0]
    return shlex.split(_expand(tail, env))
