"""Render a Plan as a runnable shell script (`train --dry-run --format shell`)."""

from __future__ import annotations

import shlex

from ascendfactory.plan import Plan


def plan_to_shell(plan: Plan) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# ascendfactory-cli plan: backend={plan.backend} model={plan.model_name} exp={plan.exp_name}",
        f"# output dir: {plan.output_dir}",
        *(f"# {k}: {v}" for k, v in plan.facts.items() if v is not None),
        *(f"# warning: {w}" for w in plan.warnings),
        "set -euo pipefail",
        f"mkdir -p {shlex.quote(plan.output_dir + '/logs')}",
    ]
    for key, value in plan.env.items():
        lines.append(f"export {key}={shlex.quote(value)}")
    for step in plan.steps:
        lines.append("")
        lines.append(f"# --- step: {step.name} ({step.role.value})")
        for note in step.notes:
            lines.append(f"# {note}")
        if step.skipped:
            lines.append(f"# skipped: {step.skip_reason}")
            continue
        if not step.argv:
            lines.append(f"# runs inside ascendfactory-cli (writes {', '.join(step.outputs)})")
            continue
        for d in step.mkdirs:
            lines.append(f"mkdir -p {shlex.quote(d)}")
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in step.env.items())
        cmd = step.command_line()
        if step.cwd:
            cmd = f"(cd {shlex.quote(step.cwd)} && {prefix + ' ' if prefix else ''}{cmd})"
        elif prefix:
            cmd = f"{prefix} {cmd}"
        lines.append(cmd)
    return "\n".join(lines) + "\n"
