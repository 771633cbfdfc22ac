"""`doctor`: what this machine has and lacks for a backend, and each backend's installation steps as data."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass

from ascendfactory.config.devices import detect_accelerator, resolve_devices_per_node


@dataclass
class Check:
    name: str
    status: str  # ok | missing | warn | info
    detail: str
    required: bool = True

    def row(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status, "detail": self.detail}


def _module(name: str, required: bool = True) -> Check:
    found = importlib.util.find_spec(name) is not None
    return Check(f"python: {name}", "ok" if found else ("missing" if required else "warn"),
                 "importable" if found else f"pip install {name}", required)


def _free_port(port: int) -> Check:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return Check(f"port {port}", "ok", "free (default MASTER_PORT)", required=False)
        except OSError:
            return Check(f"port {port}", "warn", "in use: set env.MASTER_PORT to a free port", required=False)


def run_checks(backend: str = "torch") -> list[Check]:
    checks = [Check("python", "ok", sys.version.split()[0])]
    kind = detect_accelerator()
    devices = resolve_devices_per_node(None)
    checks.append(Check("accelerator", "info", f"{kind}; devices per node: {devices.count} ({devices.source})",
                        required=False))
    if backend == "torch":
        checks += [_module(m) for m in ("torch", "transformers", "safetensors", "tokenizers", "numpy")]
        checks += [_module(m, required=False) for m in ("matplotlib", "tensorboard", "psutil")]
    if backend in ("mindspeed-llm", "mindspeed-rl", "mindspeed-mm") or kind == "npu":
        home = os.environ.get("ASCEND_TOOLKIT_HOME")
        set_env = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
        if home:
            checks.append(Check("Ascend toolkit", "ok", f"ASCEND_TOOLKIT_HOME={home}"))
        else:
            checks.append(Check("Ascend toolkit", "missing",
                                f"not sourced: run `source {set_env}`" if os.path.exists(set_env)
                                else f"{set_env} not found: install CANN, then source it"))
        checks.append(_module("torch_npu", required=kind == "npu"))
    if backend == "mindspeed-llm":
        d = os.environ.get("AF_MINDSPEED_LLM_DIR")
        ok = bool(d) and os.path.isfile(os.path.join(d, "posttrain_gpt.py"))
        checks.append(Check("MindSpeed-LLM checkout", "ok" if ok else "missing",
                            d if ok else "set AF_MINDSPEED_LLM_DIR (or scripts_dir) to the MindSpeed-LLM "
                            "directory; `sh install.sh mindspeed-llm` clones it"))
    if backend in ("verl", "mindspeed-rl"):
        checks.append(_module("ray"))
    if backend == "llamafactory":
        checks.append(Check("llamafactory-cli", "ok" if shutil.which("llamafactory-cli") else "missing",
                            shutil.which("llamafactory-cli") or "sh install.sh llamafactory"))
    checks.append(_free_port(6000))
    usage = shutil.disk_usage(os.getcwd())
    free_gb = usage.free / 2**30
    checks.append(Check("disk (cwd)", "ok" if free_gb > 10 else "warn", f"{free_gb:.0f} GiB free", required=False))
    return checks


@dataclass(frozen=True)
class InstallStep:
    what: str
    argv: tuple[str, ...]
    cwd: str | None = None
    skip_if_exists: str | None = None  # makes re-running safe

    def display(self) -> str:
        import shlex

        cmd = shlex.join(self.argv)
        return f"(cd {self.cwd} && {cmd})" if self.cwd else cmd


# Pinned versions: MindSpeed-LLM 2.1.0 installs Megatron-LM core_r0.8.0 and MindSpeed 2.1.0_core_r0.8.0
# (MindSpeed-LLM README, "版本配套表"). Refined by the mindspeed-llm backend.
_THIRD = os.environ.get("AF_THIRD_PARTY_DIR", os.path.join(os.path.expanduser("~"), ".ascendfactory", "third-party"))
INSTALL_PLANS: dict[str, list[InstallStep]] = {
    "mindspeed-llm": [
        InstallStep("clone MindSpeed-LLM 2.1.0", ("git", "clone", "--depth", "1", "-b", "2.1.0",
                                                  "https://gitcode.com/Ascend/MindSpeed-LLM.git",
                                                  os.path.join(_THIRD, "MindSpeed-LLM")),
                    skip_if_exists=os.path.join(_THIRD, "MindSpeed-LLM")),
        InstallStep("clone Megatron-LM core_r0.8.0", ("git", "clone", "--depth", "1", "-b", "core_r0.8.0",
                                                      "https://github.com/NVIDIA/Megatron-LM.git",
                                                      os.path.join(_THIRD, "Megatron-LM")),
                    skip_if_exists=os.path.join(_THIRD, "Megatron-LM")),
        InstallStep("copy megatron/ into MindSpeed-LLM", ("cp", "-r", os.path.join(_THIRD, "Megatron-LM", "megatron"),
                                                           os.path.join(_THIRD, "MindSpeed-LLM", "")),
                    skip_if_exists=os.path.join(_THIRD, "MindSpeed-LLM", "megatron")),
        InstallStep("clone MindSpeed 2.1.0_core_r0.8.0", ("git", "clone", "--depth", "1", "-b",
                                                          "2.1.0_core_r0.8.0",
                                                          "https://gitcode.com/Ascend/MindSpeed.git",
                                                          os.path.join(_THIRD, "MindSpeed")),
                    skip_if_exists=os.path.join(_THIRD, "MindSpeed")),
        InstallStep("install MindSpeed", (sys.executable, "-m", "pip", "install", "-e", os.path.join(_THIRD, "MindSpeed"))),
        InstallStep("install MindSpeed-LLM requirements", (sys.executable, "-m", "pip", "install", "-r",
                                                           os.path.join(_THIRD, "MindSpeed-LLM", "requirements.txt"))),
    ],
    "llamafactory": [InstallStep("install LLaMA-Factory", (sys.executable, "-m", "pip", "install", "llamafactory"))],
    "verl": [InstallStep("install verl", (sys.executable, "-m", "pip", "install", "verl"))],
    "mindspeed-rl": [InstallStep("clone MindSpeed-RL", ("git", "clone", "--depth", "1",
                                                        "https://gitcode.com/Ascend/MindSpeed-RL.git",
                                                        os.path.join(_THIRD, "MindSpeed-RL")),
                                 skip_if_exists=os.path.join(_THIRD, "MindSpeed-RL"))],
    "mindspeed-mm": [InstallStep("clone MindSpeed-MM", ("git", "clone", "--depth", "1",
                                                        "https://gitcode.com/Ascend/MindSpeed-MM.git",
                                                        os.path.join(_THIRD, "MindSpeed-MM")),
                                 skip_if_exists=os.path.join(_THIRD, "MindSpeed-MM"))],
}


def install_steps(backend: str) -> list[InstallStep]:
    from ascendfactory.errors import BackendNotFoundError

    if backend not in INSTALL_PLANS:
        raise BackendNotFoundError(f"no install plan for '{backend}'; known: {', '.join(INSTALL_PLANS)}")
    return INSTALL_PLANS[backend]


def run_install(steps: list[InstallStep]) -> int:
    for step in steps:
        if step.skip_if_exists and os.path.exists(step.skip_if_exists):
            print(f"[install] {step.what}: already present ({step.skip_if_exists})", flush=True)
            continue
        print(f"[install] {step.what}: {step.display()}", flush=True)
        if step.cwd:
            os.makedirs(step.cwd, exist_ok=True)
        if step.skip_if_exists:
            os.makedirs(os.path.dirname(step.skip_if_exists.rstrip("/")), exist_ok=True)
        code = subprocess.run(list(step.argv), cwd=step.cwd, check=False).returncode
        if code:
            print(f"[install] {step.what} failed with exit code {code}", file=sys.stderr)
            return code
    return 0
