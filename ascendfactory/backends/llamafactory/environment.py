"""Where LLaMA-Factory lives, how `install.sh llamafactory` creates it, and what `doctor` checks.

LLaMA-Factory pins transformers <= 5.6.0 (the embedded backend and verl want other ranges), so it gets
an environment of its own. The environment, in order: `backend_config.env_dir` in the experiment, else
env `AF_LLAMAFACTORY_ENV`, else where `sh install.sh llamafactory` creates it
(`<AF_ENVS_DIR or ~/.ascendfactory/envs>/llamafactory`). Any virtualenv or conda env with
`bin/llamafactory-cli` and `bin/python` works (a cluster image that already has LLaMA-Factory: point
`AF_LLAMAFACTORY_ENV` at its prefix, e.g. /usr or /opt/conda).

Nothing here imports LLaMA-Factory: versions are read from the environment's package metadata.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ascendfactory.backends.environment import Check, FrameworkEnv, InstallStep, python_of, site_packages
from ascendfactory.backends.llamafactory.programs import PROGRAMS_DIR

VERSION = "0.9.5"  # the newest on the registry; the key lists in keys/ are generated from it
# torch is installed first (AF_TORCH_SPEC; the CPU wheel on machines without an accelerator) and kept;
# programs/lf_install.py then installs LLaMA-Factory and its dependencies around it.
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchaudio_shim")


ENV = FrameworkEnv(
    name="llamafactory", label="LLaMA-Factory", variable="AF_LLAMAFACTORY_ENV", version=VERSION
)
INSTALL_FIX, MARKER = ENV.install_fix, ENV.marker
default_env, find_env = ENV.default, ENV.find


def cli_of(env: str) -> str:
    return os.path.join(env, "bin", "llamafactory-cli")


def launcher_script(env: str) -> str | None:
    """LLaMA-Factory's `launcher.py`: what its own torchrun launch runs on every rank."""
    site = site_packages(env)
    path = os.path.join(site, "llamafactory", "launcher.py") if site else None
    return path if path and os.path.isfile(path) else None


def missing(env: str) -> list[str]:
    """What the environment lacks for a run (empty: usable)."""
    out = [p for p in (python_of(env), cli_of(env)) if not os.path.exists(p)]
    if not out and launcher_script(env) is None:
        out.append("site-packages/llamafactory/launcher.py")
    return out


def install_steps(environ: Mapping[str, str]) -> list[InstallStep]:
    """A venv of its own with the pinned LLaMA-Factory (skipped entirely once the marker is written), then
    the tracker clients AF_TRACKERS names (`install.sh --dev` asks for mlflow: the integration test)."""
    torch_spec = environ.get("AF_TORCH_SPEC", "torch==2.13.0")
    py, marker = python_of(ENV.default(environ)), os.path.join(ENV.default(environ), MARKER)
    record = (
        "import llamafactory, pathlib, sys; "
        f"pathlib.Path({marker!r}).write_text(llamafactory.__version__ + '\\n'); "
        "print('LLaMA-Factory', llamafactory.__version__, 'in', sys.prefix)"
    )
    what = f"install llamafactory=={VERSION} and its dependencies, keeping {torch_spec}"
    argv = (py, os.path.join(PROGRAMS_DIR, "lf_install.py"), VERSION, torch_spec, SHIM_DIR)
    return [*ENV.install_steps(environ, (what, argv), record), *ENV.tracker_steps(environ)]


def checks(environ: Mapping[str, str]) -> list[Check]:
    env, source = find_env(None, environ)
    return ENV.package_checks(env, source, missing(env), ("llamafactory", "transformers", "torch"))
