"""Our checks against LLaMA-Factory's and verl's own validators on a seeded sample of generated experiments
(the full comparison: benchmarks/diff_validate.py). Runs where the framework's environment is installed
(`sh install.sh llamafactory verl`); about a minute for both."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diffval.backends import ADAPTERS
from tests.diffval.judge import assert_agrees, run_backend, stricter_rules

pytestmark = pytest.mark.integration

SAMPLE = {"llamafactory": 60, "verl": 12}  # cases; verl composes ~1 s per case here, LLaMA-Factory ~0.2 s


@pytest.mark.parametrize("backend", sorted(SAMPLE))
def test_we_never_accept_what_the_framework_refuses(backend: str, tmp_path: Path) -> None:
    if ADAPTERS[backend].worker() is None:
        pytest.skip(f"{backend}'s environment is not installed (sh install.sh {backend})")
    report = run_backend(backend, cases=SAMPLE[backend], seed=7, workdir=tmp_path)
    assert_agrees(report, SAMPLE[backend])


def test_the_stricter_rules_table_is_read() -> None:
    rules = stricter_rules()
    assert {r.backend for r in rules} >= {"llamafactory"}
    cutoff = next(r for r in rules if "cutoff_len" in r.keys and "positive" in r.words)
    assert cutoff.covers(
        "llamafactory", "backend_config.training.cutoff_len", "0 is not a positive count (x)"
    )
    assert not cutoff.covers(
        "llamafactory", "backend_config.training.lora_alpha", "0 is not a positive count"
    )
    assert not cutoff.covers("verl", "backend_config.training.cutoff_len", "0 is not a positive count")


def test_verls_check_step_passes_our_plan_and_refuses_what_validate_config_refuses(tmp_path: Path) -> None:
    import subprocess

    from tests.diffval.cases import Case
    from tests.diffval.ours import verdict

    adapter = ADAPTERS["verl"]
    if adapter.worker() is None:
        pytest.skip("verl's environment is not installed (sh install.sh verl)")
    base = adapter.bases(tmp_path)[0]
    ours = verdict(Case("base", base.name, base.tree), tmp_path, dry_run=True)
    check = ours.plan.step("check")
    python, program = adapter.worker()[0], check.argv[1]
    overrides = adapter.payload(ours.plan)
    assert check.argv[2:] == overrides
    good = subprocess.run([python, program, *overrides], capture_output=True, text=True, timeout=600)
    assert good.returncode == 0 and "validate_config passed" in good.stdout, good.stdout + good.stderr
    bad = [o if not o.startswith("data.train_batch_size=") else "data.train_batch_size=3" for o in overrides]
    done = subprocess.run([python, program, *bad], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2 and "must be divisible by" in done.stdout, done.stdout + done.stderr
