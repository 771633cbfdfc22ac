"""The MindSpeed-LLM directory a plan runs in, and whether the Ascend toolkit environment is sourced.

A dry run shows a placeholder and a warning when no checkout is found; a real run stops with the fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.doctor import ascend_toolkit_status
from ascendfactory.backends.mindspeed_llm.environment import INSTALL_FIX, find_checkout, missing_entry_scripts
from ascendfactory.errors import Problem

PLACEHOLDER = "<MINDSPEED_LLM_DIR>"


@dataclass
class Site:
    directory: str  # the MindSpeed-LLM directory, or PLACEHOLDER
    found: bool
    source: str
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def resolve_site(ctx: PlanContext, *, strict: bool) -> Site:
    """Find the checkout and check the toolkit; on a real run (`strict`) what is missing is a Problem."""
    path, source = find_checkout(ctx.config.scripts_dir, ctx.environ)
    missing = missing_entry_scripts(path)
    site = Site(directory=path, found=not missing, source=source)

    def lacking(problem: Problem, warning: str) -> None:
        if strict:
            site.problems.append(problem)
        else:
            site.warnings.append(warning)

    def scripts_dir(message: str) -> Problem:
        return Problem(
            key="scripts_dir", message=message, fix=INSTALL_FIX, source=ctx.loaded.source_of("scripts_dir")
        )

    if missing:
        what = (
            f"{path} ({source}) is not a MindSpeed-LLM directory: {', '.join(missing)} missing"
            if os.path.isdir(path)
            else f"MindSpeed-LLM directory {path} ({source}) not found"
        )
        lacking(
            scripts_dir(what),
            f"{what}; the plan shows {PLACEHOLDER} as the working directory ({INSTALL_FIX})",
        )
        if not strict and not os.path.isdir(path):
            site.directory = PLACEHOLDER
    elif not os.path.isdir(os.path.join(path, "megatron")):
        message = f"{path} has no megatron/ folder (copy Megatron-LM core_r0.8.0's megatron/ into it)"
        lacking(scripts_dir(message), message)
    ok, detail = ascend_toolkit_status(ctx.environ)
    if not ok:
        toolkit = Problem(
            key="(environment)",
            message=f"Ascend toolkit: {detail}",
            fix="source /usr/local/Ascend/ascend-toolkit/set_env.sh (and "
            "/usr/local/Ascend/nnal/atb/set_env.sh), then run again",
        )
        lacking(toolkit, f"Ascend toolkit: {detail}; a real run needs it sourced")
    return site
