"""Helpers of the mindspeed-rl tests: a GRPO experiment as data, the context `read_config` / the planner take.

`BASE` is MindSpeed-RL's own `configs/grpo_qwen25_7b_A3.yaml` (master 05a90d77) in `backend_config` form,
trimmed to the keys that matter for checking: one 16-NPU node, TP 2 / PP 2, GBS 32 x 8 samples.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascendfactory.backends.common.mindspeed_rl_experiment import keys as keyfiles
from ascendfactory.backends.common.mindspeed_rl_experiment.read import MindSpeedRLConfig, read_config
from ascendfactory.backends.planner import build_context
from ascendfactory.config.load import load_experiment

BASE: dict[str, Any] = {
    "backend": "mindspeed-rl",
    "af_model_name": "qwen2.5-7b",
    "exp_name": "grpo",
    "af_output_dir": "OUT",
    "env": {"NPUS_PER_NODE": 16, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": 6766},
    "stage": "grpo",
    "backend_config": {
        "preprocess_data": {
            "input": "/data/deepscaler.json",
            "handler_name": "R1AlpacaStyleInstructionHandler",
            "prompt_type": "qwen_r1",
            "map_keys": {"prompt": "problem", "query": "", "response": "answer", "system": ""},
            "dataset_additional_keys": ["labels"],
        },
        "megatron_training": {
            "tokenizer_name_or_path": "/models/Qwen2.5-7B",
            "global_batch_size": 32,
            "seq_length": 2048,
            "save_interval": 100,
            "train_iters": 500,
            "dataset_additional_keys": ["labels"],
        },
        "actor_config": {
            "micro_batch_size": 4,
            "tensor_model_parallel_size": 2,
            "pipeline_model_parallel_size": 2,
        },
        "rl_config": {
            "n_samples_per_prompt": 8,
            "mini_batch_size": 32,
            "verifier_function": ["math_17k_acc"],
            "verifier_weight": [1.0],
        },
        "generate_config": {
            "infer_tensor_parallel_size": 1,
            "max_model_len": 4096,
            "sampling_config": {"max_tokens": 2048, "temperature": 1.0, "top_p": 1.0, "top_k": -1},
        },
    },
}

ENV_VARS = ("AF_MINDSPEED_RL_DIR", "AF_MINDSPEED_LLM_DIR", "ASCEND_TOOLKIT_HOME", "AF_THIRD_PARTY_DIR")


class _Delete:
    def __deepcopy__(self, memo: dict) -> _Delete:
        return self


DELETE = _Delete()  # a value that removes the key in `merge`


def merge(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    """`src` into `dst`; a value `DELETE` removes the key."""
    for k, v in src.items():
        if v is DELETE:
            dst.pop(k, None)
        elif isinstance(v, dict) and v and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v
    return dst


def experiment(tmp_path: Path, changes: dict[str, Any] | None = None) -> Path:
    tree = merge(copy.deepcopy(BASE), copy.deepcopy(changes or {}))
    tree["af_output_dir"] = str(tmp_path / tree["af_output_dir"])
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


def context(tmp_path: Path, changes: dict[str, Any] | None = None, environ: dict[str, str] | None = None):
    return build_context(load_experiment(experiment(tmp_path, changes)), environ or {})


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    third = tmp_path / "third-party"
    monkeypatch.setenv("AF_THIRD_PARTY_DIR", str(third))
    return third


@pytest.fixture
def read(tmp_path: Path, clean_env: Path):
    """read(changes, version="master", cluster=True) -> MindSpeedRLConfig (raises ConfigError)."""

    def _read(
        changes: dict[str, Any] | None = None, version: str = "master", cluster: bool = True
    ) -> MindSpeedRLConfig:
        return read_config(context(tmp_path, changes), keys=keyfiles.shipped(version), cluster_checks=cluster)

    return _read
