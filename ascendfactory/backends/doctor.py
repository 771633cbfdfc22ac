"""The records a backend's `doctor` checks return (`Check`) and the checks several backends share (a module
imports, the Ascend toolkit). `ascendfactory.features.doctor` runs them with the generic checks around."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass

ASCEND_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"


@dataclass
class Check:
    name: str
    status: str  # ok | missing | warn | info
    detail: str
    required: bool = True

    def row(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status, "detail": self.detail}


# import name -> PyPI name, where they differ
PIP_NAMES = {"hydra": "hydra-core", "torch_npu": "torch-npu", "yaml": "pyyaml"}


def module_check(name: str, required: bool = True, *, fix: str | None = None) -> Check:
    """Whether `name` imports here; `fix`: how to get it (default `pip install <its PyPI name>`; a
    framework that only `install.sh` installs right says `sh install.sh <backend>`)."""
    found = importlib.util.find_spec(name) is not None
    return Check(
        f"python: {name}",
        "ok" if found else ("missing" if required else "warn"),
        "importable" if found else (fix or f"pip install {PIP_NAMES.get(name, name)}"),
        required,
    )


def ascend_toolkit_status(
    environ: Mapping[str, str] | None = None, set_env: str | None = None
) -> tuple[bool, str]:
    """(sourced?, detail). Sourced means ASCEND_TOOLKIT_HOME is set (set_env.sh exports it)."""
    environ = os.environ if environ is None else environ
    set_env = set_env or ASCEND_SET_ENV
    home = environ.get("ASCEND_TOOLKIT_HOME")
    if home:
        return True, f"ASCEND_TOOLKIT_HOME={home}"
    if os.path.exists(set_env):
        return False, f"installed but not sourced: run `source {set_env}`"
    return False, f"{set_env} not found: install the CANN toolkit, then source its set_env.sh"


def ascend_checks(environ: Mapping[str, str], *, torch_npu_required: bool) -> list[Check]:
    """The CANN toolkit environment and torch_npu (the Ascend backends, and any backend on an NPU)."""
    ok, detail = ascend_toolkit_status(environ)
    return [
        Check("Ascend toolkit", "ok" if ok else "missing", detail),
        module_check("torch_npu", required=torch_npu_required),
    ]
