"""The README was split into a short README and docs/ pages (issue 41): every section heading the README had
before the split is a heading of the README or of a docs/ page, every relative link of the README and the docs
resolves (file and anchor), and the README states the test command `.ci/run` runs, verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The `##` and `###` headings of README.md just before the split, in order.
HEADINGS_BEFORE_THE_SPLIT = [
    "Quickstart",
    "Commands",
    "The experiment file",
    "Experiment trackers (`report_to`)",
    "Memory before the queue",
    "Time to train before the queue",
    "Running a job",
    "On a cluster",
    "The embedded `torch` backend",
    "GRPO on the embedded backend (`stage: grpo`)",
    "The `mindspeed-llm` backend",
    "The `mindspeed-mm` backend",
    "The `llamafactory` backend",
    "The `mindspeed-rl` backend",
    "The `verl` backend",
    "verl on Ascend NPUs",
    "Checked against the frameworks' own validators",
    "Coverage maps: every check a framework makes before a device",
    "Rules stricter than the framework",
    "Logs and metrics",
    "Performance against a baseline",
    "Evaluating the trained weights",
    "Environment variables",
    "Shipped configs",
    "Plugins",
    "Development",
    "Limits",
]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def headings(path: Path) -> list[str]:
    fenced = False
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(line.lstrip("#").strip())
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_every_heading_of_the_old_readme_lands_in_a_page():
    found = {h for p in pages() for h in headings(p)}
    lost = [h for h in HEADINGS_BEFORE_THE_SPLIT if h not in found]
    assert not lost, f"sections of the old README in no page: {lost}"


def test_every_relative_link_resolves():
    broken = []
    for page in pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in {slug(h) for h in headings(dest)}:
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_states_the_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()


def test_the_checks_can_fail():
    assert slug("Experiment trackers (`report_to`)") == "experiment-trackers-report_to"
    assert "Quickstart" in HEADINGS_BEFORE_THE_SPLIT and len(HEADINGS_BEFORE_THE_SPLIT) > 15
