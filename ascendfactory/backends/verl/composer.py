"""The composed verl config of a run: Hydra in verl's environment when there is one, else the key lists.

    compose(env_python, run) -> Composition(config, problems, by)

With verl installed, `programs/verl_compose.py` composes the run's exact override texts against verl's own
config directory with Hydra (verl not imported) and names every override Hydra refuses and every
interpolation that does not resolve. One such program (`--serve`) answers every run of this process: it
starts once per verl python (Hydra's import and the first composition of verl's config tree, about 1 s)
and composes each further run in about 0.1 s (what it keeps between runs: the program's docstring).
Without verl, `schema.compose` applies the same overrides to the shipped key lists of verl 0.9.1 and
resolves the interpolations verl's defaults use. Both give the problems in our words, keyed by the dotted
verl key.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import selectors
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.hydra import schema as sc
from ascendfactory.backends.verl.programs import PROGRAMS_DIR
from ascendfactory.backends.verl.run import OWNED, VerlRun
from ascendfactory.errors import Problem

COMPOSE_PROGRAM = os.path.join(PROGRAMS_DIR, "verl_compose.py")
TIMEOUT_S = 120.0


@dataclass
class Composition:
    config: dict[str, Any]
    problems: list[Problem] = field(default_factory=list)  # keys in verl's config
    by: str = ""  # what composed it, for --dry-run
    seconds: float | None = None  # how long Hydra took (program start included)
    warnings: list[str] = field(default_factory=list)


def compose(python: str | None, run: VerlRun, environ: dict[str, str]) -> Composition:
    result = _compose(python, run, environ)
    result.problems = [_owned_hint(p) for p in result.problems]
    return result


def _owned_hint(problem: Problem) -> Problem:
    """A suggestion that is a key the plan sets says where its value comes from instead."""
    for owned, (decided_by, how) in OWNED.items():
        if problem.fix.startswith(f"did you mean {owned}?"):
            fix = f"did you mean {owned}? The plan sets that one from {decided_by}: {how}"
            return dataclasses.replace(problem, fix=fix)
    return problem


def _compose(python: str | None, run: VerlRun, environ: dict[str, str]) -> Composition:
    if python is not None:
        done = _with_hydra(python, run, environ)
        if done is not None:
            return done
        fallback = f"verl's environment ({python}) did not answer; checked against the shipped key lists"
    else:
        fallback = ""
    offline = sc.compose(run.schema, run.overrides, environ)
    result = Composition(
        offline.config,
        list(offline.problems),
        by=(
            f"the shipped key lists of verl {run.schema.version} (model_engine={run.engine}; verl "
            "not installed)"
        ),
    )
    if fallback:
        result.warnings.append(fallback)
    return result


def _with_hydra(python: str, run: VerlRun, environ: dict[str, str]) -> Composition | None:
    request = {
        "overrides": run.texts(hydra=False),
        "config_name": CONFIG_NAME,
        "environ": {**environ, "HYDRA_FULL_ERROR": "0"},
    }
    result = _server(python, environ).ask(request)
    if result is None:
        return None
    if result.get("config") is None and not result.get("problems"):
        return None
    problems = [_problem(run.schema, p) for p in result.get("problems") or []]
    config = result.get("config") or sc.compose(run.schema, run.overrides, environ).config
    return Composition(
        config,
        problems,
        by=f"Hydra against verl's own config in {os.path.dirname(os.path.dirname(python))} "
        "(verl not imported)",
        seconds=result.get("compose_s"),
    )


CONFIG_NAME = "ppo_trainer"
# what the interpreter reads at its start (a server started with other values answers no other run)
_START_VARIABLES = ("PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "VIRTUAL_ENV")


class _Server:
    """One `verl_compose.py --serve` process: a request line in, an answer line out."""

    def __init__(self, python: str, environ: dict[str, str], *, warm: bool = False) -> None:
        self.proc: subprocess.Popen[bytes] | None
        try:
            self.proc = subprocess.Popen(
                [python, COMPOSE_PROGRAM, "--serve", *([f"--warm={CONFIG_NAME}"] if warm else [])],
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


def _server(python: str, environ: dict[str, str], *, warm: bool = False) -> _Server:
    key = (python, *(environ.get(v, "") for v in _START_VARIABLES))
    server = _SERVERS.get(key)
    # a program that ended since its last answer (stopped with a process tree the runner ended, say) is
    # replaced: keeping it would answer every later request of this process from the key lists
    if server is None or server.proc is None or server.proc.poll() is not None:
        server = _SERVERS[key] = _Server(python, environ, warm=warm)
    return server


def warm(python: str, environ: dict[str, str]) -> None:
    """Start the program for `python` now, composing verl's config tree (no group override) before any
    request (Hydra's import and that composition run beside whatever this process does next): a bulk dry
    run calls it before planning its verl files. A single run starts it at its request, unwarmed."""
    _server(python, environ, warm=True)


@atexit.register
def close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()


def _problem(schema: sc.Schema, found: dict[str, Any]) -> Problem:
    key = found.get("key") or "?"
    hydra = (found.get("message") or "").splitlines()[0] if found.get("message") else ""
    kind = found.get("kind")
    if kind == "unknown_key":
        if schema.kind(key) is None:
            unknown = sc.unknown_key_problem(schema, key)
            message = unknown.message.split("; Hydra would stop")[0] + f" (Hydra: {hydra})"
            return dataclasses.replace(unknown, message=message)
        return Problem(key, f"refused by Hydra: {hydra}", "check the key against the installed verl version")
    if kind == "append_exists":
        return Problem(
            key,
            f"has a value in verl's config, so '+' is refused (Hydra: {hydra})",
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
            "fix the ${...} reference (a key of verl's config, or oc.env:VAR)",
        )
    return Problem(key, f"Hydra could not compose the config: {hydra}", "fix the value named")
