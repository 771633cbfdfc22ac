"""Installation plans as data: the `InstallStep` record a backend's `install_steps` returns, and where
frameworks are installed. `ascendfactory.features.install` runs a plan (`install.sh`, `doctor
--install-plan`)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
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
