"""Where a framework lives and what a backend's `environment.py` returns about it: the shared records of the
backends' environment role (each backend's own `environment.py` uses them).

- Install plans as data: the `InstallStep` record a backend's `install_steps` returns, and where frameworks
  are installed (`third_party_dir`, `envs_dir`). `ascendfactory.features.install` runs a plan
  (`install.sh`, `doctor --install-plan`).
- Doctor checks: the `Check` record a backend's `doctor_checks` returns and the checks several backends
  share (a module imports, the Ascend toolkit). `ascendfactory.features.doctor` runs them with the generic
  checks around.
- A framework in a virtual environment of its own (LLaMA-Factory, verl: their pins conflict): one record
  per framework (`FrameworkEnv`) says where its environment is and how it is recorded as installed; the
  functions read an environment without running it (paths and package metadata: importing a framework
  takes seconds). Where the environment is, in order: `backend_config.env_dir` in the experiment, else the
  framework's variable (`AF_VERL_ENV`, ...), else where `sh install.sh <backend>` creates it,
  `<AF_ENVS_DIR or ~/.ascendfactory/envs>/<name>`. Any virtualenv or conda prefix with `bin/python` works
  (a cluster image that already has the framework: point the variable at its prefix).
- A framework run from a git checkout instead (MindSpeed-LLM, -MM, -RL) has a `FrameworkCheckout` record:
  the experiment's `scripts_dir`, else the framework's variable, else where `sh install.sh <backend>`
  clones it, `<AF_THIRD_PARTY_DIR or ~/.ascendfactory/third-party>/<directory>`.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
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


ASCEND_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"


@dataclass
class Check:
    name: str
    status: str  # ok | missing | warn | info
    detail: str
    required: bool = True

    def row(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status, "detail": self.detail}


# import name -> PyPI name, where they differ
PIP_NAMES = {"hydra": "hydra-core", "torch_npu": "torch-npu", "yaml": "pyyaml"}


def module_check(name: str, required: bool = True, *, fix: str | None = None) -> Check:
    """Whether `name` imports here; `fix`: how to get it (default `pip install <its PyPI name>`; a
    framework that only `install.sh` installs right says `sh install.sh <backend>`)."""
    found = importlib.util.find_spec(name) is not None
    return Check(
        f"python: {name}",
        "ok" if found else ("missing" if required else "warn"),
        "importable" if found else (fix or f"pip install {PIP_NAMES.get(name, name)}"),
        required,
    )


def ascend_toolkit_status(
    environ: Mapping[str, str] | None = None, set_env: str | None = None
) -> tuple[bool, str]:
    """(sourced?, detail). Sourced means ASCEND_TOOLKIT_HOME is set (set_env.sh exports it)."""
    environ = os.environ if environ is None else environ
    set_env = set_env or ASCEND_SET_ENV
    home = environ.get("ASCEND_TOOLKIT_HOME")
    if home:
        return True, f"ASCEND_TOOLKIT_HOME={home}"
    if os.path.exists(set_env):
        return False, f"installed but not sourced: run `source {set_env}`"
    return False, f"{set_env} not found: install the CANN toolkit, then source its set_env.sh"


def ascend_checks(environ: Mapping[str, str], *, torch_npu_required: bool) -> list[Check]:
    """The CANN toolkit environment and torch_npu (the Ascend backends, and any backend on an NPU)."""
    ok, detail = ascend_toolkit_status(environ)
    return [
        Check("Ascend toolkit", "ok" if ok else "missing", detail),
        module_check("torch_npu", required=torch_npu_required),
    ]


@dataclass(frozen=True)
class FrameworkCheckout:
    """Where a framework's git checkout is (module docstring) and the files that make a directory one."""

    directory: str  # the directory name install.sh clones into, under AF_THIRD_PARTY_DIR
    variable: str  # the environment variable that points at an existing checkout
    entry_files: tuple[str, ...]  # files the plan runs (relative to the checkout)

    def install_dir(self, environ: Mapping[str, str] | None = None) -> str:
        return os.path.join(third_party_dir(environ), self.directory)

    def find(self, scripts_dir: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
        """(absolute directory, where it came from): scripts_dir, the variable, install.sh's location."""
        if scripts_dir:
            return os.path.abspath(os.path.expanduser(scripts_dir)), "scripts_dir"
        if environ.get(self.variable):
            return os.path.abspath(os.path.expanduser(environ[self.variable])), f"env {self.variable}"
        return self.install_dir(environ), "install.sh location"

    def missing(self, directory: str) -> list[str]:
        """The entry files `directory` lacks (all of them: it is no checkout)."""
        return [f for f in self.entry_files if not os.path.isfile(os.path.join(directory, f))]


@dataclass(frozen=True)
class FrameworkEnv:
    name: str  # directory under AF_ENVS_DIR and the backend's name in `sh install.sh <name>`
    label: str  # how messages name the framework
    variable: str  # the environment variable that points at an existing environment
    version: str  # the version the backend's key lists are generated from, and install.sh installs

    @property
    def marker(self) -> str:
        """The file install.sh writes into a complete environment (its steps are skipped once it exists)."""
        return f".af-{self.name}-installed"

    @property
    def install_fix(self) -> str:
        return f"run `sh install.sh {self.name}`, or set {self.variable} (or backend_config.env_dir)"

    def default(self, environ: Mapping[str, str] | None = None) -> str:
        return os.path.join(envs_dir(environ), self.name)

    def find(self, configured: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
        """(absolute environment prefix, where it came from), by the precedence in the module docstring."""
        if configured:
            return os.path.abspath(os.path.expanduser(configured)), "backend_config.env_dir"
        if environ.get(self.variable):
            return os.path.abspath(os.path.expanduser(environ[self.variable])), f"env {self.variable}"
        return self.default(environ), "install.sh location"

    def install_steps(
        self, environ: Mapping[str, str], install: tuple[str, Sequence[str]], record: str
    ) -> list[InstallStep]:
        """A venv, the torch of AF_TORCH_SPEC (default the CPU torch==2.13.0) first, then `install` (what,
        argv), then `record` (python code that checks the install and writes the marker); each step is
        skipped once the marker exists."""
        env = self.default(environ)
        py, marker = python_of(env), os.path.join(env, self.marker)
        torch_spec = environ.get("AF_TORCH_SPEC", "torch==2.13.0")
        pip = (py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
        what, argv = install
        return [
            InstallStep(
                f"create the {self.label} environment",
                (sys.executable, "-m", "venv", env),
                skip_if_exists=marker,
            ),
            InstallStep(f"install {torch_spec} into it", (*pip, torch_spec), skip_if_exists=marker),
            InstallStep(what, tuple(argv), skip_if_exists=marker),
            InstallStep("check it is complete", (py, "-c", record), skip_if_exists=marker),
        ]

    def tracker_steps(self, environ: Mapping[str, str]) -> list[InstallStep]:
        """The tracker clients named in AF_TRACKERS (comma-separated: mlflow, wandb, swanlab) into the
        environment, for the framework's own integrations (`report_to`); never installed unasked. Re-run
        safe (pip keeps what is there), so not skipped by the marker."""
        from ascendfactory.errors import ConfigError, Problem
        from ascendfactory.trackers import find_tracker, tracker_names

        names = [n.strip() for n in environ.get("AF_TRACKERS", "").split(",") if n.strip()]
        trackers = {n: find_tracker(n) for n in names}
        with_client = [n for n in tracker_names() if (t := find_tracker(n)) and t.packages]
        unknown = [n for n, t in trackers.items() if t is None or not t.packages]
        if unknown:
            raise ConfigError(
                [
                    Problem(
                        key="AF_TRACKERS",
                        message=f"unknown tracker(s) {', '.join(unknown)} (or one with no client to install)",
                        fix=f"use a comma-separated list of: {', '.join(with_client)}",
                        source="environment",
                    )
                ]
            )
        py = python_of(self.default(environ))
        pip = (py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
        return [
            InstallStep(
                f"install the {n} client into the {self.label} environment (AF_TRACKERS)",
                (*pip, *t.packages),
            )
            for n, t in trackers.items()
            if t is not None
        ]

    def package_checks(
        self, env: str, source: str, lacking: list[str], packages: Sequence[str]
    ) -> list[Check]:
        """Doctor rows: the environment (missing with what it lacks), then each package's version; the
        framework itself (its distribution is `packages[0]`) warns when it is not `version`."""
        title = f"{self.label} environment"
        if lacking:
            return [Check(title, "missing", f"{env} ({source}): {', '.join(lacking)}: {self.install_fix}")]
        out = [Check(title, "ok", f"{env} ({source})")]
        for i, name in enumerate(packages):
            found = package_version(env, name)
            if found is None:
                out.append(Check(name, "missing", f"not installed in {env}: {self.install_fix}"))
            elif i == 0 and found != self.version:
                out.append(
                    Check(name, "warn", f"{found} installed; the key lists are {self.label} {self.version}'s")
                )
            else:
                out.append(Check(name, "ok", found))
        return out


def python_of(env: str) -> str:
    return os.path.join(env, "bin", "python")


def site_packages(env: str) -> str | None:
    found = sorted(glob.glob(os.path.join(env, "lib", "python3*", "site-packages")))
    return found[-1] if found else None


def package_version(env: str, name: str) -> str | None:
    """The installed version of distribution `name` in `env`, from its .dist-info (no import)."""
    site = site_packages(env)
    if site is None:
        return None
    return _distributions(site).get(_normalized(name))


def _normalized(name: str) -> str:
    return name.replace("-", "_").replace(".", "_").lower()


_LISTED: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {}  # site-packages -> (its stat, its versions)


def _distributions(site: str) -> dict[str, str]:
    """Each distribution's version by normalised name, from the `*.dist-info` entries of `site` (the first
    one listed wins, as a scan in listing order finds it); listed again when the folder changes (an install
    adds or removes entries, which changes its mtime and link count), once otherwise (a bulk dry run asks
    ~150 times)."""
    try:
        st = os.stat(site)
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_nlink, st.st_ino)
    listed = _LISTED.get(site)
    if listed is None or listed[0] != stamp:
        found: dict[str, str] = {}
        for entry in glob.glob(os.path.join(site, "*.dist-info")):
            dist, _, version = os.path.basename(entry)[: -len(".dist-info")].rpartition("-")
            found.setdefault(_normalized(dist), version)
        listed = _LISTED[site] = (stamp, found)
    return listed[1]
