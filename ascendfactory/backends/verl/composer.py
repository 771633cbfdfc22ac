"""The composed verl config of a run: Hydra in verl's environment when there is one, else the key lists.

    compose(env_python, run) -> Composition(config, problems, by)

With verl installed, the Hydra toolkit (`backends/common/hydra/compose.py`) composes the run's exact override
texts against verl's own config directory (`verl/trainer/config`, config `ppo_trainer`) with Hydra in
verl's python (verl not imported) and names every override Hydra refuses and every interpolation that does
not resolve; one program answers every run of this process (about 1 s to start, 0.1 s a run). Without
verl, `schema.compose` applies the same overrides to the shipped key lists of verl 0.9.1 and resolves the
interpolations verl's defaults use. Both give the problems in our words, keyed by the dotted verl key.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.common.hydra import compose as hydra
from ascendfactory.backends.common.hydra import schema as sc
from ascendfactory.backends.verl.read import OWNED, VerlRun
from ascendfactory.errors import Problem

# where `python -m verl.trainer.main_ppo` finds its config (`@hydra.main(config_path="config",
# config_name="ppo_trainer")`, verl/trainer/main_ppo.py:166 at v0.9.1)
PACKAGE = "verl"
CONFIG_DIR = "trainer/config"
CONFIG_NAME = "ppo_trainer"


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
    request = hydra.Request(PACKAGE, CONFIG_DIR, CONFIG_NAME, run.texts(hydra=False), environ)
    result = hydra.ask(python, request)
    if result is None:
        return None
    if result.get("config") is None and not result.get("problems"):
        return None
    problems = [hydra.problem(run.schema, p) for p in result.get("problems") or []]
    config = result.get("config") or sc.compose(run.schema, run.overrides, environ).config
    return Composition(
        config,
        problems,
        by=f"Hydra against verl's own config in {os.path.dirname(os.path.dirname(python))} "
        "(verl not imported)",
        seconds=result.get("compose_s"),
    )


def warm(python: str, environ: dict[str, str]) -> None:
    """Start the compose program for verl's `python` now, composing `ppo_trainer` before any request: a bulk
    dry run calls it before planning its verl files (`hydra.warm`)."""
    hydra.warm(python, PACKAGE, CONFIG_DIR, CONFIG_NAME, environ)
