"""`--format shell`: nothing from the configuration reaches the shell unquoted, comments included."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascendfactory.pipeline.render import plan_to_shell
from ascendfactory.plan import LogNaming, LogSpec, Plan, Process, Role, Step, ThroughputSpec

PAYLOAD = "touch /tmp/af-pwned"
TEXT = st.lists(
    st.sampled_from([*"ab $`'\"\\;|&\n\r\t#/!*{}()\x00", f"\n{PAYLOAD}\n", "\nAF_EOF\n"]), max_size=20
).map("".join)


def plan_with(value: str, root: str = "/out") -> Plan:
    logs = LogSpec(
        format="megatron",
        naming=LogNaming(prefix="p"),
        loss_rank="last",
        throughput=ThroughputSpec("megatron"),
    )
    out = f"{root}/{value}"
    p = Plan(
        backend="torch",
        exp_name=value,
        model_name=value,
        output_dir=out,
        logs=logs,
        warnings=[value],
        facts={"note": value},
        files={f"{out}/a.yaml": f"x: {value}\nAF_EOF\n"},
        env={"V": value},
    )
    p.add(
        Step(
            name="s",
            role=Role.PREPROCESS,
            launch=Process(("prog", value)),
            notes=[value],
            env={"W": value},
            mkdirs=[f"{out}/d"],
        )
    )
    p.add(Step(name="skipped", role=Role.CONVERT, skip_reason=value))
    p.add(Step(name="plot", role=Role.PLOT, outputs=[f"{out}/p.png"]))
    return p


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TEXT.filter(lambda v: "\x00" not in v))
def test_running_the_script_runs_only_the_plans_commands(tmp_path, value):
    """The script runs for real with stub programs first on PATH: `touch` (the payload) must never run,
    `prog` must get the value as one argument, and the plan's file must hold its text exactly."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    log = tmp_path / "calls"
    for name in ("touch", "prog"):
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\nprintf "%s\\0" {name} "$@" > {log}.$$\n')
        stub.chmod(0o755)
    root = tmp_path / "root"
    for old in tmp_path.glob("calls.*"):
        old.unlink()
    plan = plan_with(value, str(root))
    script = plan_to_shell(plan)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    calls = [f.read_bytes().decode().split("\0")[:-1] for f in tmp_path.glob("calls.*")]
    assert calls == [["prog", value]]
    ((path, text),) = plan.files.items()
    with open(path, encoding="utf-8", newline="") as f:
        assert f.read() == text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=40, deadline=None)
@given(TEXT.filter(lambda v: "\x00" not in v))
def test_bash_parses_every_script(value):
    script = plan_to_shell(plan_with(value))
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
