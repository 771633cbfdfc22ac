"""Every fix a refusal prints, and the layout it names when no single fix does, fits when applied: each is
applied to the experiment as the overrides it prints, planned again, and must give the figure shown and fit.
Also the advisor (`estimate --suggest`) of every backend, LLaMA-Factory's and verl's included (audit C1, C3,
D3)."""

from __future__ import annotations

import json
import os

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.backends.registry import get_backend
from ascendfactory.cli.app import main
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from ascendfactory.features.templates import render_experiment
from ascendfactory.memory import devices
from ascendfactory.memory.check import MemoryPolicy, check_memory
from ascendfactory.memory.fixes import cheapest_fixes, overrides, suggest_layouts

GiB = 2**30
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    monkeypatch.setattr(devices, "probe_devices", lambda **_: None)
    monkeypatch.setenv("AF_VERL_ENV", "/nonexistent-verl-env")  # compose against the shipped key lists
    monkeypatch.setenv("AF_LLAMAFACTORY_ENV", "/nonexistent-lf-env")
    monkeypatch.chdir(REPO)


ENVIRON = {"AF_VERL_ENV": "/nonexistent-verl-env", "AF_LLAMAFACTORY_ENV": "/nonexistent-lf-env"}


def _plan(path, extra=()):
    loaded = load_experiment(str(path), list(extra), collect=True)
    return make_plan(loaded, dry_run=True, environ=ENVIRON)


def _template(tmp_path, backend, model, exp):
    path = tmp_path / f"{backend}-{model}-{exp}.yaml"
    path.write_text(render_experiment(backend=backend, model_name=model, exp_name=exp, output_file=str(path)))
    return path


def _device(gib):
    return devices.resolve_device_memory(memory_gb=gib, device=None, probe=False)


def _applied(path, base, settings, device):
    plan = _plan(path, [*base, *overrides(settings), f"--memory_check.device_memory_gb={device / GiB}"])
    assert plan.memory is not None
    return plan.memory


CASES = [
    # (backend, model, exp, overrides, device memory in GiB): a single change fits
    (
        "mindspeed-llm",
        "qwen2.5-7b",
        "full-4k",
        ["--backend_config.training.tensor-model-parallel-size=1"],
        64,  # audit row 12: TP 1 on a 64 GB Ascend 910B
    ),
    ("torch", "qwen2.5-7b", "full-4k", [], 48),  # 16-bit weights, distributed optimizer: 49.9 GiB
    ("mindspeed-rl", "qwen2.5-7b", "grpo", [], 48),
    ("mindspeed-mm", "qwen2.5-vl-7b", "full", [], 32),
    ("llamafactory", "qwen2.5-7b", "full-4k", [], 80),
    ("verl", "qwen2.5-7b", "grpo", [], 48),
]


@pytest.mark.parametrize(("backend", "model", "exp", "base", "gib"), CASES)
def test_each_printed_fix_fits_when_applied(tmp_path, backend, model, exp, base, gib):
    path = _template(tmp_path, backend, model, exp)
    plan = _plan(path, base)
    target = get_backend(backend).memory_target(plan.run)
    device = int(gib * GiB)
    est, _ = check_memory(target, MemoryPolicy(device_memory_gb=gib, probe=False), dry_run=True)
    assert est.fits is False, (backend, est.peak / GiB)
    fixes = cheapest_fixes(target, _device(gib), est.usable)
    assert fixes, f"{backend}: no single change fits"
    with pytest.raises(ConfigError) as refused:
        check_memory(target, MemoryPolicy(device_memory_gb=gib, probe=False), dry_run=False)
    text = refused.value.problems[0].fix
    for fix in fixes:
        assert fix.describe() in text  # printed as the keys to set
        memory = _applied(path, base, fix.settings, device)
        assert memory["fits"] is True, (fix.describe(), memory["per_device_peak_bytes"] / GiB)
        assert memory["per_device_peak_bytes"] == pytest.approx(fix.estimate.peak, rel=1e-6), fix.describe()


def test_when_no_single_change_fits_the_refusal_names_the_fastest_layout_that_does(tmp_path):
    """Audit C1: a 72B model on 4 x 8 devices of 64 GB at TP1 PP1: every single change is still over; the
    refusal names a layout of the advisor, as keys, and that layout fits when applied."""
    path = _template(tmp_path, "torch", "qwen2.5-72b", "full-4k")
    base = [
        "--env.NPUS_PER_NODE=8",
        "--env.NNODES=4",
        "--backend_config.training.tensor-model-parallel-size=1",
        "--backend_config.training.pipeline-model-parallel-size=1",
        "--backend_config.training.global-batch-size=32",
    ]
    plan = _plan(path, base)
    target = get_backend("torch").memory_target(plan.run)
    est, _ = check_memory(target, MemoryPolicy(device_memory_gb=64, probe=False), dry_run=True)
    assert est.fits is False and cheapest_fixes(target, _device(64), est.usable) == []
    with pytest.raises(ConfigError) as refused:
        check_memory(target, MemoryPolicy(device_memory_gb=64, probe=False), dry_run=False)
    fix = refused.value.problems[0].fix
    assert "no single change fits" in fix and "--suggest" in fix
    best = suggest_layouts(target, est.usable, device=_device(64), limit=1)[0]
    assert best.describe_settings() in fix
    memory = _applied(path, base, best.settings, 64 * GiB)
    assert memory["fits"] is True
    assert memory["per_device_peak_bytes"] == pytest.approx(best.estimate.peak, rel=1e-6)


@pytest.mark.parametrize(
    ("backend", "exp", "device"),
    [
        ("llamafactory", "full-4k", "ascend-910b4"),
        ("verl", "grpo", "ascend-910b4"),
        ("llamafactory", "lora-4k", "h100-80gb"),
    ],
)
def test_the_advisor_finds_layouts_for_llamafactory_and_verl(tmp_path, capsys, backend, exp, device):
    """Audit C3: `--suggest` searched Megatron layouts only and said "none found" for an experiment that
    fits. Each suggestion is keys to set, and the first one fits when applied."""
    path = _template(tmp_path, backend, "qwen2.5-7b", exp)
    code = main(["estimate", str(path), f"--memory_check.device={device}", "--suggest", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code in (0, 3)
    found = payload["suggestions"]
    assert found, f"{backend}: none found"
    assert [s["step_s"] for s in found] == sorted(s["step_s"] for s in found)
    usable = payload["memory"]["device_memory_bytes"] - payload["memory"]["reserve_bytes"]
    for s in found:
        assert s["per_device_peak_bytes"] <= usable
        assert s["overrides"] == overrides(s["set"])  # the keys, ready to paste after `train`
    first = found[0]
    memory = _applied(
        path, [f"--memory_check.device={device}"], first["set"], payload["memory"]["device_memory_bytes"]
    )
    assert memory["fits"] is True and memory["per_device_peak_bytes"] == first["per_device_peak_bytes"]


def test_zero_stages_are_not_offered_where_the_environment_lacks_deepspeed(tmp_path):
    from ascendfactory.backends.llamafactory.memory import spelling

    path = _template(tmp_path, "llamafactory", "qwen2.5-7b", "full-4k")
    job = get_backend("llamafactory").memory_target(_plan(path).run).job
    zero3 = job.with_(zero=3)
    knobs = {"zero": 3, "offload_optimizer": False, "offload_param": False}
    assert spelling(False)(knobs, zero3) is None  # LLaMA-Factory would refuse `deepspeed` there
    written = spelling(None)(knobs, zero3)
    assert written["backend_config.training.deepspeed"]["zero_optimization"] == {"stage": 3}


def test_estimate_exits_3_when_the_job_does_not_fit_and_ranks_in_readable_units(tmp_path, capsys):
    """Audit D3: `estimate` exits 3 on DOES NOT FIT (0 when it fits or the device is unknown), and the
    advisor's step times on the demo model are not all `0.00 s`."""
    assert main(["estimate", "cfgs/quickstart.yaml", "--memory_check.device_memory_gb=0.001"]) == 3
    assert "DOES NOT FIT" in capsys.readouterr().out
    assert main(["estimate", "cfgs/quickstart.yaml"]) == 0
    capsys.readouterr()
    assert main(["estimate", "cfgs/quickstart.yaml", "--suggest", "--memory_check.device=h100-80gb"]) == 0
    out = capsys.readouterr().out
    assert "0.00 s" not in out and " us " in out or " ms " in out
    assert "--backend_config.training." in out  # each suggestion carries the overrides to apply it
