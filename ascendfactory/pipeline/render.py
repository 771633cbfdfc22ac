"""Render a Plan as a runnable shell script (`train --dry-run --format shell`).

Nothing from the configuration reaches the shell unquoted: commands and paths go through `shlex.quote`,
comment lines have every non-printable character (a newline would end the comment) escaped, and the
plan's files are written by `printf '%s'` with their text as one quoted argument. Secrets never appear:
environment values with secret names are read from the environment the script runs in, and secret values
inside the plan's files are masked.
"""

from __future__ import annotations

import shlex

from ascendfactory.plan import Plan
from ascendfactory.secrets import is_secret_key, mask_text


def comment(text: object) -> str:
    """A `#` line that stays one comment line, whatever `text` holds."""
    return "# " + "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in str(text))


def assign(key: str, value: str) -> str:
    """`KEY=value`; a secret is taken from the environment the script runs in, never written into it."""
    if is_secret_key(key):
        return f'{key}="${{{key}:?set {key} in the environment first}}"'
    return f"{key}={shlex.quote(value)}"


def write_file(path: str, text: str) -> list[str]:
    """Lines that write `text` to `path` byte for byte (one single-quoted printf argument)."""
    return [
        f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0] or '/')}",
        f"printf '%s' {shlex.quote(text)} > {shlex.quote(path)}",
    ]


def plan_to_shell(plan: Plan) -> str:
    lines = [
        "#!/usr/bin/env bash",
        comment(
            f"ascendfactory-cli plan: backend={plan.backend} model={plan.model_name} exp={plan.exp_name}"
        ),
        comment(f"output dir: {plan.output_dir}"),
        *(comment(f"{k}: {v}") for k, v in plan.facts.items() if v is not None),
        *(comment(f"warning: {w}") for w in plan.warnings),
        "set -euo pipefail",
        f"mkdir -p {shlex.quote(plan.output_dir + '/logs')}",
    ]
    for path, text in plan.files.items():
        if plan.source and path == plan.source:
            continue
        shown, masked = mask_text(text)
        if masked:
            lines.append(comment(f"{path}: secret values are masked (***); put them in before running"))
        lines += write_file(path, shown)
    for key, value in plan.env.items():
        lines.append(f"export {assign(key, value)}")
    for step in plan.steps:
        lines.append("")
        lines.append(comment(f"--- step: {step.name} ({step.role.value})"))
        for note in step.notes:
            lines.append(comment(note))
        if step.skipped:
            lines.append(comment(f"skipped: {step.skip_reason}"))
            continue
        if not step.argv:
            lines.append(comment(f"runs inside ascendfactory-cli (writes {', '.join(step.outputs)})"))
            continue
        for d in step.mkdirs:
            lines.append(f"mkdir -p {shlex.quote(d)}")
        prefix = " ".join(
            f'{k}="${{{k}:?set {k} in the environment first}}"'
            if is_secret_key(k)
            else f"{k}={shlex.quote(v)}"
            for k, v in step.env.items()
        )
        cmd = step.command_line()
        if step.cwd:
            cmd = f"(cd {shlex.quote(step.cwd)} && {prefix + ' ' if prefix else ''}{cmd})"
        elif prefix:
            cmd = f"{prefix} {cmd}"
        lines.append(cmd)
    return "\n".join(lines) + "\n"
