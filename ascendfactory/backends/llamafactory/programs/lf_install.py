"""Install LLaMA-Factory into the environment running this program, keeping its torch (install.sh).

    <env>/bin/python lf_install.py VERSION TORCH_SPEC SHIM_DIR

1. `llamafactory==VERSION` without its dependencies, then its dependencies as its wheel's metadata lists
   them, except torch (TORCH_SPEC stays: no multi-GB CUDA build replaces a CPU one), torchvision
   (optional for transformers and LLaMA-Factory; every wheel on the registry is a CUDA build that breaks
   `import transformers` models under a CPU torch) and torchaudio;
2. torchaudio: the registry's, when it imports with this torch; else the shim in SHIM_DIR (LLaMA-Factory
   imports torchaudio at module level but uses it only for audio data).
Every pip call is an argv list; a failing one stops the install with its exit code.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

LEFT_OUT = ("torch", "torchvision", "torchaudio")
# pip checks the installed llamafactory's requirements after the step above and prints `ERROR: pip's
# dependency resolver does not currently take into account ... llamafactory requires torchvision ...,
# torchaudio ...`: expected, those are left out on purpose (the module docstring).
RESOLVER_NOTE = (
    '[lf-install] note: an "ERROR: pip\'s dependency resolver ..." above that names torchvision or '
    "torchaudio is expected: they are left out on purpose (a CPU torch is kept; torchaudio comes next); "
    "nothing failed"
)


def pip(*args: str) -> None:
    argv = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check"]
    print("[lf-install]", " ".join(argv), flush=True)
    code = subprocess.run(argv, check=False).returncode
    if code:
        raise SystemExit(code)


def requirements(version: str) -> list[str]:
    """The unconditional Requires-Dist of the llamafactory wheel, minus LEFT_OUT."""
    with tempfile.TemporaryDirectory() as tmp:
        pip("download", "--quiet", "--no-deps", "--dest", tmp, f"llamafactory=={version}")
        (wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            lines = z.read(meta).decode().splitlines()
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:") or "extra ==" in line:
            continue
        spec = line.split(":", 1)[1].strip()
        name = re.split(r"[<>=!~;\s\[]", spec, maxsplit=1)[0].lower()
        if name not in LEFT_OUT:
            out.append(spec)
    return out


def torchaudio_loads() -> bool:
    return subprocess.run([sys.executable, "-c", "import torchaudio"], capture_output=True).returncode == 0


def main(argv: list[str]) -> int:
    version, torch_spec, shim = argv
    deps = requirements(version)
    pip("install", "--quiet", "--no-deps", f"llamafactory=={version}")
    pip("install", "--quiet", torch_spec, *deps)
    print(RESOLVER_NOTE, flush=True)
    pip("install", "--quiet", "--no-deps", "torchaudio")
    if not torchaudio_loads():
        print(
            "[lf-install] the registry's torchaudio does not load with this torch: using the shim", flush=True
        )
        pip("uninstall", "--quiet", "--yes", "torchaudio")
        with tempfile.TemporaryDirectory() as tmp:  # pip builds in the tree it is given: a copy
            copy = os.path.join(tmp, "torchaudio_shim")
            shutil.copytree(shim, copy)
            pip("install", "--quiet", copy)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
