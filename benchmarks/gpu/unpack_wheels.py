"""Unpack the carried wheels that fit this interpreter into a folder put first on PYTHONPATH (what
`pip install --no-deps --target` lays out, without needing pip in the device's venv).

    python benchmarks/gpu/unpack_wheels.py SITE WHEEL_DIR [WHEEL_DIR ...]

A wheel fits when its tags take this CPython (cpXY, abi3 up to XY, or pyN-none-any) on linux x86_64; of
several fitting versions of one project the newest is unpacked. Prints what went in; exit 1 when none fit.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path


def fits(name: str) -> bool:
    py, abi, plat = name[:-4].split("-")[-3:]
    here = f"cp{sys.version_info.major}{sys.version_info.minor}"
    pys = py.split(".")
    if plat != "any" and "x86_64" not in plat:
        return False
    if abi == "none":
        return "py3" in pys or here in pys
    if abi == "abi3":
        return any(p.startswith("cp3") and int(p[3:] or 0) <= sys.version_info.minor for p in pys)
    return here in pys


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def main(argv: list[str]) -> int:
    site, dirs = Path(argv[0]), [Path(d) for d in argv[1:]]
    best: dict[str, Path] = {}
    for d in dirs:
        for whl in sorted(d.glob("*.whl")) if d.is_dir() else []:
            project, version = whl.name.split("-")[:2]
            key = re.sub(r"[-_.]+", "_", project).lower()
            if fits(whl.name) and (
                key not in best or version_key(version) > version_key(best[key].name.split("-")[1])
            ):
                best[key] = whl
    site.mkdir(parents=True, exist_ok=True)
    for whl in best.values():
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
        print(f"unpacked {whl.name}")
    if not best:
        print(f"no wheel fits {sys.version.split()[0]} in {', '.join(map(str, dirs))}", file=sys.stderr)
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
