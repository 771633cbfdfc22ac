"""The evaluation environment: lm-evaluation-harness with its Hugging Face extra, in a venv of its own
(`sh install.sh eval`; its pins, datasets and scikit-learn among them, stay out of the core and the
framework environments). Found as the framework environments are (`backends.environment.FrameworkEnv`): env
`AF_EVAL_ENV`, else `<AF_ENVS_DIR or ~/.ascendfactory/envs>/eval`.

Why lm-evaluation-harness: it installs from PyPI into a plain venv next to the CPU torch this project
pins and runs offline from local files through its own task definitions (`dataset_path: json` +
`data_files`; no hub at run time); its Hugging Face model runs on CPU, CUDA and Ascend NPUs (`--device
npu:0` through torch_npu); it carries MMLU, C-Eval and GSM8K as tasks whose prompts, few-shot sampling and
metrics we reuse unchanged, so its own `lm_eval` command on the same files gives the same accuracy
(tests/integration/test_eval_cli.py checks it). EvalScope (ModelScope's) covers the same benchmarks but
reads them through the ModelScope hub's dataset loaders by default; it was not installed here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ascendfactory.backends.environment import FrameworkEnv, InstallStep, package_version, python_of

VERSION = "0.4.13"  # lm-eval, the version the task files and tests are written against
ENV = FrameworkEnv(name="eval", label="lm-evaluation-harness", variable="AF_EVAL_ENV", version=VERSION)


def find_env(environ: Mapping[str, str]) -> tuple[str, str]:
    return ENV.find(None, environ)


def missing(env: str) -> list[str]:
    """What the environment lacks to evaluate (empty: usable)."""
    if not os.path.exists(python_of(env)):
        return [python_of(env)]
    return [
        f"{d} (lm-eval[hf])"
        for d in ("lm_eval", "transformers", "accelerate", "torch")
        if not package_version(env, d)
    ]


def install_steps(environ: Mapping[str, str]) -> list[InstallStep]:
    """A venv with the CPU torch of AF_TORCH_SPEC (a GPU/NPU machine: install its own torch first), then
    lm-eval[hf] at the pinned version; skipped once the marker is written."""
    env = ENV.default(environ)
    py, marker = python_of(env), os.path.join(env, ENV.marker)
    torch_spec = environ.get("AF_TORCH_SPEC", "torch==2.13.0")
    pip = (py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    record = (
        "import importlib.metadata as m, pathlib, sys, lm_eval, accelerate; v = m.version('lm_eval'); "
        f"pathlib.Path({marker!r}).write_text(v + '\\n'); print('lm-eval', v, 'in', sys.prefix)"
    )
    what = f"install lm-eval[hf]=={VERSION}, keeping {torch_spec}"
    return ENV.install_steps(environ, (what, (*pip, torch_spec, f"lm-eval[hf]=={VERSION}")), record)
