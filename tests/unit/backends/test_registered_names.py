"""The contract between a plan and the open registries: every registered backend's plan names a log format,
a throughput formula and a checkpoint scheme that some module registered, and a name nobody registered is
refused at plan time (a `--dry-run`), naming the backend, instead of when the real run needs it."""

from __future__ import annotations

import dataclasses

import pytest

from ascendfactory.backends import planner
from ascendfactory.backends.registry import all_backends, get_backend
from ascendfactory.checkpoints import get_scheme
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from ascendfactory.features.templates import offered_models, render_experiment
from ascendfactory.metrics.formats import get_format
from ascendfactory.metrics.throughput import get_formula
from ascendfactory.plan import Role, ThroughputSpec
from ascendfactory.registry import RegistryError
from tests.conftest import REPO

QUICK = REPO / "cfgs" / "quickstart.yaml"


@pytest.mark.parametrize("backend", [b.name for b in all_backends()])
def test_every_backend_plans_names_that_are_registered(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("AF_VERL_ENV", str(tmp_path / "no-verl-env"))
    b = get_backend(backend)
    for exp in b.experiments():
        path = tmp_path / f"{exp}.yaml"
        model = offered_models(backend)[0]
        path.write_text(
            render_experiment(backend=backend, model_name=model, exp_name=exp, output_file=str(path))
        )
        plan = planner.make_plan(load_experiment(path, []), dry_run=True)
        assert planner.unregistered_names(plan, backend) == []
        get_format(plan.logs.format).parser()  # each name resolves to a working object
        if plan.logs.console_format:
            get_format(plan.logs.console_format).parser()
        assert get_formula(plan.logs.throughput.formula).name == plan.logs.throughput.formula
        if plan.checkpoints is not None:
            get_scheme(plan.checkpoints.scheme)
        assert_the_house_tree(plan)


def assert_the_house_tree(plan) -> None:
    """What every backend's run leaves where the house's output tree says (`ascendfactory.output_tree`)."""
    import os

    tree = plan.tree
    assert os.path.abspath(tree.exp_config) in {os.path.abspath(f) for f in plan.files}
    plot = plan.with_role(Role.PLOT)
    if plot is not None:
        assert [os.path.abspath(p) for p in plot.outputs] == [os.path.abspath(tree.loss_plot)]
    if plan.checkpoints is not None and os.path.basename(plan.checkpoints.root) == "saved_checkpoints":
        assert os.path.abspath(plan.checkpoints.root) == os.path.abspath(tree.saved_checkpoints)


class Misspelling:
    """The torch backend, but its plan names what nobody registered."""

    def __init__(self, change) -> None:
        self.inner, self.change = get_backend("torch"), change
        self.name, self.unretryable = "misspelt", ()

    def plan(self, ctx, *, strict_paths=True):
        plan = self.inner.plan(ctx, strict_paths=strict_paths)
        self.change(plan)
        return plan

    def __getattr__(self, name):  # the rest of the backend interface (trackers, memory target): torch's
        return getattr(self.inner, name)


def _logs(**changes):
    return lambda plan: setattr(plan, "logs", dataclasses.replace(plan.logs, **changes))


@pytest.mark.parametrize(
    "change,what,name",
    [
        (_logs(format="megatorn"), "log format", "megatorn"),
        (_logs(console_format="nemo_console"), "log format", "nemo_console"),
        (_logs(throughput=ThroughputSpec("nemo")), "throughput formula", "nemo"),
        (
            lambda plan: setattr(plan, "checkpoints", dataclasses.replace(plan.checkpoints, scheme="nemo")),
            "checkpoint scheme",
            "nemo",
        ),
    ],
)
def test_a_name_nobody_registered_is_refused_at_plan_time(tmp_path, monkeypatch, change, what, name):
    monkeypatch.setattr(planner, "get_backend", lambda *a, **k: Misspelling(change))
    loaded = load_experiment(QUICK, [f"--af_output_dir={tmp_path}"])
    with pytest.raises(ConfigError) as e:
        planner.make_plan(loaded, dry_run=True)
    (problem,) = e.value.problems
    assert problem.key == "backend"
    assert f"backend 'misspelt' plans {what} '{name}'" in problem.message
    assert "register" in problem.fix


def test_registering_a_taken_name_is_refused_and_a_new_one_is_found():
    from ascendfactory.metrics import formats, throughput

    megatron = formats.get_format("megatron")
    with pytest.raises(RegistryError, match="already registered"):
        formats.register_format(dataclasses.replace(megatron, name="other", aliases=("modellink",)))
    with pytest.raises(RegistryError, match="already registered"):
        throughput.register_formula(dataclasses.replace(get_formula("verl")))
    fmt = dataclasses.replace(megatron, name="test_only_format", aliases=(), priority=1000)
    try:
        formats.register_format(fmt)
        assert formats.get_format("test-only-format") is fmt
        assert formats.registered_formats()[-1] is fmt  # the lowest priority is sniffed last
    finally:
        formats.FORMATS.unregister("test_only_format")


def test_the_builtin_name_lists_are_what_the_metrics_modules_register():
    import subprocess
    import sys

    from ascendfactory.metrics import builtin
    from ascendfactory.registry import fold

    code = (
        "from ascendfactory.metrics.formats import FORMATS\n"
        "from ascendfactory.metrics.throughput import FORMULAS\n"
        "print(sorted(s for f in FORMATS._entries.values() for s in (f.name, *f.aliases)))\n"
        "print(sorted(FORMULAS._entries))"
    )  # a fresh process: the modules' own registrations, no test's or plugin's
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    formats, formulas = (eval(line) for line in done.stdout.splitlines())  # noqa: S307 - our own output
    assert sorted(map(fold, builtin.FORMAT_NAMES)) == sorted(map(fold, formats))
    assert sorted(map(fold, builtin.FORMULA_NAMES)) == sorted(map(fold, formulas))


def test_a_dry_run_of_a_builtin_format_imports_no_log_parser():
    import subprocess
    import sys

    code = (
        "import sys; from ascendfactory.cli.app import main; rc = main(sys.argv[1:]); "
        "print(sorted(m for m in sys.modules if m.startswith('ascendfactory.metrics')), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "train", str(QUICK), "--dry-run"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "ascendfactory.metrics.formats" not in done.stderr.splitlines()[-1], done.stderr[-500:]
