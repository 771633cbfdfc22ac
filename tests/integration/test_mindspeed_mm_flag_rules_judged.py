"""Every rule of `backends/mindspeed_mm/flag_rules.py`, judged by MindSpeed-MM 2.1.0 itself (opt-in: the
checkouts `AF_MINDSPEED_MM_DIR` and `AF_MINDSPEED_MM_MINDSPEED_DIR` of tests/diffval/backends.py).

Each rule's unit example is applied to the shipped Qwen2.5-VL-7B template: the framework's judge
(tests/diffval/workers/mm_worker.py) and our dry run must both refuse it, and both accept it with the fix
applied. So a rule MindSpeed-MM does not enforce, or a fix it refuses, fails here.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ascendfactory.backends.mindspeed_mm.flag_rules import ENV
from ascendfactory.backends.mindspeed_mm.keys import preset_name, presets
from ascendfactory.backends.mindspeed_mm.read import example_flags
from tests.diffval.backends import ADAPTERS, MM_MODEL
from tests.diffval.cases import DELETE, Case, Mutation, apply
from tests.diffval.judge import judge_cases
from tests.unit.backends.mindspeed_mm.test_mindspeed_mm_flag_rules import EXAMPLES, example

pytestmark = pytest.mark.integration


def path_of(key: str) -> tuple[str, ...]:
    return ("env", key.removeprefix(ENV)) if key.startswith(ENV) else ("backend_config", "training", key)


def removed(key: str) -> object:
    """The unit examples' OFF (the flag gone) as an experiment writes it: `false` for a flag the example
    script gives (a deleted key falls back to the example's value), the key deleted otherwise."""
    preset = presets("2.1.0")["models"][preset_name(MM_MODEL, None, "2.1.0")]
    return False if key in example_flags(preset).merged() else DELETE


def test_each_rule_is_mindspeed_mm_s_and_its_fix_passes(tmp_path: Path) -> None:
    adapter = ADAPTERS["mindspeed-mm"]
    if adapter.worker() is None:
        pytest.skip(adapter.unavailable())
    bases = adapter.bases(tmp_path)
    base = bases[0]
    wanted = []
    for name in sorted(EXAMPLES):
        bad, good = example(name)
        for label, change, refused in (("bad", bad, True), ("good", good, False)):
            case = Case(id=f"{name}|{label}", base=base.name, tree=copy.deepcopy(base.tree))
            for k, v in change.items():
                mutation = Mutation(path_of(k), removed(k) if v is None else v, label)
                apply(case.tree, mutation)
                case.mutations.append(mutation)
            wanted.append((case, refused))
    report = judge_cases("mindspeed-mm", [c for c, _ in wanted], tmp_path, bases=bases)
    refused = {c.id: r for c, r in wanted}
    wrong = []
    for row in report.rows:
        want = "both_refuse" if refused[row.case.id] else "both_accept"
        if row.cell != want:
            wrong.append(f"want {want}: {row.cell}: {row.line()}")
    assert not wrong, "\n".join(wrong)
    assert not report.mismatched_payloads, report.mismatched_payloads
