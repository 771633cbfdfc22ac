"""The coverage maps against the frameworks at their pins (tests/diffval/coverage.py): the statements the
framework's validation code holds here are the map's (none unmapped, none stale), and CI's share of the
targeted cases (each rule's case and its fix, on one shipped template per statement, turn by turn) agrees
with the framework's own judge. LLaMA-Factory and verl run where their environments are installed
(`sh install.sh llamafactory verl`, as in CI); the Megatron family where its checkouts are named (the
harness's AF_MINDSPEED_* variables), like the other judges of that family. The full sets, every variant
on every template: `benchmarks/diff_validate.py --coverage` (and the `slow` test below)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diffval.coverage import load_map, report_lines, run_coverage
from tests.diffval.pins import MAPS, PINS

pytestmark = pytest.mark.integration


def _roots(name: str) -> list[Path]:
    roots = PINS[name].roots()
    if isinstance(roots, str):
        pytest.skip(f"{name}: {roots}")
    return roots


@pytest.mark.parametrize("name", sorted(PINS))
def test_the_frameworks_statements_are_the_maps(name: str) -> None:
    """A statement the installed framework holds that the map lacks is unmapped; one the map holds that the
    framework no longer has is stale (regenerate: python scripts/gen_validation_map.py NAME)."""
    roots = _roots(name)
    statements, files = PINS[name].walk(roots)
    doc = load_map(MAPS / f"{name}.yaml")
    here, mapped = {s.id for s in statements}, {s["id"] for s in doc["statements"]}
    differs = sorted(f for f in files if doc["files"].get(f) != files[f])
    note = f" (these files differ from the pin's: {differs})" if differs else ""
    assert not here - mapped, f"unmapped at {name}{note}: {sorted(here - mapped)}"
    assert not mapped - here, f"in the map, gone from the sources{note}: {sorted(mapped - here)}"


@pytest.mark.parametrize("name", sorted(PINS))
def test_cis_share_of_the_targeted_cases_agrees_with_the_judge(name: str, tmp_path: Path) -> None:
    _roots(name)
    doc = load_map(MAPS / f"{name}.yaml")
    cov = run_coverage(doc, tmp_path, variants=("case", "fix"), share=1)
    assert cov.runs and not cov.failed(), "\n".join(report_lines(cov))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PINS))
def test_every_targeted_case_agrees_with_the_judge(name: str, tmp_path: Path) -> None:
    _roots(name)
    cov = run_coverage(load_map(MAPS / f"{name}.yaml"), tmp_path)
    assert not cov.failed(), "\n".join(report_lines(cov))
