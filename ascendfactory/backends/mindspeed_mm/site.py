"""The MindSpeed-MM directory a plan runs in, the generation it belongs to, and the toolkit environment.

The directory, in order: `scripts_dir` in the experiment, else env `AF_MINDSPEED_MM_DIR`, else where
`sh install.sh mindspeed-mm` clones it (`<AF_THIRD_PARTY_DIR or ~/.ascendfactory/third-party>/MindSpeed-MM`).

The generation (which key lists, example flags and json files apply), in order:

1. `backend_config.generation: 2.1.0 | master` when set;
2. else the checkout: `mindspeed_mm/configs/validate_params.json` exists from MindSpeed-MM 2.2.0 on (the
   releases on Megatron-LM core_v0.12.1) -> `master`; a checkout without it -> `2.1.0`;
3. else (no checkout: a dry run) `2.1.0`, the generation `install.sh mindspeed-mm` installs and Huawei's
   AscendFactory documents (PP=4, `llm_pp_layers [1,10,10,7]`), with a warning saying so.

A dry run shows a placeholder and warnings for what is missing; a real run stops with the fix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.doctor import ascend_toolkit_status
from ascendfactory.backends.mindspeed_mm.facts import GENERATIONS, RELEASES, presets
from ascendfactory.backends.venv import FrameworkCheckout
from ascendfactory.errors import Problem

PLACEHOLDER = "<MINDSPEED_MM_DIR>"
ENV_DIR = "AF_MINDSPEED_MM_DIR"
ENTRY_FILES = ("pretrain_vlm.py", "checkpoint/convert_cli.py")
GENERATION_MARKER = "mindspeed_mm/configs/validate_params.json"  # added in MindSpeed-MM 2.2.0
DEFAULT_GENERATION = "2.1.0"
MEGATRON_MINOR = {"2.1.0": 8, "master": 12}  # Megatron-LM core_r0.8.0 / core_v0.12.1
INSTALL_FIX = (
    "run `sh install.sh mindspeed-mm`, or set scripts_dir (or env AF_MINDSPEED_MM_DIR) to a MindSpeed-MM "
    "checkout with Megatron-LM's megatron/ copied into it"
)


CHECKOUT = FrameworkCheckout("MindSpeed-MM", ENV_DIR, ENTRY_FILES)
install_dir = CHECKOUT.install_dir
find_checkout = CHECKOUT.find  # (absolute directory, where it came from): the module docstring's order
missing_files = CHECKOUT.missing


def checkout_generation(directory: str) -> str:
    return "master" if os.path.isfile(os.path.join(directory, GENERATION_MARKER)) else "2.1.0"


def megatron_version(directory: str) -> tuple[int, int] | None:
    """(major, minor) of the megatron/ copied into the checkout; None when there is none."""
    path = os.path.join(directory, "megatron", "core", "package_info.py")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    found = dict(re.findall(r"^(MAJOR|MINOR)\s*=\s*(\d+)", text, flags=re.M))
    return (int(found["MAJOR"]), int(found["MINOR"])) if len(found) == 2 else None


def toolkit_script(generation: str) -> str:
    """The CANN set_env.sh the generation's example scripts source first."""
    return presets(generation)["models"]["qwen2.5-vl-7b"]["sources"][0]


@dataclass
class Site:
    directory: str  # the MindSpeed-MM directory, or PLACEHOLDER
    found: bool
    source: str
    generation: str
    generation_reason: str
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def resolve_site(ctx: PlanContext, *, strict: bool, explicit: str | None) -> Site:
    """Find the checkout, decide the generation, check megatron/ and the toolkit; on a real run
    (`strict`) what is missing is a Problem, on a dry run a warning. `explicit`: a validated
    `backend_config.generation`, or None."""
    path, source = find_checkout(ctx.config.scripts_dir, ctx.environ)
    missing = missing_files(path)
    found = not missing
    if explicit:
        generation, reason = explicit, f"backend_config.generation: {explicit}"
    elif found:
        generation = checkout_generation(path)
        marker = "has" if generation == "master" else "has no"
        reason = f"{path} {marker} {GENERATION_MARKER}: {RELEASES[generation]}"
    else:
        generation = DEFAULT_GENERATION
        reason = (
            f"no MindSpeed-MM checkout found: assuming generation {DEFAULT_GENERATION} "
            f"({RELEASES[DEFAULT_GENERATION]}, what install.sh installs); set backend_config.generation: "
            "master for MindSpeed-MM 2.2.0 and later"
        )
    site = Site(path, found, source, generation, reason)
    if not explicit and not found:
        site.warnings.append(reason)

    def lacking(key: str, message: str, fix: str) -> None:
        if strict:
            site.problems.append(Problem(key=key, message=message, fix=fix, source=ctx.loaded.source_of(key)))
        else:
            site.warnings.append(f"{message} ({fix})")

    if missing:
        what = (
            f"{path} ({source}) is not a MindSpeed-MM directory: {', '.join(missing)} missing"
            if os.path.isdir(path)
            else f"MindSpeed-MM directory {path} ({source}) not found"
        )
        lacking("scripts_dir", what, INSTALL_FIX)
        if not strict and not os.path.isdir(path):
            site.directory = PLACEHOLDER
            site.warnings.append(f"the plan shows {PLACEHOLDER} as the working directory")
    else:
        if explicit and checkout_generation(path) != explicit:
            lacking(
                "backend_config.generation",
                f"is {explicit}, but {path} is a {checkout_generation(path)} checkout "
                f"({RELEASES[checkout_generation(path)]})",
                "remove backend_config.generation to follow the checkout, or point scripts_dir at a "
                f"{explicit} checkout",
            )
        version = megatron_version(path)
        want = MEGATRON_MINOR[generation]
        if version is None:
            lacking(
                "scripts_dir",
                f"{path} has no megatron/ (megatron/core/package_info.py not found)",
                f"copy Megatron-LM {'core_r0.8.0' if want == 8 else 'core_v0.12.1'}'s megatron/ into it",
            )
        elif version[1] != want:
            lacking(
                "scripts_dir",
                f"{path}/megatron is Megatron-LM core {version[0]}.{version[1]}, but MindSpeed-MM "
                f"{generation} runs on core 0.{want}",
                f"copy Megatron-LM {'core_r0.8.0' if want == 8 else 'core_v0.12.1'}'s megatron/ into it",
            )
    script = toolkit_script(generation)
    ok, detail = ascend_toolkit_status(ctx.environ, set_env=script)
    if not ok:
        fix = f"source {script} (and /usr/local/Ascend/nnal/atb/set_env.sh), then run again"
        if strict:
            lacking("(environment)", f"Ascend toolkit: {detail}", fix)
        else:
            site.warnings.append(f"Ascend toolkit: {detail}; a real run needs it sourced")
    return site


def generation_problem(value: object, source: str) -> Problem | None:
    """`backend_config.generation` must name a generation."""
    if value is None or value in GENERATIONS:
        return None
    return Problem(
        key="backend_config.generation",
        message=f"'{value}' is not a MindSpeed-MM generation",
        fix="use " + " or ".join(f"{g} ({RELEASES[g]})" for g in GENERATIONS) + ", or remove the key to "
        "follow the installed MindSpeed-MM",
        source=source,
    )
