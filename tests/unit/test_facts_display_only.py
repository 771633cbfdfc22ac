"""`Plan.facts` is display only: outside the code that shows it, nothing reads it (the memory estimate, the
checks and the throughput read the backend's typed run, `Plan.run`, which holds what the framework will
parse). A backend and the planner may write facts; reading them back to decide anything is the split this
test keeps out (docs/architecture.md, "The plan is the contract")."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ascendfactory"
# The code that shows facts: the dry run's text, the run summary's header, the plan's JSON form.
DISPLAY = {"pipeline/render.py", "cli/train_cmd.py", "plan.py"}


def _plan_facts_reads(tree: ast.AST) -> list[int]:
    """Lines that read `<...>plan.facts` (a Load of the attribute, or of a subscript of it that is not the
    target of an assignment)."""
    stores: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and _is_plan_facts(target.value):
                    stores.add(id(target.value))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_plan_facts(node) and id(node) not in stores:
            lines.append(node.lineno)
    return sorted(lines)


def _is_plan_facts(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Attribute) and node.attr == "facts"):
        return False
    owner = node.value
    name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
    return name == "plan" or name.endswith("_plan")


def test_no_code_outside_display_reads_plan_facts():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        if rel in DISPLAY:
            continue
        for line in _plan_facts_reads(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(f"ascendfactory/{rel}:{line}")
    assert not found, (
        "plan.facts read outside display code (read the backend's typed run instead): " + ", ".join(found)
    )


def test_the_scan_sees_a_read_and_lets_a_write_pass():
    src = (
        "x = plan.facts.get('tp')\nplan.facts['a'] = 1\nself.plan.facts['b'] = 2\ny = self.plan.facts['tp']\n"
    )
    assert _plan_facts_reads(ast.parse(src)) == [1, 4]
