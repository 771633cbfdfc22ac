"""A tracker whose client the training's environment lacks is refused before launch (`--dry-run` and the real
run's plan), and by the framework's own check step, naming `AF_TRACKERS=... sh install.sh <backend>`;
one whose client is there plans as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascendfactory.backends.llamafactory.programs import PROGRAMS_DIR as LF_PROGRAMS
from ascendfactory.backends.verl.programs import PROGRAMS_DIR as VERL_PROGRAMS
from ascendfactory.cli.app import main
from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.base import Tracker, TrackerSettings
from ascendfactory.trackers.registry import TRACKERS, register_tracker
from tests.conftest import REPO

LF_QUICK = REPO / "cfgs" / "quickstart_llamafactory.yaml"
QUICK = REPO / "cfgs" / "quickstart.yaml"


@pytest.fixture(scope="module")
def bare_env(tmp_path_factory) -> Path:
    """A framework environment without any tracker client: a venv of this python with no packages."""
    env = tmp_path_factory.mktemp("bare") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    return env


def test_llamafactory_without_mlflow_in_its_environment_is_refused_by_the_dry_run(
    bare_env, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("AF_LLAMAFACTORY_ENV", str(bare_env))
    code = main(
        ["train", str(LF_QUICK), "--report_to=[mlflow]", f"--af_output_dir={tmp_path}/out", "--dry-run"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "report_to.mlflow: the mlflow client (mlflow) is not installed" in err
    assert f"({bare_env}/bin/python)" in err
    assert "fix: AF_TRACKERS=mlflow sh install.sh llamafactory" in err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_llamafactory_with_the_client_plans_and_its_check_step_looks_for_it(tmp_path, monkeypatch, capsys):
    """The environment that has it (this interpreter's, as a stand-in) passes; the check step's argv asks
    its program to look for the client, with the fix to print."""
    here = Path(sys.executable).parent.parent
    pytest.importorskip("mlflow")
    monkeypatch.setenv("AF_LLAMAFACTORY_ENV", str(here))
    code = main(
        [
            "train",
            str(LF_QUICK),
            "--report_to=[mlflow, tensorboard]",
            f"--af_output_dir={tmp_path}/out",
            "--dry-run",
            "--format",
            "json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    import json

    check = next(s for s in json.loads(captured.out)["steps"] if s["name"] == "check")
    assert "--clients=mlflow" in check["argv"]
    assert "--clients-fix=AF_TRACKERS=mlflow sh install.sh llamafactory" in check["argv"]


@pytest.mark.parametrize(
    "program,args",
    [
        (os.path.join(LF_PROGRAMS, "lf_check.py"), ["train.yaml", "--data-fit=warn"]),
        (os.path.join(VERL_PROGRAMS, "verl_check.py"), ["data.train_files=x.parquet"]),
    ],
)
def test_the_check_step_in_an_environment_without_the_client_names_install_sh(bare_env, program, args):
    fix = "AF_TRACKERS=mlflow,wandb sh install.sh verl"
    done = subprocess.run(
        [str(bare_env / "bin" / "python"), program, "--clients=mlflow,wandb", f"--clients-fix={fix}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: report_to: mlflow, wandb is not installed in this environment" in done.stdout
    assert f"fix: {fix}" in done.stdout


@pytest.fixture
def tracker_without_client():
    """A tracker the embedded trainer could open, whose client module exists nowhere."""
    tracker = Tracker(
        name="test-absent",
        description="test: a client that is not installed",
        settings=TrackerSettings,
        resolve=lambda settings, names: TrackerSpec("test-absent", names.project, names.run_name, "/x"),
        client=("af_test_absent_client",),
        packages=("af-test-absent-client>=1",),
        open=lambda spec, **_: None,
        from_env=lambda environ: (TrackerSpec("test-absent", "p", "r", "/x"), None),
    )
    register_tracker(tracker)
    yield tracker
    TRACKERS.unregister("test-absent")


def test_the_embedded_trainers_own_environment_is_checked_too(tracker_without_client, tmp_path, capsys):
    args = ["train", str(QUICK), "--report_to=[test-absent]", f"--af_output_dir={tmp_path}", "--dry-run"]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2
    assert "report_to.test-absent: the test-absent client (af_test_absent_client) is not installed" in err
    assert "fix: pip install 'af-test-absent-client>=1', or remove test-absent from report_to" in err
