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
    assert [s.skipped for s in torch_plan.steps] == [s.skipped for s in ms_plan.steps]
