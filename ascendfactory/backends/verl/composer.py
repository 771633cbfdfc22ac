"""The composed verl config of a run: Hydra in verl's environment when there is one, else the key lists.

    compose(env_python, run) -> Composition(config, problems, by)

With verl installed, `programs/verl_compose.py` composes the run's exact override texts against verl's own
config directory with Hydra (about 0.5 s, verl not imported) and names every override Hydra refuses and
every interpolation that does not resolve. Without it, `schema.compose` applies the same overrides to the
shipped key lists of verl 0.9.1 and resolves the interpolations verl's defaults use. Both give the
problems in our words, keyed by the dotted verl key.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
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
    request = json.dumps({"overrides": run.texts(hydra=False), "config_name": "ppo_trainer"})
    try:
        done = subprocess.run(
            [python, COMPOSE_PROGRAM],
            input=request,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env={**environ, "HYDRA_FULL_ERROR": "0"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = next((x for x in reversed(done.stdout.splitlines()) if x.startswith("{")), None)
    if line is None:
        return None
    result = json.loads(line)
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
