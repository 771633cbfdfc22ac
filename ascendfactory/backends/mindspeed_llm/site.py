"""The MindSpeed-LLM directory a plan runs in, the version it targets (`versions.choose_version`), and
whether the Ascend toolkit environment is sourced.

A dry run shows a placeholder and a warning when no checkout is found; a real run stops with the fix. A
checkout whose megatron/ is not the Megatron-LM the targeted version runs on (an explicit
`mindspeed_llm_version` that is not the checkout's) is refused on a real run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.doctor import ascend_toolkit_status
from ascendfactory.backends.mindspeed_llm.environment import INSTALL_FIX, find_checkout, missing_entry_scripts
from ascendfactory.backends.mindspeed_llm.versions import KEY, VersionChoice, choose_version, megatron_minor
from ascendfactory.errors import Problem

PLACEHOLDER = "<MINDSPEED_LLM_DIR>"


@dataclass
class Site:
    directory: str  # the MindSpeed-LLM directory, or PLACEHOLDER
    found: bool
    source: str
    version: VersionChoice
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def resolve_site(ctx: PlanContext, *, strict: bool, explicit_version: str | None) -> Site:
    """Find the checkout, decide the version (`explicit_version`: a validated
    `backend_config.mindspeed_llm_version`, or None) and check the toolkit; on a real run (`strict`) what
    is missing is a Problem."""
    path, source = find_checkout(ctx.config.scripts_dir, ctx.environ)
    missing = missing_entry_scripts(path)
    version = choose_version(explicit_version, None if missing else path)
    site = Site(directory=path, found=not missing, source=source, version=version)
    release = version.release
    if version.guessed or version.note:
        site.warnings.append(version.note or version.reason)

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
        message = f"{path} has no megatron/ folder (copy Megatron-LM {release.megatron}'s megatron/ into it)"
        lacking(scripts_dir(message), message)
    elif explicit_version and megatron_minor(path) not in (None, release.megatron_minor):
        message = (
            f"{KEY} is {release.version}, but {path}/megatron is Megatron-LM core 0.{megatron_minor(path)}: "
            f"MindSpeed-LLM {release.version} runs on {release.megatron}"
        )
        fix = (
            f"remove {KEY} to follow the checkout, or point scripts_dir at a MindSpeed-LLM "
            f"{release.version} checkout"
        )
        problem = Problem(key=KEY, message=message, fix=fix, source=ctx.loaded.source_of(KEY))
        lacking(problem, f"{message} ({fix})")
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
