"""Our checks against the Megatron family's own validators, opt-in where checkouts exist (like the converter
comparison): MindSpeed-LLM 2.1.0 with Megatron-LM core_r0.8.0 (`AF_MINDSPEED_LLM_DIR` with megatron/ copied
in, `AF_MINDSPEED_DIR`), MindSpeed-LLM 26.1.0 with core_v0.12.1 (`AF_MINDSPEED_LLM_26_DIR`,
`AF_MINDSPEED_26_DIR`), MindSpeed-RL (`AF_MINDSPEED_RL_DIR`, judged in verl's python). A seeded sample here;
the full comparison is `benchmarks/diff_validate.py --backend mindspeed-llm --backend mindspeed-llm@26.1.0
--backend mindspeed-rl` (and the `slow` test below)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diffval.backends import ADAPTERS
from tests.diffval.judge import Report, assert_agrees, run_backend

pytestmark = pytest.mark.integration

BACKENDS = ("mindspeed-llm", "mindspeed-llm@26.1.0", "mindspeed-rl")
# cases: ~40 s, ~40 s and ~60 s on 2 CPU cores
SAMPLE = {"mindspeed-llm": 150, "mindspeed-llm@26.1.0": 150, "mindspeed-rl": 60}


def judged(backend: str, cases: int, seed: int, tmp_path: Path) -> Report:
    adapter = ADAPTERS[backend]
    if adapter.worker() is None:
        pytest.skip(f"{backend}: {adapter.unavailable()}")
    return run_backend(backend, cases=cases, seed=seed, workdir=tmp_path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sample_the_framework_refuses_is_refused_by_us(backend: str, tmp_path: Path) -> None:
    assert_agrees(judged(backend, SAMPLE[backend], 11, tmp_path), SAMPLE[backend])


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_full_comparison(backend: str, tmp_path: Path) -> None:
    assert_agrees(judged(backend, 2000, 0, tmp_path), 2000)


def test_the_megatron_judge_refuses_what_megatron_refuses_and_lists_its_stand_ins(tmp_path: Path) -> None:
    """The judge itself can fail: a global batch the data-parallel ranks do not divide is refused by
    Megatron's micro-batch calculator, the plan's own argv is accepted."""
    from tests.diffval.cases import Case
    from tests.diffval.judge import ask_framework
    from tests.diffval.ours import verdict

    adapter = ADAPTERS["mindspeed-llm"]
    if adapter.worker() is None:
        pytest.skip(f"mindspeed-llm: {adapter.unavailable()}")
    base = adapter.bases(tmp_path)[0]
    ours = verdict(Case("base", base.name, base.tree), tmp_path, dry_run=True)
    good = adapter.payload(ours.plan)
    bad = {**good, "argv": [*good["argv"], "--global-batch-size", "3"]}
    answers = ask_framework(adapter.worker(), [("good", good), ("bad", bad)])
    assert answers["good"] == (True, None)
    assert answers["bad"][0] is False and "not divisible by micro batch size" in str(answers["bad"][1])
    modules = [row["module"] for row in adapter.stand_ins() or []]
    assert "torch_npu" in modules and "mindspeed_llm/__init__.py" in modules
