"""docs/architecture.md is the map a newcomer trusts: every package of `ascendfactory/` is named in it, and
every path it names exists (paths are relative to `ascendfactory/` or to the repository root)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ascendfactory"
MAP = ROOT / "docs" / "architecture.md"


def packages() -> list[str]:
    """Every package below `ascendfactory/` (a folder with an `__init__.py`), relative, ending in `/`."""
    return sorted(
        f"{init.parent.relative_to(PACKAGE).as_posix()}/"
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE and "__pycache__" not in init.parts
    )


def named_paths(text: str) -> list[str]:
    """The paths the page names in backticks: tokens whose first part is a folder or module of the package or
    of the repository (output-tree names such as `logs/` are the tree's, not the repository's)."""
    tops = {p.name for p in PACKAGE.iterdir()} | {p.name for p in ROOT.iterdir()}
    found = []
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.split("(")[0].rstrip(".,:;")
        if "/" not in token or any(c in token for c in "<>{}*$=") or token.startswith(("-", "http")):
            continue
        if token.split("/")[0] in tops:
            found.append(token)
    return found


def exists(token: str) -> bool:
    for base in (PACKAGE, ROOT):
        if (base / token).exists():
            return True
        # `backends/planner.unregistered_names`: a module and a name in it
        head, _, last = token.rpartition("/")
        module = last.split(".")[0]
        if (base / head / f"{module}.py").exists():
            return True
    return False


def test_every_package_is_on_the_map():
    text = MAP.read_text()
    missing = [p for p in packages() if f"`{p}" not in text and f"{p}`" not in text and f" {p}" not in text]
    assert not missing, f"packages not named in docs/architecture.md: {missing}"


def test_every_path_on_the_map_exists():
    missing = [t for t in named_paths(MAP.read_text()) if not exists(t)]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_map_finds_what_it_checks():
    """The two checks above look at something: the package has its known subpackages and the page names
    paths, and a made-up package or path would be reported."""
    assert {"backends/", "engine/train/moe/", "trackers/", "memory/"} <= set(packages())
    assert len(named_paths(MAP.read_text())) > 50
    assert not exists("backends/no_such_module.py") and exists("backends/planner.unregistered_names")


# A role's older file names (docs/architecture.md, "One file name per role"): a backend package that brings
# one back has two names for one role.
OLD_ROLE_NAMES = {
    "site.py": "environment.py",
    "run.py": "read.py",
    "args": "keys/",
    "facts": "keys/",
    "layout.py": "tree.py",
}


def backend_packages() -> list[Path]:
    backends = PACKAGE / "backends"
    tops = [p for p in backends.iterdir() if (p / "__init__.py").exists() and p.name != "common"]
    return sorted(tops + [p for p in (backends / "common").iterdir() if (p / "__init__.py").exists()])


def test_every_backend_names_a_role_one_way():
    found = [
        f"{package.relative_to(PACKAGE).as_posix()}/{old} (use {new})"
        for package in backend_packages()
        for old, new in OLD_ROLE_NAMES.items()
        if (package / old).exists()
    ]
    assert len(backend_packages()) >= 9  # the six backends and the three toolkits: the check looks somewhere
    assert not found, f"a role under an older name: {found}"
