"""Every cross-flag rule of `backends/mindspeed_llm/rules.py`, judged by the MindSpeed-LLM version it is
written for (opt-in: the framework checkouts of tests/diffval/backends.py).

For each version (2.1.0: `AF_MINDSPEED_LLM_DIR` + `AF_MINDSPEED_DIR`; 26.1.0: `AF_MINDSPEED_LLM_26_DIR` +
`AF_MINDSPEED_26_DIR`) and each rule key, the unit test's example is applied to that version's shipped
template (the demo model) and planned: where the version has the rule, its example must be refused by both
us and the framework; its fix, and the 2.1.0 example of a rule 26.1.0 dropped, must get the same verdict
from both (accepted, or refused by both for a flag of the template the fix keeps). So a rule the framework
does not enforce, or enforces differently, fails here, per version.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.diffval.backends import ADAPTERS
from tests.diffval.cases import DELETE, Case, Mutation, apply
from tests.diffval.judge import judge_cases
from tests.unit.backends.mindspeed_llm.test_mindspeed_llm_rules import EXAMPLES, EXAMPLES_26, RULES, example

pytestmark = pytest.mark.integration

ADAPTER = {"2.1.0": "mindspeed-llm", "26.1.0": "mindspeed-llm@26.1.0"}
# Examples whose bad flags the plan itself repairs (it fills save-interval from train-iters)
PLAN_FILLS = ("save-interval",)


def cases(version: str, base_name: str, tree: dict) -> list[tuple[Case, bool]]:
    """(case, whether the framework must refuse it) for every rule key."""
    out = []
    for key in sorted({r.key for r in RULES} - set(PLAN_FILLS)):
        found = example(key, version)
        if found:
            wanted = [("bad", found[0], True), ("good", found[1], False)]
        else:  # a rule of the other version: its bad example passes this one
            bad = (EXAMPLES.get(key) or EXAMPLES_26[key])[0]
            wanted = [("other-version", bad, False)]
        for label, change, refused in wanted:
            case = Case(id=f"{key}|{label}", base=base_name, tree=copy.deepcopy(tree))
            for k, v in change.items():
                mutation = Mutation(("backend_config", "training", k), DELETE if v is None else v, label)
                apply(case.tree, mutation)
                case.mutations.append(mutation)
            out.append((case, refused))
    return out


@pytest.mark.parametrize("version", sorted(ADAPTER))
def test_each_rule_holds_in_the_versions_it_names(version: str, tmp_path: Path) -> None:
    adapter = ADAPTERS[ADAPTER[version]]
    if adapter.worker() is None:
        pytest.skip(f"{version}: {adapter.unavailable()}")
    bases = adapter.bases(tmp_path)
    base = bases[0]
    wanted = cases(version, base.name, base.tree)
    report = judge_cases(ADAPTER[version], [c for c, _ in wanted], tmp_path, bases=bases)
    refused = {c.id: r for c, r in wanted}
    wrong = []
    for row in report.rows:
        if row.cell == "undecided":
            continue
        if refused[row.case.id] and row.cell != "both_refuse":
            wrong.append(f"want both_refuse: {row.cell}: {row.line()}")
        elif row.cell in ("we_accept_only", "we_refuse_only"):
            wrong.append(f"verdicts differ: {row.cell}: {row.line()}")
    assert not wrong, "\n".join(wrong)
    assert not report.mismatched_payloads, report.mismatched_payloads
