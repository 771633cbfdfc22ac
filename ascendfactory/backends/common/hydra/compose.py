"""Hydra's own composition in a framework's environment, one program per python: a request in, an answer out.

    ask(python, Request(package, config_dir, config_name, overrides, environ)) -> answer dict | None
    warm(python, package, config_dir, config_name, environ)
    problem(schema, found) -> Problem

`programs/hydra_compose.py --serve` runs in the framework's python (the framework not imported: the config
directory is found by the package's location) and composes each request's overrides against
`<package>/<config_dir>/<config_name>.yaml` as the framework's Hydra entry point would. One such program
answers every request of this process for one (python, package, config directory, start environment): it
starts once (Hydra's import and the first composition of the config tree, about 1 s for verl's
`ppo_trainer`) and composes each further request in about 0.1 s (what it keeps between requests: the
program's docstring). `ask` answers None when the program is missing, gone or silent for TIMEOUT_S; the
backend then falls back to its key lists (`schema.compose`).

`problem` turns the program's findings into our words, keyed by the dotted key of the framework's config.
The framework's facts (which package, config directory and config name; what a fallback says) are its
backend's: verl's are in `backends/verl/composer.py`.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.common.hydra import schema as sc
from ascendfactory.backends.common.hydra.programs import PROGRAMS_DIR
from ascendfactory.errors import Problem

COMPOSE_PROGRAM = os.path.join(PROGRAMS_DIR, "hydra_compose.py")
TIMEOUT_S = 120.0
# what the interpreter reads at its start (a program started with other values answers no other request)
_START_VARIABLES = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "VIRTUAL_ENV")


@dataclass(frozen=True)
class Request:
    package: str  # the framework's package ("verl"), found in its environment without importing it
    config_dir: str  # its config directory, relative to the package, '/'-separated ("trainer/config")
    config_name: str  # the primary config ("ppo_trainer")
    overrides: list[str]  # exactly as the train step passes them to the framework's entry point
    environ: dict[str, str]  # what `${oc.env:...}` reads, as the train step would see it


def ask(python: str, request: Request) -> dict[str, Any] | None:
    """The program's answer (`{"ok", "problems", "config", "compose_s", ...}`), or None when it is gone."""
    environ = {**request.environ, "HYDRA_FULL_ERROR": "0"}
    line = {"overrides": request.overrides, "config_name": request.config_name, "environ": environ}
    return _server(python, request.package, request.config_dir, request.environ).ask(line)


def warm(python: str, package: str, config_dir: str, config_name: str, environ: dict[str, str]) -> None:
    """Start the program for `python` now, composing `config_name` (no override) before any request
    (Hydra's import and that composition run beside whatever this process does next): a bulk dry run
    calls it before planning its files. A single run starts it at its request, unwarmed."""
    _server(python, package, config_dir, environ, warm=config_name)


class _Server:
    """One `hydra_compose.py --serve` process: a request line in, an answer line out."""

    def __init__(self, argv: list[str], environ: dict[str, str]) -> None:
        self.proc: subprocess.Popen[bytes] | None
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={**environ, "HYDRA_FULL_ERROR": "0"},
            )
        except OSError:
            self.proc = None
        self.pending = b""

    def ask(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The answer, or None when the program is gone or silent for TIMEOUT_S (it is then stopped)."""
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdout is None or proc.poll() is not None:
            return None
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            self.close()
            return None
        deadline = time.monotonic() + TIMEOUT_S
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                line, newline, rest = self.pending.partition(b"\n")
                if newline:
                    self.pending = rest
                    if line.startswith(b"{"):
                        return json.loads(line)
                    continue  # anything else the program's libraries print
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.close(kill=True)
                    return None
                chunk = os.read(proc.stdout.fileno(), 1 << 20)
                if not chunk:  # it ended
                    self.close()
                    return None
                self.pending += chunk

    def close(self, *, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


_SERVERS: dict[tuple[str, ...], _Server] = {}


def _server(
    python: str, package: str, config_dir: str, environ: dict[str, str], *, warm: str | None = None
) -> _Server:
    key = (python, package, config_dir, *(environ.get(v, "") for v in _START_VARIABLES))
    server = _SERVERS.get(key)
    # a program that ended since its last answer (stopped with a process tree the runner ended, say) is
    # replaced: keeping it would answer every later request of this process from the key lists
    if server is None or server.proc is None or server.proc.poll() is not None:
        argv = [python, COMPOSE_PROGRAM, "--serve", f"--package={package}", f"--config-dir={config_dir}"]
        server = _SERVERS[key] = _Server([*argv, *([f"--warm={warm}"] if warm else [])], environ)
    return server


@atexit.register
def close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


def problem(schema: sc.Schema, found: dict[str, Any]) -> Problem:
    """One of the program's findings in our words (`schema`: the framework's key list, for suggestions)."""
    key = found.get("key") or "?"
    hydra = (found.get("message") or "").splitlines()[0] if found.get("message") else ""
    kind = found.get("kind")
    if kind == "unknown_key":
        if schema.kind(key) is None:
            unknown = sc.unknown_key_problem(schema, key)
            message = unknown.message.split("; Hydra would stop")[0] + f" (Hydra: {hydra})"
            return dataclasses.replace(unknown, message=message)
        fix = f"check the key against the installed {schema.framework} version"
        return Problem(key, f"refused by Hydra: {hydra}", fix)
    if kind == "append_exists":
        return Problem(
            key,
            f"has a value in {schema.framework}'s config, so '+' is refused (Hydra: {hydra})",
            f"write it as {key} (no '+')",
        )
    if kind == "syntax":
        return Problem(
            key, f"the value is not valid Hydra override syntax: {hydra}", "quote or simplify the value"
        )
    if kind == "interpolation":
        return Problem(
            key,
            f"does not resolve: {hydra}",
            f"fix the ${{...}} reference (a key of {schema.framework}'s config, or oc.env:VAR)",
        )
    return Problem(key, f"Hydra could not compose the config: {hydra}", "fix the value named")
