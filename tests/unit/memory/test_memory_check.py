"""The memory check on real plans: every backend's templates, the refusal, warn/off, the advisor, the CLI."""

from __future__ import annotations

import json
import os

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.backends.registry import all_backends, get_backend
from ascendfactory.cli.app import main
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from ascendfactory.features.templates import render_experiment
from ascendfactory.memory import devices
from ascendfactory.memory.check import MemoryPolicy, check_memory
from ascendfactory.memory.fixes import suggest_layouts
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.report import COMPONENTS
from ascendfactory.parallel import LayoutInput, validate_layout

REAL_PROBE = devices.probe_devices  # the autouse fixture below stubs it (no GPU tool answers in tests)
MODEL = {
    "torch": "qwen2.5-7b",
    "mindspeed-llm": "qwen2.5-72b",
    "mindspeed-rl": "qwen2.5-7b",
    "llamafactory": "qwen2.5-7b",
    "verl": "qwen2.5-7b",
    "mindspeed-mm": "qwen2.5-vl-7b",
}


def _plan(tmp_path, backend, exp, model, overrides=()):
    path = tmp_path / f"{backend}-{model}-{exp}.yaml"
    path.write_text(render_experiment(backend=backend, model_name=model, exp_name=exp, output_file=str(path)))
    loaded = load_experiment(str(path), list(overrides), collect=True)
    plan = make_plan(loaded, dry_run=True, environ={})
    target = get_backend(backend).memory_target(plan.run)
    return plan, target


@pytest.fixture(autouse=True)
def _no_probe(monkeypatch):
    monkeypatch.setattr(devices, "probe_devices", lambda **_: None)
    monkeypatch.setenv("AF_VERL_ENV", "/nonexistent-verl-env")


@pytest.mark.parametrize("backend", [b.name for b in all_backends()])
def test_every_backend_template_gets_a_memory_section(tmp_path, backend):
    for exp in get_backend(backend).experiments():
        if backend == "torch" and exp == "tiny-sft":
            continue
        plan, target = _plan(tmp_path, backend, exp, MODEL[backend])
        assert target is not None and plan.memory is not None, (backend, exp)
        memory = plan.memory
        assert set(memory) >= {"device_memory_bytes", "per_device_peak_bytes", "stages", "assumptions"}
        assert memory["per_device_peak_bytes"] > 10**9, (backend, exp)  # a 7B model or larger: GBs
        for stage in memory["stages"]:
            parts = COMPONENTS
            assert stage["total"] == pytest.approx(sum(stage[c] for c in parts), abs=8)


def test_a_job_that_does_not_fit_is_refused_with_the_cheapest_fixes(tmp_path):
    plan, target = _plan(tmp_path, "mindspeed-llm", "full-4k", "qwen2.5-72b")
    policy = MemoryPolicy(device="ascend-910b4", probe=False)
    est, warnings = check_memory(target, policy, dry_run=True)
    assert est.fits is False and warnings and "fits" in warnings[0]  # a dry run only warns
    with pytest.raises(ConfigError) as e:
        check_memory(target, policy, dry_run=False)
    problem = e.value.problems[0]
    assert problem.key == "memory_check" and "ascend-910b4" in problem.message and "stage" in problem.message
    assert "more devices" in problem.fix  # 72B on 8 x 32 GB: no layout the advisor searches fits
    _, warned = check_memory(
        target, MemoryPolicy(on_exceed="warn", device="ascend-910b4", probe=False), dry_run=False
    )
    assert warned
    _, off = check_memory(
        target, MemoryPolicy(on_exceed="off", device="ascend-910b4", probe=False), dry_run=False
    )
    assert off == []


def test_fixes_are_in_cost_order_each_fits_and_has_its_estimate(tmp_path):
    from ascendfactory.memory.fixes import cheapest_fixes

    _, target = _plan(tmp_path, "torch", "full-4k", "qwen2.5-7b")
    peak = target.job.estimate().peak
    fixes = cheapest_fixes(target, devices.DeviceMemory(None, None, "test"), int(peak * 0.9))
    assert fixes and all(f.estimate.peak <= peak * 0.9 for f in fixes)
    assert "backend_config.training.recompute-granularity" in fixes[0].settings
    unknown = devices.DeviceMemory(None, None, "test")
    assert cheapest_fixes(target, unknown, None) == []  # device memory unknown: nothing can be said to fit


def test_the_advisor_suggests_layouts_that_pass_the_rules_and_fit(tmp_path):
    _, target = _plan(
        tmp_path, "mindspeed-llm", "full-4k", "qwen2.5-72b", ["--env.NPUS_PER_NODE=8", "--env.NNODES=4"]
    )
    usable = 60 * 2**30
    found = suggest_layouts(target, usable)
    assert found
    assert [s.step_s for s in found] == sorted(s.step_s for s in found)
    for s in found:
        j: MegatronJob = s.job
        assert s.estimate.peak <= usable
        assert j.tp * j.pp * j.dp * j.cp == 32
        report = validate_layout(
            LayoutInput(
                world_size=32,
                tp=j.tp,
                pp=j.pp,
                cp=j.cp,
                mbs=j.mbs,
                gbs=j.gbs,
                num_layers=j.shape.layers,
                heads=j.shape.heads,
                kv_heads=j.shape.kv_heads,
                seq_length=j.seq,
                max_position_embeddings=32768,
            )
        )
        assert not report.problems


def test_a_real_run_that_does_not_fit_stops_before_anything_starts(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    code = main(
        ["train", "cfgs/quickstart.yaml", f"--af_output_dir={out}", "--memory_check.device_memory_gb=0.5"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "memory_check" in err and "per device" in err and "fits" in err
    assert not out.exists()  # nothing written


def test_estimate_command_json(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    code = main(
        ["estimate", "cfgs/quickstart.yaml", "--memory_check.device=h100-80gb", "--json", "--suggest"]
    )
    payload = json.loads(capsys.readouterr().out)
    assert code == 0
    memory = payload["memory"]
    assert memory["device"] == "h100-80gb" and memory["device_memory_bytes"] == 80 * 2**30 and memory["fits"]
    assert memory["stages"][0]["stage"] == "all" and memory["per_device_peak_bytes"] > 0
    assert payload["suggestions"]


def test_device_probes_read_the_tools_output(monkeypatch):
    monkeypatch.setattr(devices.shutil, "which", lambda name: name == "nvidia-smi")
    monkeypatch.setattr(
        devices, "_run", lambda argv, t: "NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n"
    )
    found = REAL_PROBE()
    assert found.bytes == 81559 * 2**20 and "H100" in found.name and found.source == "nvidia-smi"
    npu = (
        "| 0     910B3               | OK            | 97.2        37                0    / 0             |\n"
        "| 0                         | 0000:C1:00.0  | 0           0    / 0          3396 / 65536         |\n"
    )
    monkeypatch.setattr(devices.shutil, "which", lambda name: name == "npu-smi")
    monkeypatch.setattr(devices, "_run", lambda argv, t: npu)
    assert REAL_PROBE().bytes == 65536 * 2**20


def test_device_memory_order_key_probe_table(monkeypatch):
    monkeypatch.setattr(
        devices, "probe_devices", lambda **_: devices.DeviceMemory(10, "probed", "nvidia-smi")
    )
    assert devices.resolve_device_memory(memory_gb=2, device="h200").source == "memory_check.device_memory_gb"
    assert devices.resolve_device_memory(memory_gb=None, device="h200").source == "nvidia-smi"
    got = devices.resolve_device_memory(memory_gb=None, device="h200", probe=False)
    assert got.bytes == 141 * 10**9 and "datasheet" in got.source
    assert devices.resolve_device_memory(memory_gb=None, device=None, probe=False).bytes is None


def test_unknown_device_is_a_configuration_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    code = main(["estimate", "cfgs/quickstart.yaml", "--memory_check.device=h1000"])
    err = capsys.readouterr().err
    assert code == 2 and "memory_check.device" in err and "h100-80gb" in err
