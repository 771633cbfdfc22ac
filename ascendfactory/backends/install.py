"""Installation plans as data (`install.sh <backend>`, `doctor --install-plan <backend> [--run]`)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class InstallStep:
    what: str
    argv: tuple[str, ...]
    cwd: str | None = None
    skip_if_exists: str | None = None  # makes re-running safe

    def display(self) -> str:
        cmd = shlex.join(self.argv)
        return f"(cd {shlex.quote(self.cwd)} && {cmd})" if self.cwd else cmd


def third_party_dir(environ: Mapping[str, str] | None = None) -> str:
    """Where install.sh clones frameworks: env AF_THIRD_PARTY_DIR, else ~/.ascendfactory/third-party."""
    environ = os.environ if environ is None else environ
    return environ.get("AF_THIRD_PARTY_DIR") or os.path.join(
        os.path.expanduser("~"), ".ascendfactory", "third-party"
    )


def envs_dir(environ: Mapping[str, str] | None = None) -> str:
    """Where install.sh creates frameworks' own environments: env AF_ENVS_DIR, else ~/.ascendfactory/envs."""
    environ = os.environ if environ is None else environ
    return environ.get("AF_ENVS_DIR") or os.path.join(os.path.expanduser("~"), ".ascendfactory", "envs")


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
