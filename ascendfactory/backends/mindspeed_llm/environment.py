"""Where MindSpeed-LLM lives, how `install.sh mindspeed-llm` installs it, and what `doctor` checks.

The MindSpeed-LLM directory (every MindSpeed-LLM program runs with it as cwd), in order: `scripts_dir` in
the experiment, else env `AF_MINDSPEED_LLM_DIR`, else where `sh install.sh mindspeed-llm` clones it
(`<AF_THIRD_PARTY_DIR or ~/.ascendfactory/third-party>/MindSpeed-LLM`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from ascendfactory.backends.doctor import Check, ascend_checks, module_check
from ascendfactory.backends.install import InstallStep
from ascendfactory.backends.venv import FrameworkCheckout

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
    has_megatron = os.path.isdir(os.path.join(d, "megatron"))
    out.append(
        Check(
            "megatron/ in MindSpeed-LLM",
            "ok" if has_megatron else "missing",
            "present" if has_megatron else "copy Megatron-LM core_r0.8.0's megatron/ into " + d,
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


def install_plan(third: str, python: str = sys.executable) -> list[InstallStep]:
    """MindSpeed-LLM 2.1.0's documented installation (docs/pytorch/install_guide.md on branch 2.1.0).

    Pins, checked against that branch's README version table and install guide: MindSpeed at commit 2c085cc9
    (its core_r0.8.0 line, 2025-04-01), Megatron-LM core_r0.8.0 (its megatron/ copied into MindSpeed-LLM),
    MindSpeed-LLM 2.1.0. The driver, CANN 8.2.RC1, torch 2.1/2.6, torch_npu 7.1.0 and apex come with the
    Ascend image (`doctor --backend mindspeed-llm` reports what is missing). Every step is safe to re-run.
    """
    llm, megatron, mindspeed = (os.path.join(third, n) for n in ("MindSpeed-LLM", "Megatron-LM", "MindSpeed"))
    pip = (python, "-m", "pip", "install")
    return [
        InstallStep(
            "clone MindSpeed",
            ("git", "clone", "https://gitcode.com/ascend/MindSpeed.git", mindspeed),
            skip_if_exists=mindspeed,
        ),
        InstallStep(
            "check out MindSpeed 2c085cc9 (core_r0.8.0)", ("git", "-C", mindspeed, "checkout", "2c085cc9")
        ),
        InstallStep(
            "install MindSpeed requirements", (*pip, "-r", os.path.join(mindspeed, "requirements.txt"))
        ),
        InstallStep("install MindSpeed", (*pip, "-e", mindspeed)),
        InstallStep(
            "clone MindSpeed-LLM 2.1.0",
            (
                "git",
                "clone",
                "--depth",
                "1",
                "-b",
                "2.1.0",
                "https://gitcode.com/ascend/MindSpeed-LLM.git",
                llm,
            ),
            skip_if_exists=llm,
        ),
        InstallStep(
            "clone Megatron-LM core_r0.8.0",
            (
                "git",
                "clone",
                "--depth",
                "1",
                "-b",
                "core_r0.8.0",
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
        InstallStep(
            "install MindSpeed-LLM requirements", (*pip, "-r", os.path.join(llm, "requirements.txt"))
        ),
    ]
