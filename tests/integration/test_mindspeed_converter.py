"""The real MindSpeed-LLM converter, driven by the mindspeed-llm plan: HF -> Megatron -> HF on a tiny model.

Runs only where MindSpeed-LLM is installed (an Ascend machine after `sh install.sh mindspeed-llm`, with
AF_MINDSPEED_LLM_DIR or the install location holding the checkout, MindSpeed and torch_npu importable).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ascendfactory.backends.mindspeed_llm.environment import install_dir as mindspeed_llm_install_dir

pytestmark = pytest.mark.integration

MS_DIR = os.environ.get("AF_MINDSPEED_LLM_DIR") or mindspeed_llm_install_dir()
READY = (
    os.path.isfile(os.path.join(MS_DIR, "posttrain_gpt.py"))
    and os.path.isdir(os.path.join(MS_DIR, "megatron"))
    and all(importlib.util.find_spec(m) is not None for m in ("mindspeed", "torch_npu"))
)
SKIP = (
    "needs MindSpeed-LLM: a checkout (AF_MINDSPEED_LLM_DIR or `sh install.sh mindspeed-llm`) with "
    "megatron/, and the mindspeed and torch_npu packages; not installed on this machine"
)


def run_step(plan, kind: str) -> None:
    step = plan.step(kind)
    assert step is not None and not step.skipped, step
    env = {**os.environ, **plan.env, **step.env}
    done = subprocess.run(step.argv, cwd=step.cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.mark.skipif(not READY, reason=SKIP)
@pytest.mark.parametrize("converter", ["v1", "v2"])
def test_real_converter_round_trip(tmp_path: Path, converter: str) -> None:
    from safetensors.torch import load_file

    from ascendfactory.backends.planner import make_plan
    from ascendfactory.config.load import load_experiment
    from ascendfactory.engine.demo import main as make_demo

    script = {"v1": "convert_ckpt.py", "v2": "convert_ckpt_v2.py"}[converter]
    if not os.path.isfile(os.path.join(MS_DIR, script)):
        pytest.skip(f"this MindSpeed-LLM has no {converter} converter")
    hf = tmp_path / "hf"
    assert make_demo([str(hf)]) == 0
    exp = {
        "backend": "mindspeed-llm",
        "af_model_name": "tiny-demo",
        "exp_name": "conv",
        "af_output_dir": str(tmp_path / "out"),
        "env": {"NPUS_PER_NODE": 1},
        "scripts_dir": MS_DIR,
        "backend_config": {
            "converter": converter,
            "training": {
                "tokenizer-name-or-path": str(hf),
                "data-path": str(tmp_path / "d"),
                "seq-length": 128,
                "global-batch-size": 1,
            },
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(exp))
    plan = make_plan(load_experiment(path), dry_run=True)
    run_step(plan, "hf2mg")
    converted = tmp_path / "out" / "converted_weight_TP1PP1"
    assert (converted / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (converted / "iter_0000001").is_dir()
    shutil.copytree(converted, tmp_path / "out" / "saved_checkpoints")  # stands in for training's output
    run_step(plan, "mg2hf")
    out = tmp_path / "out" / "ckpt_converted_mg2hf"
    assert (out / "config.json").is_file() and not (out / "mg2hf").exists()
    before = load_file(str(hf / "model.safetensors"))
    after: dict = {}
    for f in out.glob("*.safetensors"):
        after.update(load_file(str(f)))
    assert set(after) == set(before)
    for name, tensor in before.items():
        assert after[name].float().allclose(tensor.float(), atol=1e-2), name
