"""One experiment file, two backends: `torch` (embedded) and `mindspeed-llm` plan the same run.

The lead runs the torch side for real (integration); here both plans must agree on the parallel layout,
batch sizes, sequence length, iterations, data and checkpoint-loading decisions.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.plan import Plan

SAME = (
    "tensor-model-parallel-size",
    "pipeline-model-parallel-size",
    "micro-batch-size",
    "global-batch-size",
    "seq-length",
    "train-iters",
    "data-path",
    "load",
    "finetune",
    "no-load-optim",
    "no-load-rng",
    "save",
    "stage",
    "is-instruction-dataset",
)
PATHS = ("data-path", "load", "save")


def experiment(tmp_path: Path, **run_options) -> dict:
    return {
        "backend": "torch",
        "af_model_name": "tiny-demo",
        "exp_name": "same",
        "af_output_dir": str(tmp_path / "out"),
        "env": {"NPUS_PER_NODE": 4},
        "stage": "sft",
        **run_options,
        "backend_config": {
            "preprocess_data": {
                "input": str(tmp_path / "sft.jsonl"),
                "prompt-type": "qwen",
                "workers": 1,
                "handler-name": "AlpacaStyleInstructionHandler",
            },
            "convert_ckpt_hf2mg": {},
            "convert_ckpt_mg2hf": {},
            "training": {
                "tokenizer-name-or-path": str(tmp_path / "hf"),
                "tensor-model-parallel-size": 2,
                "pipeline-model-parallel-size": 2,
                "micro-batch-size": 2,
                "global-batch-size": 8,
                "seq-length": 128,
                "train-iters": 30,
                "lr": 3.0e-3,
                "min-lr": 3.0e-4,
                "lr-decay-style": "cosine",
                "seed": 1234,
                "log-interval": 1,
                "save-interval": 10,
                "prompt-type": "qwen",
            },
        },
    }


def plan(tmp_path: Path, tree: dict, backend: str) -> Plan:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return make_plan(load_experiment(path, [f"--backend={backend}"]), dry_run=True, environ=dict(os.environ))


def flags_after(argv: list[str], marker: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    key = None
    for tok in argv[argv.index(marker) + 1 :]:
        if tok.startswith("--"):
            key = tok[2:]
            out[key] = ()
        elif key is not None:
            out[key] = (*out[key], tok)
    return out


def compared(flags: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...] | None]:
    return {
        k: tuple(os.path.abspath(v) for v in flags[k]) if k in PATHS and k in flags else flags.get(k)
        for k in SAME
    }


@pytest.mark.parametrize(
    "run_options",
    [
        {},  # type 1 from the hf2mg output
        {"ckpt_load_type": 0},  # random init
        {"ckpt_load_type": 2, "user_converted_ckpt_path": "/ckpt/run1"},  # resume
    ],
)
def test_torch_and_mindspeed_plan_the_same_run(tmp_path: Path, clean_env, run_options: dict) -> None:
    tree = experiment(tmp_path, **run_options)
    torch_plan, ms_plan = plan(tmp_path, tree, "torch"), plan(tmp_path, tree, "mindspeed-llm")
    torch_flags = flags_after(torch_plan.step("train").argv, "ascendfactory.engine.train")
    ms_flags = flags_after(ms_plan.step("train").argv, "posttrain_gpt.py")
    assert compared(torch_flags) == compared(ms_flags)
    for key in ("tp", "pp", "dp", "world_size", "data_path", "load", "load_reason"):
        assert torch_plan.facts[key] == ms_plan.facts[key], key
    torch_steps = [s for s in torch_plan.steps if s.name != "data-fit"]  # the embedded backend's own check
    assert [s.skipped for s in torch_steps] == [s.skipped for s in ms_plan.steps]


def test_torch_lora_4k_file_plans_mindspeed_llms_lora_commands(
    tmp_path: Path, clean_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped torch `lora-4k` template, unchanged but for `backend`, plans MindSpeed-LLM's LoRA run:
    posttrain_gpt.py with the LoRA TUNE_ARGS, and the merge (`--load-dir <base> --lora-load <LoRA output>
    --lora-r --lora-alpha --lora-target-modules`, as ckpt_convert_qwen25_mcore2hf_lora.sh); the torch plan
    runs the same training flags and the same merge with its own converter."""
    from ascendfactory.backends.registry import get_backend
    from ascendfactory.cli.app import main as cli
    from tests.unit.backends.conftest import make_checkout

    site = make_checkout(tmp_path / "MindSpeed-LLM", v1=False)
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(site))
    out = tmp_path / "lora.yaml"
    assert "lora-4k" in get_backend("torch").experiments()
    args = ["config", "--backend=torch", "--af_model_name=qwen2.5-7b", "--exp_name=lora-4k"]
    assert cli([*args, f"--output_file_path={out}"]) == 0
    tree = yaml.safe_load(out.read_text())
    tree["af_output_dir"] = str(tmp_path / "o")
    tree["backend_config"]["preprocess_data"]["input"] = str(tmp_path / "sft.jsonl")
    plans = {b: plan(tmp_path, tree, b) for b in ("torch", "mindspeed-llm")}
    ms_train = flags_after(plans["mindspeed-llm"].step("train").argv, "posttrain_gpt.py")
    torch_train = flags_after(plans["torch"].step("train").argv, "ascendfactory.engine.train")
    lora = {
        "lora-r": ("8",),
        "lora-alpha": ("16",),
        "lora-fusion": (),
        "lora-target-modules": ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"),
    }
    for flags in (ms_train, torch_train):
        assert {k: flags.get(k) for k in lora} == lora
        assert {"finetune", "stage", "is-instruction-dataset", "bf16"} <= set(flags)
    assert compared(torch_train) == compared(ms_train)
    ms_merge = plans["mindspeed-llm"].step("mg2hf").argv
    assert ms_merge[1].endswith("convert_ckpt_v2.py")
    merges = [
        flags_after(ms_merge, ms_merge[1]),
        flags_after(plans["torch"].step("mg2hf").argv, "ascendfactory.engine.convert"),
    ]
    saved, base = str(tmp_path / "o" / "saved_checkpoints"), ms_train["load"]
    for merge in merges:
        assert {k: merge.get(k) for k in ("lora-r", "lora-alpha", "lora-target-modules")} == {
            k: lora[k] for k in ("lora-r", "lora-alpha", "lora-target-modules")
        }
        assert tuple(map(os.path.abspath, merge["lora-load"])) == (os.path.abspath(saved),)
        assert tuple(map(os.path.abspath, merge["load-dir"])) == tuple(map(os.path.abspath, base))


@pytest.mark.parametrize("backend", ["torch", "mindspeed-llm"])
def test_torch_and_mindspeed_apply_the_same_owned_key_rule_to_save(
    tmp_path: Path, clean_env, backend
) -> None:
    """A user `save` elsewhere is refused by both (torch used to drop it silently); the planned one passes."""
    from ascendfactory.errors import ConfigError

    tree = experiment(tmp_path)
    tree["backend_config"]["training"]["save"] = str(tmp_path / "elsewhere")
    with pytest.raises(ConfigError) as e:
        plan(tmp_path, tree, backend)
    (problem,) = [p for p in e.value.problems if p.key == "backend_config.training.save"]
    assert "training saves into" in problem.message and "af_output_dir" in problem.fix
    tree["backend_config"]["training"]["save"] = str(tmp_path / "out" / "saved_checkpoints")
    argv = plan(tmp_path, tree, backend).step("train").argv
    assert os.path.abspath(argv[argv.index("--save") + 1]) == str(tmp_path / "out" / "saved_checkpoints")
