"""Where MindSpeed-LLM lives, how `install.sh mindspeed-llm` installs it, and what `doctor` checks.

`install.sh mindspeed-llm` installs the version named by env `AF_MINDSPEED_LLM_VERSION` (2.1.0 or 26.1.0),
by default 26.1.0, the newest maintained release (`versions.DEFAULT`).

The MindSpeed-LLM directory (every MindSpeed-LLM program runs with it as cwd), in order: `scripts_dir` in
the experiment, else env `AF_MINDSPEED_LLM_DIR`, else where `sh install.sh mindspeed-llm` clones it
(`<AF_THIRD_PARTY_DIR or ~/.ascendfactory/third-party>/MindSpeed-LLM`).

The MindSpeed-LLM directory a plan runs in, the version it targets (`versions.choose_version`), and
whether the Ascend toolkit environment is sourced.

A dry run shows a placeholder and a warning when no checkout is found; a real run stops with the fix. A
checkout whose megatron/ is not the Megatron-LM the targeted version runs on (an explicit
`mindspeed_llm_version` that is not the checkout's) is refused on a real run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.environment import (
    Check,
    FrameworkCheckout,
    InstallStep,
    ascend_checks,
    ascend_toolkit_status,
    module_check,
)
from ascendfactory.backends.mindspeed_llm.versions import (
    DEFAULT,
    KEY,
    RELEASES,
    Release,
    VersionChoice,
    choose_version,
    megatron_minor,
)
from ascendfactory.errors import ConfigError, Problem

ENTRY_SCRIPTS = ("pretrain_gpt.py", "posttrain_gpt.py", "preprocess_data.py")
CONVERTER_SCRIPTS = ("convert_ckpt.py", "convert_ckpt_v2.py")
INSTALL_FIX = (
    "run `sh install.sh mindspeed-llm`, or set scripts_dir (or env AF_MINDSPEED_LLM_DIR) to a "
    "MindSpeed-LLM checkout with Megatron-LM's megatron/ copied into it"
)


CHECKOUT = FrameworkCheckout("MindSpeed-LLM", "AF_MINDSPEED_LLM_DIR", ENTRY_SCRIPTS)
install_dir = CHECKOUT.install_dir
find_checkout = CHECKOUT.find  # (absolute directory, where it came from): the module docstring's order
missing_entry_scripts = CHECKOUT.missing


VERSION_ENV = "AF_MINDSPEED_LLM_VERSION"  # which version `install.sh mindspeed-llm` installs


def install_version(environ: Mapping[str, str]) -> Release:
    """The version `install.sh mindspeed-llm` installs: env AF_MINDSPEED_LLM_VERSION, else the default."""
    value = environ.get(VERSION_ENV) or DEFAULT
    if value not in RELEASES:
        raise ConfigError(
            Problem(
                f"env {VERSION_ENV}",
                f"'{value}' is not a MindSpeed-LLM version this backend installs",
                fix="use " + " or ".join(RELEASES) + f" (default {DEFAULT})",
            )
        )
    return RELEASES[value]


def checks(environ: Mapping[str, str]) -> list[Check]:
    """The toolkit, MindSpeed, the checkout and its pieces (megatron/, the converters)."""
    d, source = find_checkout(None, environ)
    out = [
        *ascend_checks(environ, torch_npu_required=True),
        module_check(
            "mindspeed",
            fix="sh install.sh mindspeed-llm (MindSpeed's git checkout; PyPI's mindspeed is a placeholder)",
        ),
        module_check("transformers"),
    ]
    missing = missing_entry_scripts(d)
    if missing:
        return [
            *out,
            Check(
                "MindSpeed-LLM checkout",
                "missing",
                f"{d} ({source}): {', '.join(missing)} not found: {INSTALL_FIX}",
            ),
        ]
    out.append(Check("MindSpeed-LLM checkout", "ok", d))
    choice = choose_version(None, d)
    release = choice.release
    out.append(Check("MindSpeed-LLM version", "info", f"{release.version}: {choice.reason}", required=False))
    has_megatron = os.path.isdir(os.path.join(d, "megatron"))
    out.append(
        Check(
            "megatron/ in MindSpeed-LLM",
            "ok" if has_megatron else "missing",
            f"present ({release.megatron})"
            if has_megatron
            else f"copy Megatron-LM {release.megatron}'s megatron/ into " + d,
        )
    )
    scripts = [s for s in CONVERTER_SCRIPTS if os.path.isfile(os.path.join(d, s))]
    out.append(
        Check(
            "checkpoint converters",
            "info" if scripts else "missing",
            ", ".join(scripts) or "neither convert_ckpt.py nor convert_ckpt_v2.py found",
            required=bool(not scripts),
        )
    )
    return out


def install_plan(third: str, release: Release, python: str = sys.executable) -> list[InstallStep]:
    """`release`'s documented installation (`Release.install_guide`); every step is safe to re-run.

    2.1.0 (docs/pytorch/install_guide.md on branch 2.1.0, with its README version table): MindSpeed at
    commit 2c085cc9 (its core_r0.8.0 line, 2025-04-01), Megatron-LM core_r0.8.0 (its megatron/ copied into
    MindSpeed-LLM), MindSpeed-LLM 2.1.0; the driver, CANN 8.2.RC1, torch 2.1/2.6, torch_npu 7.1.0 and apex
    come with the Ascend image.
    26.1.0 (docs/zh/pytorch/training/install_guide.md at v26.1.0, "方式二：源码安装"): Triton-Ascend 3.2.1
    (step 4), MindSpeed branch 26.1.0_core_r0.12.1 (step 5), Megatron-LM core_v0.12.1 copied into
    MindSpeed-LLM 26.1.0 and a logs/ folder the example scripts tee into (step 6); CANN 9.1.0, torch 2.7.1
    and torch_npu 2.7.1post8 (steps 2-3) come with the Ascend image.
    `doctor --backend mindspeed-llm` reports what is missing.
    """
    llm, megatron, mindspeed = (os.path.join(third, n) for n in ("MindSpeed-LLM", "Megatron-LM", "MindSpeed"))
    pip = (python, "-m", "pip", "install")
    steps: list[InstallStep] = []
    if release.version != "2.1.0":
        steps.append(
            InstallStep(
                "install Triton-Ascend 3.2.1",
                (
                    *pip,
                    "triton-ascend==3.2.1",
                    "--extra-index-url=https://triton-ascend.osinfra.cn/pypi/simple",
                ),
            )
        )
    steps += [
        InstallStep(
            "clone MindSpeed",
            ("git", "clone", "https://gitcode.com/ascend/MindSpeed.git", mindspeed),
            skip_if_exists=mindspeed,
        ),
        InstallStep(
            f"check out MindSpeed {release.mindspeed}",
            ("git", "-C", mindspeed, "checkout", release.mindspeed),
        ),
        InstallStep(
            "install MindSpeed requirements", (*pip, "-r", os.path.join(mindspeed, "requirements.txt"))
        ),
        InstallStep("install MindSpeed", (*pip, "-e", mindspeed)),
        InstallStep(
            f"clone MindSpeed-LLM {release.version}",
            (
                "git",
                "clone",
                "--depth",
                "1",
                "-b",
                release.version,
                "https://gitcode.com/ascend/MindSpeed-LLM.git",
                llm,
            ),
            skip_if_exists=llm,
        ),
        InstallStep(
            f"clone Megatron-LM {release.megatron}",
            (
                "git",
                "clone",
                "--depth",
                "1",
                "-b",
                release.megatron,
                "https://github.com/NVIDIA/Megatron-LM.git",
                megatron,
            ),
            skip_if_exists=megatron,
        ),
        InstallStep(
            "copy megatron/ into MindSpeed-LLM",
            ("cp", "-r", os.path.join(megatron, "megatron"), llm + "/"),
            skip_if_exists=os.path.join(llm, "megatron"),
        ),
    ]
    if release.version != "2.1.0":
        steps.append(InstallStep("create MindSpeed-LLM logs/", ("mkdir", "-p", os.path.join(llm, "logs"))))
    steps.append(
        InstallStep("install MindSpeed-LLM requirements", (*pip, "-r", os.path.join(llm, "requirements.txt")))
    )
    return steps


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
