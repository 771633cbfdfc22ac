"""`doctor`: what this machine has and lacks for a backend, and each backend's installation steps as data."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
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


ASCEND_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"


def third_party_dir(environ: Mapping[str, str] | None = None) -> str:
    """Where install.sh clones frameworks: env AF_THIRD_PARTY_DIR, else ~/.ascendfactory/third-party."""
    environ = os.environ if environ is None else environ
    return environ.get("AF_THIRD_PARTY_DIR") or os.path.join(os.path.expanduser("~"), ".ascendfactory",
                                                             "third-party")


def mindspeed_llm_install_dir(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(third_party_dir(environ), "MindSpeed-LLM")


def ascend_toolkit_status(environ: Mapping[str, str] | None = None,
                          set_env: str | None = None) -> tuple[bool, str]:
    """(sourced?, detail). Sourced means ASCEND_TOOLKIT_HOME is set (set_env.sh exports it)."""
    environ = os.environ if environ is None else environ
    set_env = set_env or ASCEND_SET_ENV
    home = environ.get("ASCEND_TOOLKIT_HOME")
    if home:
        return True, f"ASCEND_TOOLKIT_HOME={home}"
    if os.path.exists(set_env):
        return False, f"installed but not sourced: run `source {set_env}`"
    return False, f"{set_env} not found: install the CANN toolkit, then source its set_env.sh"


def mindspeed_llm_checks(environ: Mapping[str, str] | None = None) -> list[Check]:
    """The MindSpeed-LLM checkout (AF_MINDSPEED_LLM_DIR, else the install.sh location) and its pieces."""
    environ = os.environ if environ is None else environ
    d = environ.get("AF_MINDSPEED_LLM_DIR") or mindspeed_llm_install_dir(environ)
    fix = "`sh install.sh mindspeed-llm`, or set AF_MINDSPEED_LLM_DIR (or scripts_dir) to a checkout"
    checks = [_module("mindspeed"), _module("transformers")]
    if not os.path.isfile(os.path.join(d, "posttrain_gpt.py")):
        return [*checks, Check("MindSpeed-LLM checkout", "missing", f"{d} not found: {fix}")]
    checks.append(Check("MindSpeed-LLM checkout", "ok", d))
    has_megatron = os.path.isdir(os.path.join(d, "megatron"))
    checks.append(Check("megatron/ in MindSpeed-LLM", "ok" if has_megatron else "missing",
                        "present" if has_megatron else "copy Megatron-LM core_r0.8.0's megatron/ into " + d))
    scripts = [s for s in ("convert_ckpt.py", "convert_ckpt_v2.py") if os.path.isfile(os.path.join(d, s))]
    checks.append(Check("checkpoint converters", "info" if scripts else "missing",
                        ", ".join(scripts) or "neither convert_ckpt.py nor convert_ckpt_v2.py found",
                        required=bool(not scripts)))
    return checks


def run_checks(backend: str = "torch") -> list[Check]:
    checks = [Check("python", "ok", sys.version.split()[0])]
    kind = detect_accelerator()
    devices = resolve_devices_per_node(None)
    checks.append(Check("accelerator", "info",
                        f"{kind}; devices per node: {devices.count} ({devices.source})", required=False))
    if backend == "torch":
        checks += [_module(m) for m in ("torch", "transformers", "safetensors", "tokenizers", "numpy")]
        checks += [_module(m, required=False) for m in ("matplotlib", "tensorboard", "psutil")]
    if backend in ("mindspeed-llm", "mindspeed-rl", "mindspeed-mm") or kind == "npu":
        ok, detail = ascend_toolkit_status()
        checks.append(Check("Ascend toolkit", "ok" if ok else "missing", detail))
        checks.append(_module("torch_npu", required=kind == "npu" or backend == "mindspeed-llm"))
    if backend == "mindspeed-llm":
        checks += mindspeed_llm_checks()
    if backend in ("verl", "mindspeed-rl"):
        checks.append(_module("ray"))
    if backend == "llamafactory":
        checks.append(Check("llamafactory-cli", "ok" if shutil.which("llamafactory-cli") else "missing",
                            shutil.which("llamafactory-cli") or "sh install.sh llamafactory"))
    checks.append(_free_port(6000))
    usage = shutil.disk_usage(os.getcwd())
    free_gb = usage.free / 2**30
    checks.append(Check("disk (cwd)", "ok" if free_gb > 10 else "warn", f"{free_gb:.0f} GiB free",
                        required=False))
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


_THIRD = third_party_dir()


def mindspeed_llm_plan(third: str, python: str = sys.executable) -> list[InstallStep]:
    """MindSpeed-LLM 2.1.0's documented installation (docs/pytorch/install_guide.md on branch 2.1.0).

    Pins, checked against that branch's README version table and install guide: MindSpeed at commit 2c085cc9
    (its core_r0.8.0 line, 2025-04-01), Megatron-LM core_r0.8.0 (its megatron/ copied into MindSpeed-LLM),
    MindSpeed-LLM 2.1.0. The driver, CANN 8.2.RC1, torch 2.1/2.6, torch_npu 7.1.0 and apex come with the
    Ascend image (`doctor --backend mindspeed-llm` reports what is missing). Every step is safe to re-run.
    """
    llm, megatron, mindspeed = (os.path.join(third, n) for n in ("MindSpeed-LLM", "Megatron-LM", "MindSpeed"))
    pip = (python, "-m", "pip", "install")
    return [
        InstallStep("clone MindSpeed", ("git", "clone", "https://gitcode.com/ascend/MindSpeed.git",
                                        mindspeed), skip_if_exists=mindspeed),
        InstallStep("check out MindSpeed 2c085cc9 (core_r0.8.0)",
                    ("git", "-C", mindspeed, "checkout", "2c085cc9")),
        InstallStep("install MindSpeed requirements",
                    (*pip, "-r", os.path.join(mindspeed, "requirements.txt"))),
        InstallStep("install MindSpeed", (*pip, "-e", mindspeed)),
        InstallStep("clone MindSpeed-LLM 2.1.0", ("git", "clone", "--depth", "1", "-b", "2.1.0",
                                                  "https://gitcode.com/ascend/MindSpeed-LLM.git", llm),
                    skip_if_exists=llm),
        InstallStep("clone Megatron-LM core_r0.8.0", ("git", "clone", "--depth", "1", "-b", "core_r0.8.0",
                                                      "https://github.com/NVIDIA/Megatron-LM.git", megatron),
                    skip_if_exists=megatron),
        InstallStep("copy megatron/ into MindSpeed-LLM",
                    ("cp", "-r", os.path.join(megatron, "megatron"), llm + "/"),
                    skip_if_exists=os.path.join(llm, "megatron")),
        InstallStep("install MindSpeed-LLM requirements",
                    (*pip, "-r", os.path.join(llm, "requirements.txt"))),
    ]


INSTALL_PLANS: dict[str, list[InstallStep]] = {
    "mindspeed-llm": mindspeed_llm_plan(_THIRD),
    "llamafactory": [InstallStep("install LLaMA-Factory",
                                 (sys.executable, "-m", "pip", "install", "llamafactory"))],
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
