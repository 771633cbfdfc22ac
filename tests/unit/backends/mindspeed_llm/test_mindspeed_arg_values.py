"""mindspeed-llm: every flag's value checked against its argparse `type=`, `nargs` and `choices`, read from
MindSpeed-LLM's and Megatron-LM's source (keys/*.txt, scripts/gen_mindspeed_args.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendfactory.backends.mindspeed_llm.keys import Spec, specs, value_problem
from tests.unit.backends.mindspeed_llm.test_mindspeed_llm import plan_for, problems_of, train_flags

K = "backend_config."


@pytest.mark.parametrize("version", ["2.1.0", "26.1.0"])
def test_the_lists_carry_each_flags_type_nargs_choices_and_default(version: str) -> None:
    training, pre = specs("training", version), specs("preprocess", version)
    assert training["tensor-model-parallel-size"] == Spec("int", default=1)
    assert training["lr"].kind == "float" and training["bf16"] == Spec("flag", default=False)
    assert training["data-path"].nargs == "*"
    assert "qwen" in training["prompt-type"].choices and pre["handler-name"].kind == "str"
    # defaults the estimate reads: MindSpeed-LLM's LoRA rank, Megatron's padding and attention dropout
    assert training["lora-r"].default == 16 and training["lora-target-modules"].default == []
    assert training["make-vocab-size-divisible-by"].default == 128
    assert training["attention-dropout"].default == 0.1
    assert "qwen" in pre["prompt-type"].choices


def test_the_26_1_0_defaults_are_the_built_parsers() -> None:
    """Megatron core_v0.12.1's checkpoint format and TransformerEngine layers, and the collective timeout
    MindSpeed-LLM's megatron_basic feature sets with parser.set_defaults (a default read only at run time)."""
    training = specs("training", "26.1.0")
    assert training["ckpt-format"].default == "torch_dist"
    assert training["transformer-impl"].default == "transformer_engine"
    assert training["distributed-timeout-minutes"].default == 30


@pytest.mark.parametrize(
    ("section", "key", "value", "words"),
    [
        # the defects the issue names: one name each, never a mapping or a list
        ("preprocess_data", "prompt-type", {"name": "qwen"}, "is a mapping"),
        ("training", "prompt-type", {"name": "qwen"}, "is a mapping"),
        ("preprocess_data", "handler-name", ["AlpacaStyleInstructionHandler"], "is a list"),
        ("training", "prompt-type", "qwen25", "not one of its choices"),
        ("training", "micro-batch-size", "1", "is not an integer"),
        ("training", "micro-batch-size", 1.5, "integer"),
        ("training", "lr", "fast", "is not a number"),
        ("training", "bf16", "yes", "takes no value"),
        ("training", "seq-length", True, "integer"),
        ("training", "lora-r", True, "needs an integer"),
        ("training", "save", "", "not one text or number"),
    ],
)
def test_a_value_argparse_refuses_is_named(tmp_path: Path, clean_env, section, key, value, words) -> None:
    found = problems_of(tmp_path, {"backend_config": {section: {key: value}}})
    assert words in found[f"{K}{section}.{key}"], found


def test_values_argparse_takes_pass_and_reach_the_argv(tmp_path: Path, clean_env) -> None:
    plan = plan_for(
        tmp_path,
        {"backend_config": {"training": {"prompt-type": "qwen", "lr": 1, "bf16": False, "seed": 7}}},
    )
    flags = train_flags(plan)
    assert flags["prompt-type"] == ["qwen"] and flags["lr"] == ["1"] and "bf16" not in flags


def test_nargs_rules() -> None:
    many, one, fixed = Spec("str", "+"), Spec("int"), Spec("int", "2")
    assert value_problem(["a", "b"], many) is None and value_problem("a", many) is None
    assert "at least one" in value_problem([], many)
    assert "is a list" in value_problem([1, 2], one)
    assert value_problem([1, 2], fixed) is None and "takes 2" in value_problem([1], fixed)
    assert value_problem(None, one) is None and value_problem(False, one) is None  # omitted from argv
