"""Devices asked per node against the node's devices, with the device files faked where they are read
(`config.devices.DEVICE_ROOT`): no GPU or NPU is needed, and none was available to this work."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ascendfactory.backends import device_fit
from ascendfactory.backends.planner import make_plan
from ascendfactory.cli.app import app, main
from ascendfactory.config import devices
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from ascendfactory.pipeline import runner as runner_module
from tests.conftest import REPO

QUICKSTART = REPO / "cfgs" / "quickstart.yaml"
cli = CliRunner()


def fake_node(monkeypatch: pytest.MonkeyPatch, root: Path, *, gpus: int = 0, npus: int = 0) -> None:
    """A node whose device files show `gpus` NVIDIA GPUs or `npus` Ascend NPUs, read from `root`."""
    for i in range(gpus):
        (root / "proc/driver/nvidia/gpus" / f"0000:{i + 1:02x}:00.0").mkdir(parents=True)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for i in range(npus):
        (root / "dev" / f"davinci{i}").touch()
    if npus:
        (root / "dev" / "davinci_manager").touch()  # not a device
    monkeypatch.setattr(devices, "DEVICE_ROOT", str(root))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)


def quickstart(tmp_path: Path, *overrides: str):
    out = f"--af_output_dir={tmp_path / 'out'}"
    return load_experiment(str(QUICKSTART), [out, *overrides])


@pytest.mark.parametrize("gpus", [0, 1, 8])
def test_the_quickstart_plans_unchanged_with_no_one_or_eight_gpus(monkeypatch, tmp_path, gpus):
    fake_node(monkeypatch, tmp_path / "node", gpus=gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a scheduler's pick does not shrink CPU processes
    plan = make_plan(quickstart(tmp_path), dry_run=False)
    assert plan.facts["devices_per_node"] == 2 and plan.facts["world_size"] == 2
    assert plan.env[device_fit.ACCELERATOR_ENV] == "cpu" and not plan.warnings


def test_more_devices_than_the_node_has_are_refused_before_launch(monkeypatch, tmp_path, capsys):
    fake_node(monkeypatch, tmp_path / "node", gpus=1)
    monkeypatch.setattr(runner_module, "run_experiment", lambda *a, **k: pytest.fail("launched"))
    out = tmp_path / "out"
    assert main(["train", str(QUICKSTART), "--accelerator=auto", f"--af_output_dir={out}"]) == 2
    text = " ".join(capsys.readouterr().err.split())
    assert "env.NPUS_PER_NODE: asks 2 devices per node (env.NPUS_PER_NODE)" in text
    assert "this node has 1 GPU visible (1 GPU on this node)" in text
    assert "fix: set env.NPUS_PER_NODE: 1 or accelerator: cpu" in text
    assert not out.exists()


def test_a_dry_run_warns_instead(monkeypatch, tmp_path):
    fake_node(monkeypatch, tmp_path / "node", gpus=1)
    plan = make_plan(quickstart(tmp_path, "--accelerator=auto"), dry_run=True)
    assert len(plan.warnings) == 1 and "asks 2 devices per node" in plan.warnings[0]
    assert "a real run stops here" in plan.warnings[0]


def test_what_fits_is_accepted_and_trains_on_the_devices(monkeypatch, tmp_path):
    fake_node(monkeypatch, tmp_path / "node", gpus=1)
    plan = make_plan(quickstart(tmp_path, "--accelerator=auto", "--env.NPUS_PER_NODE=1"), dry_run=False)
    assert plan.facts["devices_per_node"] == 1 and device_fit.ACCELERATOR_ENV not in plan.env


def test_visibility_variables_count_after_what_the_runtime_drops(monkeypatch, tmp_path):
    fake_node(monkeypatch, tmp_path / "node", gpus=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")  # id 2 is not a GPU of this node: CUDA stops there
    with pytest.raises(ConfigError) as e:
        make_plan(quickstart(tmp_path, "--accelerator=auto"), dry_run=False)
    [p] = e.value.problems
    assert p.key == "env.NPUS_PER_NODE"
    assert "asks 2 devices per node (CUDA_VISIBLE_DEVICES=1,2)" in p.message
    assert "1 GPU visible (CUDA_VISIBLE_DEVICES=1,2 of the 2 GPUs on this node)" in p.message


def test_npus_after_ascend_rt_visible_devices(monkeypatch, tmp_path):
    fake_node(monkeypatch, tmp_path / "node", npus=4)
    with pytest.raises(ConfigError) as e:
        make_plan(quickstart(tmp_path, "--accelerator=auto", "--env.NPUS_PER_NODE=8"), dry_run=False)
    assert "asks 8 devices per node (command line" not in str(e.value)  # the count's own source is named
    assert "asks 8 devices per node (env.NPUS_PER_NODE), but this node has 4 NPUs visible" in str(e.value)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")  # wins over env.NPUS_PER_NODE: 2 of 4
    plan = make_plan(quickstart(tmp_path, "--accelerator=auto", "--env.NPUS_PER_NODE=8"), dry_run=False)
    assert plan.facts["devices_per_node"] == 2


def test_accelerator_cpu_is_refused_where_the_programs_need_devices(monkeypatch, tmp_path, write_yaml):
    fake_node(monkeypatch, tmp_path / "node")
    data = yaml.safe_load(QUICKSTART.read_text())
    data.update(backend="mindspeed-llm", af_output_dir=str(tmp_path / "out"))
    with pytest.raises(ConfigError) as e:
        make_plan(load_experiment(str(write_yaml(yaml.safe_dump(data)))), dry_run=True)
    assert any(
        p.key == "accelerator" and "backend mindspeed-llm trains on NPUs or GPUs only" in p.message
        for p in e.value.problems
    )


@pytest.mark.parametrize(
    "value,installed,visible",
    [("0", 1, 1), ("0,1", 1, 1), ("1,0", 2, 2), ("0,0", 2, 1), ("-1", 4, 0), ("GPU-3f,0", 1, 2), ("", 2, 0)],
)
def test_visible_ids_follow_cuda(value, installed, visible):
    assert devices.visible_ids(value, installed) == visible


def test_doctor_counts_the_experiments_devices(monkeypatch, tmp_path):
    fake_node(monkeypatch, tmp_path / "node", gpus=1)
    r = cli.invoke(app, ["doctor", str(QUICKSTART), "--json"])
    assert "devices per node: 2 (env.NPUS_PER_NODE), as CPU processes (accelerator: cpu)" in r.output
    bad = tmp_path / "auto.yaml"
    bad.write_text(QUICKSTART.read_text().replace("accelerator: cpu", "accelerator: auto"))
    r = cli.invoke(app, ["doctor", str(bad), "--json"])
    assert "more than the 1 visible, a real run is refused (set env.NPUS_PER_NODE: 1)" in r.output
