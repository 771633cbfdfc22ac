"""The one registry type: folding, aliases, one error type with the valid names and the nearest one, lazy
plugin loading, and the step-program contract that forbids every part of the package."""

from __future__ import annotations

import pkgutil
import sys

import pytest
import tomllib

import ascendfactory
from ascendfactory import registry
from ascendfactory.errors import ConfigError
from ascendfactory.registry import Registry, RegistryError
from tests.conftest import REPO


def test_names_fold_case_dashes_and_underscores_and_aliases_find_the_entry():
    r: Registry[str] = Registry("thing", key="--thing", how="register_thing")
    r.register("Mind-Speed", "a", aliases=("ms",))
    assert r.find("mind_speed") == "a" and r.find(" MIND-SPEED ") == "a" and r.find("MS") == "a"
    assert r.canonical("mind_speed") == "Mind-Speed"
    assert r.names() == ["Mind-Speed"]


def test_the_same_entry_again_is_a_no_op_and_another_entry_under_a_taken_spelling_is_refused():
    r: Registry[object] = Registry("thing", key="--thing", how="register_thing")
    entry = object()
    r.register("one", entry, aliases=("uno",))
    r.register("one", entry, aliases=("uno",))
    with pytest.raises(RegistryError, match="'UNO' is already registered") as e:
        r.register("two", object(), aliases=("UNO",))
    assert isinstance(e.value, ConfigError)
    assert r.names() == ["one"]


def test_an_unknown_name_is_one_error_naming_the_key_the_valid_names_and_the_nearest(monkeypatch):
    monkeypatch.setattr(registry, "_plugins_loaded", True)
    r: Registry[int] = Registry("log format", key="--format", how="register_format")
    r.register("megatron", 1)
    r.register("verl", 2)
    with pytest.raises(RegistryError) as e:
        r.get("megatorn", source="command line", hint=" (or leave it out)")
    (problem,) = e.value.problems
    assert problem.key == "--format" and problem.source == "command line"
    assert problem.message == "unknown log format 'megatorn' (did you mean: megatron?)"
    assert problem.fix == "use one of: megatron, verl (or leave it out)"


def test_a_miss_asks_locate_then_the_plugins_and_a_list_imports_everything_once(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    monkeypatch.setattr(registry, "load_plugins", lambda: calls.append("plugins"))
    r: Registry[int] = Registry(
        "thing",
        key="k",
        how="h",
        locate=lambda name: calls.append(f"locate {name}"),
        everything=lambda: calls.append("everything"),
    )
    r.register("built-in", 1)
    assert r.find("built-in") == 1 and calls == []  # a hit loads nothing
    assert r.find("elsewhere") is None
    assert calls == ["locate elsewhere", "plugins"]
    r.names()
    r.names()
    assert calls == ["locate elsewhere", "plugins", "everything", "plugins"]


def test_a_plugin_that_fails_to_load_is_named_with_its_distribution(monkeypatch):
    class Broken:
        name, value, dist = "broken", "no_such_module_af", type("D", (), {"name": "af-broken"})()

        def load(self):
            raise ModuleNotFoundError("No module named 'no_such_module_af'")

    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [Broken()])
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    with pytest.raises(RegistryError) as e:
        registry.load_plugins()
    (problem,) = e.value.problems
    assert problem.key == "plugin broken" and "af-broken" in problem.message
    assert "pip uninstall af-broken" in problem.fix


def test_step_programs_may_import_no_part_of_the_package():
    """The import contract forbids every top-level module and subpackage, so a new one is covered too."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (contract,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if "ascendfactory.programs" in c.get("source_modules", ())
    ]
    parts = {f"ascendfactory.{m.name}" for m in pkgutil.iter_modules(ascendfactory.__path__)}
    assert set(contract["forbidden_modules"]) == parts


def test_registering_a_backend_twice_under_one_name_is_refused():
    from ascendfactory.backends.base import Backend
    from ascendfactory.backends.registry import BACKENDS, register_backend

    class One(Backend):
        name = "test-twice"

    class Two(Backend):
        name = "test_twice"

    register_backend(One)
    try:
        register_backend(One)  # the same class again: a no-op
        with pytest.raises(RegistryError, match="already registered"):
            register_backend(Two)
    finally:
        BACKENDS.unregister("test-twice")


def test_a_backend_name_is_folded_to_its_registered_spelling(tmp_path):
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.backends.registry import directory
    from ascendfactory.config.load import load_experiment

    quick = REPO / "cfgs" / "quickstart.yaml"
    loaded = load_experiment(quick, ["--backend=TORCH"], backends=directory())
    assert loaded.config.backend == "torch"
    loaded = load_experiment(quick, ["--backend=Torch", f"--af_output_dir={tmp_path}"])
    assert make_plan(loaded, dry_run=True).backend == "torch"


def test_in_tree_backends_register_only_themselves_so_logs_needs_no_backend_import():
    """Formats, formulas and schemes of this package are the house modules' built-ins: `logs` finds every
    one without importing a backend (a plugin's come with its entry point)."""
    import subprocess

    code = """
import ascendfactory.checkpoints as c
import ascendfactory.metrics.formats as f
import ascendfactory.metrics.throughput as t
from ascendfactory import registry
registry._plugins_loaded = True
before = [sorted(r.registered()) for r in (f.FORMATS, t.FORMULAS, c.SCHEMES)]
from ascendfactory.backends.registry import all_backends
all_backends()
after = [sorted(r.registered()) for r in (f.FORMATS, t.FORMULAS, c.SCHEMES)]
print(before == after, after)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True"), done.stdout


def test_the_top_level_help_reads_no_plugin_metadata_and_no_scheduler():
    """`ascendfactory-cli --help` lists `submit` by its help line: no scheduler's models are imported and no
    distribution's metadata is read for it (plugins are read when `submit` itself runs)."""
    import subprocess

    code = """
import sys
from ascendfactory.cli.app import main
try:
    main(["--help"])
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.startswith(("ascendfactory.submit", "importlib.metadata"))))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
