"""`doctor` names the right packages and install commands; `models` stays readable in 80 columns."""

from __future__ import annotations

from ascendfactory.backends.environment import module_check
from ascendfactory.backends.registry import get_backend
from ascendfactory.cli import _output
from ascendfactory.cli.app import main
from ascendfactory.config.catalog import load_catalog


def test_a_missing_module_names_its_pypi_package(monkeypatch):
    import importlib.util

    rl, llm, mm = (get_backend(b) for b in ("mindspeed-rl", "mindspeed-llm", "mindspeed-mm"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # nothing installed
    missing = {c.name: c.detail for c in rl.checks({}) if c.status != "ok"}
    assert missing["python: hydra"] == "pip install hydra-core"
    assert module_check("ray").detail == "pip install ray"
    for backend in (llm, mm):
        checks = {c.name: c.detail for c in backend.checks({})}
        assert checks["python: mindspeed"].startswith(f"sh install.sh {backend.name}")


def test_models_is_readable_in_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(_output.out, "_console", None)
    assert main(["models"]) == 0
    printed = capsys.readouterr().out
    monkeypatch.setattr(_output.out, "_console", None)
    table = [line for line in printed.splitlines() if line.startswith(("│", "┃", "┏", "└"))]
    assert table and all(len(line) <= 80 for line in table)
    for name, facts in load_catalog().items():
        assert any(f"│ {name} " in line and f" {facts['max_pos']} " in line for line in table), name
