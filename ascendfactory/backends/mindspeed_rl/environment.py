"""Where MindSpeed-RL and the MindSpeed-LLM converters live, which MindSpeed-RL version is in use, how
`install.sh mindspeed-rl` installs them, and what `doctor --backend mindspeed-rl` checks.

The MindSpeed-RL directory (Ray is started there and every MindSpeed-RL program runs with it as cwd), in
order: `scripts_dir` in the experiment, else env `AF_MINDSPEED_RL_DIR`, else where `install.sh mindspeed-rl`
clones it (`<AF_THIRD_PARTY_DIR or ~/.ascendfactory/third-party>/MindSpeed-RL`).

The MindSpeed-LLM directory whose `convert_ckpt.py` / `convert_ckpt_v2.py` convert the weights (MindSpeed-RL
has no converter of its own since 2.1.0; its docs send users to MindSpeed-LLM at the commit it pins): env
`AF_MINDSPEED_LLM_DIR`, else `<third-party>/MindSpeed-LLM-a2c0733` (cloned by `install.sh mindspeed-rl`), else
`<third-party>/MindSpeed-LLM` (`install.sh mindspeed-llm`).

Which MindSpeed-RL version is in use, and where its checkout is, is decided by
`common/mindspeed_rl_experiment/checkout.py` (reading the experiment needs it too).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from ascendfactory.backends.common.mindspeed_rl_experiment.checkout import (
    choose_version,
    find_checkout,
    missing_entry_scripts,
)
from ascendfactory.backends.environment import (
    Check,
    InstallStep,
    ascend_checks,
    module_check,
    third_party_dir,
)

# The pins of MindSpeed-RL 2.3.0's docs/install_guide.md (branch 2.3.0): the newest release.
PINNED_RL = ("2.3.0", "09b8c1253af02abf62f9056e3a4e5cba78b03d7a")
PINNED_LLM = "a2c0733b9c8674e240a0a7607ed3f973115cc6b7"
PINNED_MINDSPEED = "ac9f0e74061f968fdb285aa6a0df68a980fb0412"
PINNED_MEGATRON = "core_v0.12.1"
INSTALL_FIX = (
    "run `sh install.sh mindspeed-rl`, or set scripts_dir (or env AF_MINDSPEED_RL_DIR) to a MindSpeed-RL "
    "checkout with megatron/, mindspeed/ and mindspeed_llm/ copied into it (its docs/install_guide.md)"
)
LLM_FIX = (
    "set env AF_MINDSPEED_LLM_DIR to a MindSpeed-LLM checkout (commit a2c0733, as MindSpeed-RL pins), or run "
    "`sh install.sh mindspeed-rl`; or give the converted weights (user_converted_ckpt_path, "
    "actor_config.load) and disable the final conversion (convert_ckpt_mg2hf: null)"
)


def llm_install_dir(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(third_party_dir(environ), f"MindSpeed-LLM-{PINNED_LLM[:7]}")


def find_converter_dir(environ: Mapping[str, str]) -> tuple[str, str]:
    """(MindSpeed-LLM directory, where it came from); the first candidate that exists, else the first."""
    candidates = []
    if environ.get("AF_MINDSPEED_LLM_DIR"):
        candidates.append(
            (os.path.abspath(os.path.expanduser(environ["AF_MINDSPEED_LLM_DIR"])), "env AF_MINDSPEED_LLM_DIR")
        )
    candidates.append((llm_install_dir(environ), "install.sh mindspeed-rl location"))
    candidates.append(
        (os.path.join(third_party_dir(environ), "MindSpeed-LLM"), "install.sh mindspeed-llm location")
    )
    for path, source in candidates:
        if any(os.path.isfile(os.path.join(path, s)) for s in ("convert_ckpt.py", "convert_ckpt_v2.py")):
            return path, source
    return candidates[0]


# -- doctor ---------------------------------------------------------------------------------------------
def checks(environ: Mapping[str, str]) -> list[Check]:
    """The toolkit, torch_npu, ray, the checkout and its copied-in packages, the version, the converters."""
    d, source = find_checkout(None, environ)
    out = [
        *ascend_checks(environ, torch_npu_required=True),
        module_check("ray"),
        module_check("hydra"),
        module_check("vllm", required=False),
    ]
    missing = missing_entry_scripts(d)
    if missing:
        out.append(
            Check(
                "MindSpeed-RL checkout",
                "missing",
                f"{d} ({source}): {', '.join(missing)} not found: {INSTALL_FIX}",
            )
        )
    else:
        out.append(Check("MindSpeed-RL checkout", "ok", d))
        for pkg in ("megatron", "mindspeed", "mindspeed_llm"):
            present = os.path.isdir(os.path.join(d, pkg))
            out.append(
                Check(
                    f"{pkg}/ in MindSpeed-RL",
                    "ok" if present else "missing",
                    "present" if present else f"copy {pkg}/ into {d} ({INSTALL_FIX})",
                )
            )
        choice = choose_version(None, d)
        out.append(Check("MindSpeed-RL version", "info", choice.reason, required=False))
    llm, llm_source = find_converter_dir(environ)
    scripts = [s for s in ("convert_ckpt.py", "convert_ckpt_v2.py") if os.path.isfile(os.path.join(llm, s))]
    out.append(
        Check(
            "MindSpeed-LLM converters",
            "ok" if scripts else "warn",
            f"{', '.join(scripts)} in {llm} ({llm_source})" if scripts else f"not found: {LLM_FIX}",
            required=False,
        )
    )
    return out


# -- install.sh mindspeed-rl ------------------------------------------------------------------------------
def install_plan(third: str, python: str = sys.executable) -> list[InstallStep]:
    """MindSpeed-RL 2.3.0's documented installation of its sources (docs/install_guide.md, branch 2.3.0):
    MindSpeed at ac9f0e74, Megatron-LM core_v0.12.1 and MindSpeed-LLM a2c0733, each package directory copied
    into the MindSpeed-RL checkout, then MindSpeed-RL's requirements. The MindSpeed-LLM clone stays where it
    is: its converters convert the weights. The driver, CANN, torch/torch_npu 2.7.1, apex, vllm and
    vllm-ascend come with the Ascend image (`doctor --backend mindspeed-rl` reports what is missing). Every
    step is safe to re-run.
    """
    rl = os.path.join(third, "MindSpeed-RL")
    llm = os.path.join(third, f"MindSpeed-LLM-{PINNED_LLM[:7]}")
    mindspeed = os.path.join(third, f"MindSpeed-{PINNED_MINDSPEED[:7]}")
    megatron = os.path.join(third, f"Megatron-LM-{PINNED_MEGATRON}")
    pip = (python, "-m", "pip", "install")
    version, commit = PINNED_RL
    return [
        InstallStep(
            f"clone MindSpeed-RL {version}",
            ("git", "clone", "-b", version, "https://gitcode.com/Ascend/MindSpeed-RL.git", rl),
            skip_if_exists=rl,
        ),
        InstallStep(f"check out MindSpeed-RL {commit[:8]}", ("git", "-C", rl, "checkout", commit)),
        InstallStep(
            "clone MindSpeed",
            ("git", "clone", "https://gitcode.com/Ascend/MindSpeed.git", mindspeed),
            skip_if_exists=mindspeed,
        ),
        InstallStep(
            f"check out MindSpeed {PINNED_MINDSPEED[:8]}",
            ("git", "-C", mindspeed, "checkout", PINNED_MINDSPEED),
        ),
        InstallStep(
            "install MindSpeed requirements", (*pip, "-r", os.path.join(mindspeed, "requirements.txt"))
        ),
        InstallStep(
            "copy mindspeed/ into MindSpeed-RL",
            ("cp", "-r", os.path.join(mindspeed, "mindspeed"), rl + "/"),
            skip_if_exists=os.path.join(rl, "mindspeed"),
        ),
        InstallStep(
            f"clone Megatron-LM {PINNED_MEGATRON}",
            (
                "git",
                "clone",
                "--depth",
                "1",
                "-b",
                PINNED_MEGATRON,
                "https://github.com/NVIDIA/Megatron-LM.git",
                megatron,
            ),
            skip_if_exists=megatron,
        ),
        InstallStep(
            "copy megatron/ into MindSpeed-RL",
            ("cp", "-r", os.path.join(megatron, "megatron"), rl + "/"),
            skip_if_exists=os.path.join(rl, "megatron"),
        ),
        InstallStep(
            "clone MindSpeed-LLM",
            ("git", "clone", "https://gitcode.com/Ascend/MindSpeed-LLM.git", llm),
            skip_if_exists=llm,
        ),
        InstallStep(f"check out MindSpeed-LLM {PINNED_LLM[:7]}", ("git", "-C", llm, "checkout", PINNED_LLM)),
        InstallStep(
            "copy mindspeed_llm/ into MindSpeed-RL",
            ("cp", "-r", os.path.join(llm, "mindspeed_llm"), rl + "/"),
            skip_if_exists=os.path.join(rl, "mindspeed_llm"),
        ),
        InstallStep(
            "copy megatron/ into MindSpeed-LLM (its converters import it)",
            ("cp", "-r", os.path.join(megatron, "megatron"), llm + "/"),
            skip_if_exists=os.path.join(llm, "megatron"),
        ),
        InstallStep(
            "copy mindspeed/ into MindSpeed-LLM (its converters import it)",
            ("cp", "-r", os.path.join(mindspeed, "mindspeed"), llm + "/"),
            skip_if_exists=os.path.join(llm, "mindspeed"),
        ),
        InstallStep("install MindSpeed-RL requirements", (*pip, "-r", os.path.join(rl, "requirements.txt"))),
        InstallStep(
            "install antlr4-python3-runtime 4.9.3 (hydra's, without its dependencies)",
            (*pip, "antlr4-python3-runtime==4.9.3", "--no-deps"),
        ),
    ]
