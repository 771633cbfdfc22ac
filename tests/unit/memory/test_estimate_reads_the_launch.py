"""The audit's memory defects (newcomer audit, wave 3: A2, A3, A4, B5), reproduced through the CLI as a user
runs them: the estimate reads the values the framework will parse, not the experiment as written. Each of
these failed before the estimate read the typed run (`Plan.run`)."""

from __future__ import annotations

import json
import os

import pytest

from ascendfactory.cli.app import main
from ascendfactory.features.templates import render_experiment
from ascendfactory.memory import devices

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
GiB = 2**30


@pytest.fixture(autouse=True)
def _here(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(devices, "probe_devices", lambda **_: None)


def _template(tmp_path, backend: str, model: str, exp: str) -> str:
    path = tmp_path / f"{backend}-{exp}.yaml"
    path.write_text(render_experiment(backend=backend, model_name=model, exp_name=exp, output_file=str(path)))
    return str(path)


def _estimate(capsys, path: str, *overrides: str) -> tuple[int, dict]:
    code = main(["estimate", path, "--json", *overrides])
    out = capsys.readouterr().out
    return code, json.loads(out)["memory"]


def _assumption(memory: dict, word: str) -> str:
    return next(a for a in memory["assumptions"] if word in a)


def test_a2_mindspeed_mm_reads_the_example_arguments_the_plan_merges(tmp_path, capsys):
    """The plan merges MindSpeed-MM's GPT_ARGS (--bf16 --use-distributed-optimizer): the estimate follows,
    and the 7B template fits the 64 GB Ascend 910B2 its example runs on (73.85 GiB, DOES NOT FIT before)."""
    path = _template(tmp_path, "mindspeed-mm", "qwen2.5-vl-7b", "full")
    code, memory = _estimate(capsys, path, "--memory_check.device=ascend-910b2")
    assert code == 0 and memory["fits"] is True
    assert "bf16 (megatron): 2+4+12" in _assumption(memory, "bytes per trainable parameter")
    assert "optimizer sharded" in _assumption(memory, "bytes per trainable parameter")
    assert memory["per_device_peak_bytes"] < 50 * GiB


def test_a3_lora_with_the_default_rank_is_lora(tmp_path, capsys):
    """lora-target-modules without lora-r: the trainer's (and MindSpeed-LLM's) rank 16 with a frozen base,
    not a full fine-tune (76.80 GiB, DOES NOT FIT on an 80 GB H100 before)."""
    path = _template(tmp_path, "torch", "qwen3-8b", "lora-4k")
    code, memory = _estimate(
        capsys, path, "--memory_check.device=h100-80gb", "--backend_config.training.lora-r=null"
    )
    assert code == 0 and memory["fits"] is True
    assert "LoRA rank 16" in _assumption(memory, "LoRA")
    stage = memory["stages"][0]
    assert stage["gradients"] < 0.1 * GiB and stage["optimizer"] < 0.1 * GiB
    path = _template(tmp_path, "mindspeed-llm", "llama2-7b", "lora-4k")
    _, without = _estimate(capsys, path, "--backend_config.training.lora-r=null")
    _, with_16 = _estimate(capsys, path, "--backend_config.training.lora-r=16")
    assert without["per_device_peak_bytes"] == with_16["per_device_peak_bytes"] < 20 * GiB


def test_a4_mindspeed_rl_trains_in_its_own_default_bf16(tmp_path, capsys):
    """MindSpeed-RL's MegatronConfig defaults bf16 to True: the 7B template's update phase is estimated in
    bf16 (117.88 GiB in fp32 before, 74.87 GiB with bf16 written out)."""
    path = _template(tmp_path, "mindspeed-rl", "qwen2.5-7b", "grpo")
    _, silent = _estimate(capsys, path)
    _, spelled = _estimate(capsys, path, "--backend_config.megatron_training.bf16=true")
    assert silent["per_device_peak_bytes"] == spelled["per_device_peak_bytes"] < 80 * GiB
    assert "bf16 (megatron)" in _assumption(silent, "bytes per trainable parameter")


def test_b5_the_golden_mindspeed_mm_example_gets_an_estimate(capsys):
    code, memory = _estimate(capsys, "cfgs/golden/qwen25-vl-7b-mm-2.1.0.yaml")
    assert code == 0 and memory["per_device_peak_bytes"] > GiB
    assert [s["stage"] for s in memory["stages"]] == ["pp0", "pp1", "pp2", "pp3"]  # the example's PP 4
