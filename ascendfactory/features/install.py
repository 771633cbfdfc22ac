"""`install.sh <backend>` / `doctor --install-plan <backend> [--run]`: the backend's installation plan
(`backends.environment.InstallStep` records), shown or run in order."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping

from ascendfactory.backends.environment import InstallStep


def install_steps(backend: str, environ: Mapping[str, str] | None = None) -> list[InstallStep]:
    from ascendfactory.backends.registry import get_backend

    return get_backend(backend, key="--install-plan").install_steps(
        os.environ if environ is None else environ
    )


def run_install(steps: list[InstallStep], say: Callable[[str], None] | None = None) -> int:
    """Run the steps in order (skipping those already done); the first failing step's exit code."""
    say = say or (lambda text: print(text, flush=True))
    for step in steps:
        if step.skip_if_exists and os.path.exists(step.skip_if_exists):
            say(f"[install] {step.what}: already present ({step.skip_if_exists})")
            continue
        say(f"[install] {step.what}: {step.display()}")
        if step.cwd:
            os.makedirs(step.cwd, exist_ok=True)
        if step.skip_if_exists:
            os.makedirs(os.path.dirname(step.skip_if_exists.rstrip("/")), exist_ok=True)
        code = subprocess.run(list(step.argv), cwd=step.cwd, check=False).returncode
        if code:
            print(f"[install] {step.what} failed with exit code {code}", file=sys.stderr, flush=True)
            return code
    return 0
