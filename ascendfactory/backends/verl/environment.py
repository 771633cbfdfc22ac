"""Where verl lives, how `install.sh verl` creates it, and what `doctor --backend verl` checks.

verl 0.9.1 needs transformers >=5.5.3,<5.11,!=5.6.0 (LLaMA-Factory wants <=5.6.0), so it gets an
environment of its own. The environment, in order: `backend_config.env_dir` in the experiment, else env
`AF_VERL_ENV`, else where `sh install.sh verl` creates it (`<AF_ENVS_DIR or ~/.ascendfactory/envs>/verl`).
Any virtualenv or conda prefix with `bin/python` and verl importable from it works (a cluster image that
already has verl: point `AF_VERL_ENV` at its prefix).

The install: a venv, the torch of `AF_TORCH_SPEC` first (default the CPU `torch==2.13.0`), then
`verl[verl-core]==0.9.1` with that torch pinned on the same command line (so pip keeps it). The
`verl-core` extra is required: without it the default (V1) trainer fails with `No module named
'transfer_queue'` (verl 0.9.1 `verl/trainer/main_ppo.py` imports it).

On Ascend (`AF_VERL_DEVICE=npu sh install.sh verl`) the environment is created over the Ascend image's
site-packages (`--system-site-packages`) and only verl is installed into it: verl's Ascend quick start
installs torch and torch_npu from Ascend's pytorch builds, then vLLM and vLLM-Ascend from source, versions
that must match the image's CANN (docs/ascend_tutorial/ascend_quick_start.rst; 0.8.0.dev: CANN 8.3.RC1,
torch/torch_npu 2.7.1, vLLM 0.11.0 + vLLM-Ascend 0.11.0rc1, MindSpeed f2b0977e + Megatron-LM core_v0.12.1
for the Megatron engine), so they come with the image, and the check step refuses an environment without
torch_npu, vLLM-Ascend or the verl-core extra.

Nothing here imports verl: versions are read from the environment's package metadata, verl's config dir
is found by path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from ascendfactory.backends.environment import (
    Check,
    FrameworkEnv,
    InstallStep,
    package_version,
    python_of,
    site_packages,
)

VERSION = "0.9.1"  # the newest on the registry; keys/ and the rules are verl 0.9.1's
EXTRA = "verl-core"
ENV = FrameworkEnv(name="verl", label="verl", variable="AF_VERL_ENV", version=VERSION)
INSTALL_FIX, MARKER = ENV.install_fix, ENV.marker
# Rollout engines verl 0.9.1 can use (its RolloutReplicaRegistry: vllm, sglang, trtllm), by distribution.
ROLLOUT_DISTRIBUTIONS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}
default_env, find_env = ENV.default, ENV.find


def config_dir(env: str) -> str | None:
    """verl's own Hydra config directory (`verl/trainer/config`) in the environment, or None."""
    site = site_packages(env)
    path = os.path.join(site, "verl", "trainer", "config") if site else None
    return path if path and os.path.isfile(os.path.join(path, "ppo_trainer.yaml")) else None


def missing(env: str) -> list[str]:
    """What the environment lacks for a run (empty: usable)."""
    if not os.path.exists(python_of(env)):
        return [python_of(env)]
    out = [] if config_dir(env) else ["verl (site-packages/verl/trainer/config/ppo_trainer.yaml)"]
    for dist, why in (("TransferQueue", "the verl-core extra"), ("ray", "Ray"), ("hydra-core", "Hydra")):
        if package_version(env, dist) is None:
            out.append(f"{dist} ({why})")
    return out


def rollout_engines(env: str) -> list[str]:
    """The rollout engines installed in the environment (verl's rollouts need one on a GPU/NPU)."""
    return [name for name, dist in ROLLOUT_DISTRIBUTIONS.items() if package_version(env, dist)]


DEVICE_ENV = "AF_VERL_DEVICE"  # npu: install over the Ascend image's torch_npu / vLLM / vLLM-Ascend
NPU_PACKAGES = ("torch_npu", "vllm", "vllm_ascend")  # what the image brings (import names)


def npu_install_steps(environ: Mapping[str, str]) -> list[InstallStep]:
    """verl over the Ascend image (module docstring): a venv seeing the image's site-packages, verl with
    its verl-core extra, a check that torch_npu, vLLM and vLLM-Ascend import from it."""
    env = ENV.default(environ)
    py, marker = python_of(env), os.path.join(env, MARKER)
    pip = (py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    record = (
        "import importlib.metadata as m, importlib.util as u, pathlib, sys, transfer_queue; "
        f"lacking = [n for n in {NPU_PACKAGES!r} if u.find_spec(n) is None]; "
        "sys.exit('the Ascend image lacks ' + ', '.join(lacking) + ': install them as verl\\'s Ascend quick "
        "start says, then run install.sh again') if lacking else None; "
        f"v = m.version('verl'); pathlib.Path({marker!r}).write_text(v + '\\n'); "
        "print('verl', v, 'in', sys.prefix, 'over the Ascend image')"
    )
    return [
        InstallStep(
            "create the verl environment over the Ascend image's packages",
            (sys.executable, "-m", "venv", "--system-site-packages", env),
            skip_if_exists=marker,
        ),
        InstallStep(
            f"install verl[{EXTRA}]=={VERSION} (torch, torch_npu, vLLM, vLLM-Ascend: the image's)",
            (*pip, f"verl[{EXTRA}]=={VERSION}"),
            skip_if_exists=marker,
        ),
        InstallStep(
            "check torch_npu, vLLM and vLLM-Ascend import", (py, "-c", record), skip_if_exists=marker
        ),
        *ENV.tracker_steps(environ),
    ]


def install_steps(environ: Mapping[str, str]) -> list[InstallStep]:
    """A venv of its own with the pinned verl (skipped entirely once the marker is written), then the
    tracker clients AF_TRACKERS names. On Ascend (`AF_VERL_DEVICE=npu`): `npu_install_steps`."""
    if environ.get(DEVICE_ENV) == "npu":
        return npu_install_steps(environ)
    torch_spec = environ.get("AF_TORCH_SPEC", "torch==2.13.0")
    py, marker = python_of(ENV.default(environ)), os.path.join(ENV.default(environ), MARKER)
    pip = (py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    # `import verl` takes 6-17 s (torch, transformers); the version comes from the package metadata.
    record = (
        "import importlib.metadata as m, pathlib, sys, transfer_queue; v = m.version('verl'); "
        f"pathlib.Path({marker!r}).write_text(v + '\\n'); print('verl', v, 'in', sys.prefix)"
    )
    what = f"install verl[{EXTRA}]=={VERSION}, keeping {torch_spec}"
    steps = ENV.install_steps(environ, (what, (*pip, torch_spec, f"verl[{EXTRA}]=={VERSION}")), record)
    return [*steps, *ENV.tracker_steps(environ)]


def checks(environ: Mapping[str, str], accelerator: str) -> list[Check]:
    """`doctor --backend verl`: the environment, verl and its pins, a rollout engine, an accelerator."""
    env, source = find_env(None, environ)
    lacking = missing(env)
    out = ENV.package_checks(env, source, lacking, ("verl", "ray", "transformers", "torch"))
    if lacking:
        return out
    engines = rollout_engines(env)
    out.append(
        Check(
            "rollout engine",
            "ok" if engines else "missing",
            ", ".join(engines)
            if engines
            else "none of vllm, sglang, tensorrt_llm in the verl environment: verl's rollouts need one "
            "(vllm + vllm-ascend on NPU, vllm or sglang on GPU)",
        )
    )
    if accelerator == "npu" and engines and package_version(env, "vllm_ascend") is None:
        out.append(
            Check("vllm-ascend", "missing", "vLLM on Ascend needs vllm-ascend in the verl environment")
        )
    if accelerator == "npu" and package_version(env, "torch_npu") is None:
        out.append(
            Check(
                "torch_npu",
                "missing",
                "verl finds Ascend NPUs through torch_npu (verl/plugin/platform/platform_npu.py): install "
                "it in the verl environment, or AF_VERL_DEVICE=npu sh install.sh verl over the Ascend image",
            )
        )
    out.append(
        Check(
            "accelerator for verl",
            "ok" if accelerator in ("npu", "cuda") else "missing",
            accelerator
            if accelerator in ("npu", "cuda")
            else "none: verl 0.9.1 has no CPU platform and its rollouts need vLLM/SGLang on a GPU or NPU "
            "(train --dry-run still validates everything here)",
        )
    )
    return out
