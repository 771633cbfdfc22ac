"""How `install.sh mindspeed-mm` installs MindSpeed-MM, what `doctor --backend mindspeed-mm` checks, and the
values of the experiment template.

The installation follows the Qwen2.5-VL README of the generation (examples/qwen2.5vl/README.md, "环境搭建"):
MindSpeed-MM at the commit the key lists were generated from, Megatron-LM's megatron/ copied into it,
MindSpeed at the README's commit, `pip install -e` of both; 2.1.0 adds transformers at the README's
commit (Qwen2.5-VL is not in its pinned transformers 4.45.0). The pins come from `facts/presets_<gen>.json`.
Generation: env `AF_MINDSPEED_MM_GENERATION` (2.1.0 default, or master). The driver, CANN, torch and
torch_npu come with the Ascend image (`doctor --backend mindspeed-mm` reports what is missing). Every step is
safe to re-run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.doctor import Check, ascend_toolkit_status, module_check
from ascendfactory.backends.install import InstallStep, third_party_dir
from ascendfactory.backends.mindspeed_mm.facts import GENERATIONS, RELEASES, presets
from ascendfactory.backends.mindspeed_mm.site import (
    DEFAULT_GENERATION,
    ENTRY_FILES,
    INSTALL_FIX,
    MEGATRON_MINOR,
    checkout_generation,
    find_checkout,
    megatron_version,
    missing_files,
    toolkit_script,
)
from ascendfactory.config.catalog import ModelArch
from ascendfactory.errors import ConfigError, Problem

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
    from ascendfactory.backends.mindspeed_mm.experiment import preset_name

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
