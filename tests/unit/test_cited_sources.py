"""Comments and docs cite sources a reader can open: an upstream file at a tag, a public page, or a page of
this repository (`docs/sources.md` for the product documents). Never a document outside the repository: the
working notes' `shared/` folder, its numbered product captures ("seed 001"), its spec sections or reviews."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = (
    "ascendfactory",
    "tests",
    "scripts",
    "benchmarks",
    "docs",
    ".ci",
    "README.md",
    "install.sh",
    "pyproject.toml",
)
SUFFIXES = {".py", ".md", ".txt", ".toml", ".yaml", ".yml", ".j2", ".sh", ".cfg", ""}

# Built from pieces, so that this file does not match itself.
UNOPENABLE = re.compile(
    "|".join(
        [
            r"\bshared/(?:spec|seeds|reviews|logs|gpu|hooks|DESIGN|STYLE)",
            r"/work/(?:shared|notes)",
            r"\bseed" + r" 00\d\b",
            r"\bspec" + r" section\b",
            r"\bspec" + r"/\w+\.(?:md|txt)",
            r"\bthe " + r"review's\b",
            r"\barchitecture " + r"review\b",
            r"\breviews" + r"/\w+",
        ]
    ),
    re.IGNORECASE,
)


def tracked_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *SCANNED], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    this = Path(__file__).resolve()  # its examples are the pattern's own test cases
    return [
        ROOT / f
        for f in out.split("\0")
        if f and Path(f).suffix in SUFFIXES and (ROOT / f).is_file() and (ROOT / f).resolve() != this
    ]


def offences(text: str) -> list[str]:
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if UNOPENABLE.search(line)]


def test_no_reference_to_documents_outside_the_repository():
    found = []
    for path in tracked_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{path.relative_to(ROOT)}:{hit}" for hit in offences(text)]
    assert not found, (
        "cite an upstream file at a tag, a public page or docs/sources.md instead:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "line",
    [
        "# the output tree (seed 000)",
        '"""Megatron resume semantics (spec section 5)."""',
        "# see shared/spec/verl_cpu_run.md, section 3",
        "copied from /work/shared/logs",
        "the review's exercise",
    ],
)
def test_the_pattern_catches_each_form(line):
    assert offences(line)


def test_cited_anchors_of_docs_pages_exist():
    """`docs/<page>.md#anchor` in a comment names a heading of that page (GitHub's anchor rule)."""
    cited = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
    missing = []
    for path in tracked_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for page, anchor in cited.findall(text):
            target = ROOT / "docs" / page
            headings = target.read_text().splitlines() if target.exists() else []
            slugs = {
                re.sub(r"[^\w\- ]", "", h.lstrip("#").strip().lower()).replace(" ", "-")
                for h in headings
                if h.startswith("#")
            }
            if anchor not in slugs:
                missing.append(f"{path.relative_to(ROOT)}: docs/{page}#{anchor}")
    assert not missing, missing
    assert (ROOT / "docs" / "sources.md").exists()
