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

Nothing here imports verl: versions are read from the environment's package metadata, verl's config dir
is found by path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ascendfactory.backends.doctor import Check
from ascendfactory.backends.install import InstallStep
from ascendfactory.backends.venv import FrameworkEnv, package_version, python_of, site_packages

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


def install_steps(environ: Mapping[str, str]) -> list[InstallStep]:
    """A venv of its own with the pinned verl (skipped entirely once the marker is written), then the
    tracker clients AF_TRACKERS names."""
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
