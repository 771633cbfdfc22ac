"""The output tree is decided in one place (`ascendfactory/output_tree.py`): no other module spells its
names, and every backend's plan puts its files where the tree says (tests/unit/backends/
test_registered_names.py checks each plan)."""

from __future__ import annotations

import ast
from pathlib import Path

from ascendfactory import output_tree
from tests.conftest import REPO

NAMES = {
    output_tree.EXP_CONFIG,
    output_tree.LOSS_PLOT,
    output_tree.CHECKPOINTS,
    output_tree.RECORDS,
    output_tree.SUMMARY,
    output_tree.SUBMIT_RECORD,
    "runs.json",
}


def spelled(path: Path) -> list[str]:
    """The tree's names written as whole string constants in `path` (docstrings and messages that mention
    a path in words are prose, not a path the code builds)."""
    return [
        f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES
    ]


def test_no_module_but_the_tree_spells_its_names():
    found = [
        hit
        for path in sorted((REPO / "ascendfactory").rglob("*.py"))
        if path.name != "output_tree.py"
        for hit in spelled(path)
    ]
    assert found == []


def test_the_tree_names_each_path_once(tmp_path):
    tree = output_tree.OutputTree(str(tmp_path))
    paths = [
        tree.exp_config,
        tree.logs_dir,
        tree.loss_plot,
        tree.saved_checkpoints,
        tree.tensorboard_dir,
        tree.trackers(),
        tree.runs_file,
        tree.manifest_dir,
        tree.summary,
        tree.submit_record,
        tree.submitted("slurm.sbatch"),
    ]
    assert len(set(paths)) == len(paths) and all(p.startswith(str(tmp_path)) for p in paths)
