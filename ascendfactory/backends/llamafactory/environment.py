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

import glob
import os
from collections.abc import Mapping

from ascendfactory.backends.doctor import Check
from ascendfactory.backends.install import InstallStep, envs_dir
from ascendfactory.plan import PROGRAMS_DIR

VERSION = "0.9.5"  # the newest on the registry; the key lists in args/ are generated from it
# torch is installed first (AF_TORCH_SPEC; the CPU wheel on machines without an accelerator) and kept;
# programs/lf_install.py then installs LLaMA-Factory and its dependencies around it.
INSTALL_FIX = "run `sh install.sh llamafactory`, or set AF_LLAMAFACTORY_ENV (or backend_config.env_dir)"
MARKER = ".af-llamafactory-installed"
SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchaudio_shim")


def default_env(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(envs_dir(environ), "llamafactory")


def find_env(configured: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """(absolute environment prefix, where it came from), by the precedence in the module docstring."""
    if configured:
        return os.path.abspath(os.path.expanduser(configured)), "backend_config.env_dir"
    if environ.get("AF_LLAMAFACTORY_ENV"):
        return os.path.abspath(os.path.expanduser(environ["AF_LLAMAFACTORY_ENV"])), "env AF_LLAMAFACTORY_ENV"
    return default_env(environ), "install.sh location"


def python_of(env: str) -> str:
    return os.path.join(env, "bin", "python")


def cli_of(env: str) -> str:
    return os.path.join(env, "bin", "llamafactory-cli")


def site_packages(env: str) -> str | None:
    found = sorted(glob.glob(os.path.join(env, "lib", "python3*", "site-packages")))
    return found[-1] if found else None


def package_version(env: str, name: str) -> str | None:
    """The installed version of distribution `name` in `env`, from its .dist-info (no import)."""
    site = site_packages(env)
    if site is None:
        return None
    pattern = name.replace("-", "_")
    for info in glob.glob(os.path.join(site, "*.dist-info")):
        base = os.path.basename(info)[: -len(".dist-info")]
        dist, _, version = base.rpartition("-")
        if dist.lower().replace("-", "_") == pattern.lower():
            return version
    return None


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
    """A venv of its own with the pinned LLaMA-Factory; skipped entirely once the marker is written."""
    import sys

    env = default_env(environ)
    py, marker = python_of(env), os.path.join(env, MARKER)
    torch_spec = environ.get("AF_TORCH_SPEC", "torch==2.13.0")
    pip = (py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    record = (
        "import llamafactory, pathlib, sys; "
        f"pathlib.Path({marker!r}).write_text(llamafactory.__version__ + '\\n'); "
        "print('LLaMA-Factory', llamafactory.__version__, 'in', sys.prefix)"
    )
    return [
        InstallStep(
            "create the LLaMA-Factory environment", (sys.executable, "-m", "venv", env), skip_if_exists=marker
        ),
        InstallStep(f"install {torch_spec} into it", (*pip, torch_spec), skip_if_exists=marker),
        InstallStep(
            f"install llamafactory=={VERSION} and its dependencies, keeping {torch_spec}",
            (py, os.path.join(PROGRAMS_DIR, "lf_install.py"), VERSION, torch_spec, SHIM_DIR),
            skip_if_exists=marker,
        ),
        InstallStep("check it imports", (py, "-c", record), skip_if_exists=marker),
    ]


def checks(environ: Mapping[str, str]) -> list[Check]:
    env, source = find_env(None, environ)
    lacking = missing(env)
    if lacking:
        return [
            Check(
                "LLaMA-Factory environment",
                "missing",
                f"{env} ({source}): {', '.join(lacking)}: {INSTALL_FIX}",
            )
        ]
    out = [Check("LLaMA-Factory environment", "ok", f"{env} ({source})")]
    for name, want in (("llamafactory", VERSION), ("transformers", None), ("torch", None)):
        version = package_version(env, name)
        if version is None:
            out.append(Check(name, "missing", f"not installed in {env}: {INSTALL_FIX}"))
        elif want and version != want:
            out.append(Check(name, "warn", f"{version} installed; the key lists are LLaMA-Factory {want}'s"))
        else:
            out.append(Check(name, "ok", version))
    return out
