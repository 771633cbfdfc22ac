"""The typed Megatron sections (`backends/common/megatron/config.py`): what the plan reads, refused in the
house style, and unknown keys still refused by the framework's own argument lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ascendfactory.backends.common.megatron.config import PathKeys, PreprocessSection, TrainingSection
from ascendfactory.backends.common.megatron.read import PATH_KEYS
from ascendfactory.config.problems import validate_with_defaults
from ascendfactory.errors import ConfigError, Problem
from tests.unit.backends.mindspeed_llm.test_mindspeed_llm import plan_for

K = "backend_config.training."


def read(values: dict[str, Any], model: type = TrainingSection) -> tuple[Any, list[tuple[str, str, str]]]:
    problems: list[Problem] = []
    typed = validate_with_defaults(
        model, values, source_of=lambda key: "exp.yaml", prefix=K, problems=problems
    )
    return typed, [(p.key, p.message, p.fix) for p in problems]


def test_sizes_are_read_in_the_dash_spelling_and_other_keys_are_kept():
    typed, problems = read({"tensor-model-parallel-size": 2, "seq-length": "512", "lr": 1e-5, "bf16": True})
    assert problems == []
    assert (typed.tensor_model_parallel_size, typed.seq_length, typed.pipeline_model_parallel_size) == (
        2,
        512,
        1,
    )
    assert typed.model_extra == {"lr": 1e-5, "bf16": True}
    typed, _ = read({"tensor_model_parallel_size": 4})  # not the dash spelling: not this field
    assert typed.tensor_model_parallel_size == 1


@pytest.mark.parametrize(
    "value, message, fix",
    [
        (0, "must be 1 or more (got 0)", f"set {K}seq-length >= 1"),
        (-3, "must be 1 or more (got -3)", f"set {K}seq-length >= 1"),
        (True, "must be an integer (got True)", ""),  # a bool where an int is expected
        (2.5, "must be an integer (got 2.5)", ""),
        ("4k", "must be an integer (got '4k')", ""),
    ],
)
def test_a_bad_size_is_named_and_its_default_stands_in(value, message, fix):
    typed, problems = read({"seq-length": value, "micro-batch-size": 2})
    assert problems == [(K + "seq-length", message, fix)]
    assert (typed.seq_length, typed.micro_batch_size) == (4096, 2)


@pytest.mark.parametrize(
    "key, value, shown",
    [
        ("load", 5, "int 5"),  # a number where a path is expected
        ("tokenizer-name-or-path", ["/a"], "list ['/a']"),
        ("data-path", [True, "/d/a"], "list [True, '/d/a']"),
        ("save", {"a": 1}, "dict {'a': 1}"),
    ],
)
def test_a_value_that_is_not_a_path_is_named(key, value, shown):
    typed, problems = read({key: value})
    assert problems == [(K + key, f"must be a path (got {shown})", "quote it if it is a path made of digits")]


def test_a_blend_is_a_data_path_and_a_layer_list_is_parsed():
    typed, problems = read({"data-path": [0.3, "/d/a", 0.7, "/d/b"], "num-layer-list": "3,5"})
    assert problems == []
    assert typed.data_path == [0.3, "/d/a", 0.7, "/d/b"] and typed.num_layer_list == [3, 5]
    _, problems = read({"num-layer-list": "3,x"})
    assert problems == [(K + "num-layer-list", "must be comma-separated integers (got '3,x')", "e.g. 3,5")]


def test_lora_and_sequence_parallel_follow_the_values_truth():
    assert read({"lora-r": 8})[0].lora and read({"lora-target-modules": ["linear_qkv"]})[0].lora
    assert not read({"lora-r": 0})[0].lora and not read({})[0].lora
    assert read({"sequence-parallel": True})[0].sequence_parallel is True


def test_preprocess_workers():
    typed, problems = read({"workers": 4}, PreprocessSection)
    assert typed.workers == 4 and problems == []
    _, problems = read({"workers": 0}, PreprocessSection)
    assert problems == [
        (
            K + "workers",
            "must be a whole number of processes from 1 to 1024 (got 0)",
            "e.g. workers: 4 (the output is the same for every count)",
        )
    ]


def test_the_path_keys_are_the_models_path_fields():
    assert {f.alias for f in PathKeys.model_fields.values()} == PATH_KEYS


def _plan_problems(tmp_path: Path, training: dict[str, Any], backend: str = "mindspeed-llm") -> list[Problem]:
    changes: dict[str, Any] = {"backend_config": {"training": training}}
    if backend != "mindspeed-llm":
        changes["backend"] = backend
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, changes)
    return e.value.problems


def test_through_a_plan_a_bad_size_keeps_its_message(tmp_path: Path, clean_env: Path):
    found = _plan_problems(tmp_path, {"pipeline-model-parallel-size": 0})
    assert ("must be 1 or more (got 0)", f"set {K}pipeline-model-parallel-size >= 1") in [
        (p.message, p.fix) for p in found if p.key == K + "pipeline-model-parallel-size"
    ]


@pytest.mark.parametrize("backend", ["mindspeed-llm", "torch"])
def test_an_unknown_key_is_still_refused_by_the_frameworks_list(
    tmp_path: Path, clean_env: Path, backend: str
):
    found = _plan_problems(tmp_path, {"tensor-model-paralel-size": 2}, backend)
    (p,) = [p for p in found if p.key == K + "tensor-model-paralel-size"]
    assert "did you mean: tensor-model-parallel-size" in p.message
