"""How `install.sh mindspeed-mm` installs MindSpeed-MM, what `doctor --backend mindspeed-mm` checks, and the
values of the experiment template.

The installation follows the Qwen2.5-VL README of the generation (examples/qwen2.5vl/README.md, "环境搭建"):
MindSpeed-MM at the commit the key lists were generated from, Megatron-LM's megatron/ copied into it,
MindSpeed at the README's commit, `pip install -e` of both; 2.1.0 adds transformers at the README's
commit (Qwen2.5-VL is not in its pinned transformers 4.45.0). The pins come from `keys/presets_<gen>.json`.
Generation: env `AF_MINDSPEED_MM_GENERATION` (2.1.0 default, or master). The driver, CANN, torch and
torch_npu come with the Ascend image (`doctor --backend mindspeed-mm` reports what is missing). Every step is
safe to re-run.

The MindSpeed-MM directory a plan runs in, the generation it belongs to, and the toolkit environment.

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

import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.environment import (
    Check,
    FrameworkCheckout,
    InstallStep,
    ascend_toolkit_status,
    module_check,
    third_party_dir,
)
from ascendfactory.backends.mindspeed_mm.keys import GENERATIONS, RELEASES, preset_name, presets
from ascendfactory.config.catalog import ModelArch
from ascendfactory.errors import ConfigError, Problem

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


GENERATION_ENV = "AF_MINDSPEED_MM_GENERATION"
MINDSPEED_MM_GIT = "https://gitcode.com/Ascend/MindSpeed-MM.git"
MINDSPEED_GIT = "https://gitcode.com/Ascend/MindSpeed.git"
MEGATRON_GIT = "https://github.com/NVIDIA/Megatron-LM.git"
TRANSFORMERS_GIT = "https://github.com/huggingface/transformers.git"
# 2.1.0's examples/qwen2.5vl/README.md installs transformers from this commit (`git checkout fa56dcc2a`).
TRANSFORMERS_2_1_0 = "fa56dcc2a"


def install_generation(environ: Mapping[str, str]) -> str:
    value = environ.get(GENERATION_ENV) or DEFAULT_GENERATION
    if value not in GENERATIONS:
        raise ConfigError(
            Problem(
                f"env {GENERATION_ENV}",
                f"'{value}' is not a MindSpeed-MM generation",
                fix="use " + " or ".join(f"{g} ({RELEASES[g]})" for g in GENERATIONS),
            )
        )
    return value


def install_plan(environ: Mapping[str, str], python: str = sys.executable) -> list[InstallStep]:
    gen = install_generation(environ)
    pins = presets(gen)
    third = third_party_dir(environ)
    mm_commit, megatron_ref = pins["mindspeed_mm"]["commit"], pins["megatron"]["ref"]
    mindspeed_commit = pins["mindspeed"]["commit"]
    mm = os.path.join(third, "MindSpeed-MM")
    megatron = os.path.join(third, f"Megatron-LM-{megatron_ref}")
    mindspeed = os.path.join(third, f"MindSpeed-{mindspeed_commit[:8]}")
    pip = (python, "-m", "pip", "install")
    steps = [
        InstallStep(f"clone MindSpeed-MM ({gen})", ("git", "clone", MINDSPEED_MM_GIT, mm), skip_if_exists=mm),
        InstallStep(f"check out MindSpeed-MM {mm_commit[:8]}", ("git", "-C", mm, "checkout", mm_commit)),
        InstallStep(
            f"clone Megatron-LM {megatron_ref}",
            ("git", "clone", "--depth", "1", "-b", megatron_ref, MEGATRON_GIT, megatron),
            skip_if_exists=megatron,
        ),
        InstallStep(
            "copy megatron/ into MindSpeed-MM",
            ("cp", "-r", os.path.join(megatron, "megatron"), mm + "/"),
            skip_if_exists=os.path.join(mm, "megatron"),
        ),
        InstallStep("clone MindSpeed", ("git", "clone", MINDSPEED_GIT, mindspeed), skip_if_exists=mindspeed),
        InstallStep(
            f"check out MindSpeed {mindspeed_commit[:8]}",
            ("git", "-C", mindspeed, "checkout", mindspeed_commit),
        ),
    ]
    if gen == "2.1.0":  # the master README installs MindSpeed without its requirements file
        steps.append(
            InstallStep(
                "install MindSpeed requirements", (*pip, "-r", os.path.join(mindspeed, "requirements.txt"))
            )
        )
    steps += [
        InstallStep("install MindSpeed", (*pip, "-e", mindspeed)),
        InstallStep("install MindSpeed-MM and its dependencies (mm-convert)", (*pip, "-e", mm)),
    ]
    if gen == "2.1.0":
        transformers = os.path.join(third, f"transformers-{TRANSFORMERS_2_1_0}")
        steps += [
            InstallStep(
                "clone transformers",
                ("git", "clone", TRANSFORMERS_GIT, transformers),
                skip_if_exists=transformers,
            ),
            InstallStep(
                f"check out transformers {TRANSFORMERS_2_1_0}",
                ("git", "-C", transformers, "checkout", TRANSFORMERS_2_1_0),
            ),
            InstallStep("install transformers (Qwen2.5-VL)", (*pip, "-e", transformers)),
        ]
    return steps


def _transformers_has_qwen2_5_vl() -> bool | None:
    """Whether the installed transformers ships models/qwen2_5_vl (found without importing it)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.origin:
        return None
    return os.path.isdir(os.path.join(os.path.dirname(spec.origin), "models", "qwen2_5_vl"))


def checks(environ: Mapping[str, str]) -> list[Check]:
    """The toolkit, the Python packages, the checkout, its generation and its megatron/."""
    directory, source = find_checkout(None, environ)
    missing = missing_files(directory)
    gen = checkout_generation(directory) if not missing else DEFAULT_GENERATION
    ok, detail = ascend_toolkit_status(environ, set_env=toolkit_script(gen))
    out = [
        Check("Ascend toolkit", "ok" if ok else "missing", detail),
        module_check("torch_npu"),
        module_check(
            "mindspeed",
            fix="sh install.sh mindspeed-mm (MindSpeed's git checkout; PyPI's mindspeed is a placeholder)",
        ),
        module_check("jsonargparse"),
        module_check("transformers"),
    ]
    has_vl = _transformers_has_qwen2_5_vl()
    if has_vl is not None:
        out.append(
            Check(
                "transformers: qwen2_5_vl",
                "ok" if has_vl else "missing",
                "present"
                if has_vl
                else "this transformers has no Qwen2.5-VL: install the version MindSpeed-MM's README names",
            )
        )
    if missing:
        return [
            *out,
            Check(
                "MindSpeed-MM checkout",
                "missing",
                f"{directory} ({source}): {', '.join(missing)} not found: {INSTALL_FIX}",
            ),
        ]
    out.append(Check("MindSpeed-MM checkout", "ok", f"{directory} ({source}): {', '.join(ENTRY_FILES)}"))
    out.append(Check("MindSpeed-MM generation", "info", f"{gen}: {RELEASES[gen]}", required=False))
    version = megatron_version(directory)
    want = MEGATRON_MINOR[gen]
    out.append(
        Check(
            "megatron/ in MindSpeed-MM",
            "ok" if version and version[1] == want else "missing",
            f"core {version[0]}.{version[1]}"
            + ("" if version[1] == want else f": MindSpeed-MM {gen} needs core 0.{want}")
            if version
            else f"not found: copy Megatron-LM {presets(gen)['megatron']['ref']}'s megatron/ "
            f"into {directory}",
        )
    )
    console = shutil.which("mm-convert", path=environ.get("PATH"))
    out.append(
        Check(
            "mm-convert",
            "info",
            console
            or "console script not on PATH (the plan runs python -m checkpoint.convert_cli in the checkout)",
            required=False,
        )
    )
    return out


def template_values(arch: ModelArch, *, devices: int) -> dict[str, Any]:
    """The example's layout for `arch` (the default generation), for experiments/full.yaml."""
    models = presets(DEFAULT_GENERATION)["models"]
    name = preset_name(arch.name, arch, DEFAULT_GENERATION)
    if name is None:
        raise ConfigError(
            Problem(
                "--af_model_name",
                f"'{arch.name}' has no MindSpeed-MM example",
                fix="use one of: " + ", ".join(models),
            )
        )
    preset = models[name]
    d = preset["defaults"]
    model_parallel = d["TP"] * d["PP"] * d["CP"]
    dp = max(devices // model_parallel, 1)
    return {
        "nnodes": -(-model_parallel // devices),  # the example's layout needs this many machines
        "generation": DEFAULT_GENERATION,
        "example": preset["source"]["files"][0],
        "mm_tp": d["TP"],
        "mm_pp": d["PP"],
        "mm_gbs": d["MBS"] * d["GRAD_ACC_STEP"] * dp,
        "vit_pp_layers": preset["model"]["image_encoder"]["vision_encoder"]["pipeline_num_layers"],
        "llm_pp_layers": preset["model"]["text_decoder"]["pipeline_num_layers"],
    }
