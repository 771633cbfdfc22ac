"""A busy env.MASTER_PORT: refused before launch on the node that binds it, warned on --dry-run, never
retried by auto-resume, and checked by `doctor <experiment>`."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from ascendfactory.backends import ports
from ascendfactory.backends.planner import make_plan
from ascendfactory.cli.app import app
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

QUICK = REPO / "cfgs" / "quickstart.yaml"


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _plan(*overrides: str, dry_run: bool):
    return make_plan(load_experiment(QUICK, list(overrides)), dry_run=dry_run)


def test_a_real_run_refuses_a_busy_port_naming_the_key_and_a_free_port(tmp_path, busy_port):
    with pytest.raises(ConfigError) as err:
        _plan(f"--af_output_dir={tmp_path}", f"--env.MASTER_PORT={busy_port}", dry_run=False)
    [problem] = err.value.problems
    assert problem.key == "env.MASTER_PORT" and problem.source == "command line"
    assert f"port {busy_port} is in use" in problem.message
    suggested = int(problem.fix.split("e.g. ")[1].split()[0])
    assert suggested != busy_port and not ports.in_use(suggested)


def test_a_dry_run_warns_and_a_free_port_passes(tmp_path, busy_port):
    plan = _plan(f"--af_output_dir={tmp_path}", f"--env.MASTER_PORT={busy_port}", dry_run=True)
    assert any(w.startswith("env.MASTER_PORT: port") and "a real run stops here" in w for w in plan.warnings)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    plan = _plan(f"--af_output_dir={tmp_path}", f"--env.MASTER_PORT={free}", dry_run=False)
    assert not any("MASTER_PORT" in w for w in plan.warnings)


def test_only_node_rank_0_binds_the_port(tmp_path, busy_port):
    args = [
        f"--af_output_dir={tmp_path}",
        f"--env.MASTER_PORT={busy_port}",
        "--env.NNODES=2",
        "--env.NODE_RANK=1",
    ]
    plan = _plan(*args, "--backend_config.training.global-batch-size=16", dry_run=False)
    assert ports.bound_port(plan) is None


def test_auto_resume_never_retries_a_port_clash(tmp_path):
    plan = _plan(f"--af_output_dir={tmp_path}", dry_run=True)
    assert "EADDRINUSE" in plan.policy.unretryable
    lf = make_plan(
        load_experiment(REPO / "cfgs" / "quickstart_llamafactory.yaml", [f"--af_output_dir={tmp_path}"]),
        dry_run=True,
    )
    assert "EADDRINUSE" in lf.policy.unretryable


def test_doctor_checks_the_experiments_port(busy_port, tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(QUICK.read_text().replace("MASTER_PORT: 29517", f"MASTER_PORT: {busy_port}"))
    result = CliRunner().invoke(app, ["doctor", str(exp), "--json"])
    assert f"port {busy_port}" in result.stdout and "in use" in result.stdout, result.stdout
    assert f"env.MASTER_PORT of {exp}" in result.stdout
