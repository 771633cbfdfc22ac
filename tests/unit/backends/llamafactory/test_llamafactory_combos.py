"""Rules of LLaMA-Factory's `get_train_args` we used to accept (found by benchmarks/diff_validate.py), each
through the real plan, and the stricter rules of ours (README: "Rules stricter than the framework")."""

from __future__ import annotations

import pytest

from ascendfactory.backends.llamafactory import combos
from ascendfactory.errors import ConfigError
from tests.unit.backends.llamafactory.test_llamafactory_plan import lf_yaml, plan_for

T = "--backend_config.training."


def refusal(tmp_path, *overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, *overrides)
    return str(e.value)


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        # transformers' TrainingArguments checks (get_train_args runs them)
        ((f"{T}logging_steps=0",), "logging_steps", "is 0 with logging_strategy steps"),
        ((f"{T}save_steps=0",), "save_steps", "is 0 with save_strategy steps"),
        ((f"{T}save_steps=2.5",), "save_steps", "a fraction above 1"),
        ((f"{T}dataloader_prefetch_factor=2",), "dataloader_prefetch_factor", "dataloader_num_workers is 0"),
        ((f"{T}load_best_model_at_end=true",), "load_best_model_at_end", "eval_strategy equal"),
        ((f"{T}lr_scheduler_type=greedy",), "lr_scheduler_type", "needs an eval strategy"),
        ((f"{T}warmup_steps=-1", f"{T}warmup_ratio=null"), "warmup_steps", "negative"),
        ((f"{T}warmup_ratio=-1.0",), "warmup_ratio", "negative"),
        ((f"{T}ddp_backend=''",), "ddp_backend", "empty text"),
        ((f"{T}finetuning_type=full", f"{T}adapter_name_or_path=x"), "adapter_name_or_path", "lora"),
        ((f"{T}seed=1099511627776",), "seed", "outside 0 .. 2**32 - 1"),
        ((f"{T}seed=-1",), "seed", "outside 0 .. 2**32 - 1"),
        # LLaMA-Factory's own
        ((f"{T}eval_strategy=steps",), "eval_strategy", "no eval_dataset and val_size is 0"),
        ((f"{T}image_max_pixels=2",), "image_max_pixels", "below image_min_pixels"),
        ((f"{T}video_max_pixels=2",), "video_max_pixels", "below video_min_pixels"),
        ((f"{T}export_quantization_bit=4",), "export_quantization_bit", "export_quantization_dataset"),
        ((f"{T}infer_backend=sglang",), "infer_backend", "not train"),
        ((f"{T}quantization_device_map=auto",), "quantization_device_map", "cannot be used for training"),
        ((f"{T}finetuning_type=full", f"{T}quantization_bit=4"), "quantization_bit", "lora or oft"),
        ((f"{T}use_galore=true",), "finetuning_type", "cannot be used with use_galore"),
        ((f"{T}interleave_probs='0.5'",), "interleave_probs", "mix_strategy is concat"),
        ((f"{T}streaming=true",), "max_samples", "streaming"),
        ((f"{T}ref_model_quantization_bit=-1",), "ref_model_quantization_bit", "not 4 or 8"),
        ((f"{T}finetuning_type=full", f"{T}use_dora=true"), "use_dora", "only for finetuning_type: lora"),
        # value kinds from the dataclass types
        ((f"{T}adapter_name_or_path=1",), "adapter_name_or_path", "is not a text"),
        ((f"{T}adapter_name_or_path=[a, b]",), "adapter_name_or_path", "is not a text"),
        ((f"{T}metric_for_best_model=1",), "metric_for_best_model", "is not a text"),
        ((f"{T}fsdp_config=[1, 2]",), "fsdp_config", "is not a mapping or a text"),
        ((f"{T}include_for_metrics=abc",), "include_for_metrics", "is not a list of texts"),
        ((f"{T}accelerator_config=''",), "accelerator_config", "empty text"),
        ((f"{T}accelerator_config={{a: 1}}",), "accelerator_config", "has no field a"),
        ((f"{T}fsdp_config=/nowhere/fsdp.json",), "fsdp_config", "not found"),
        ((f"{T}new_special_tokens_config=''",), "new_special_tokens_config", "not found"),
        # stricter than the parser: each fails or trains nothing later (README table)
        ((f"{T}cutoff_len=0",), "cutoff_len", "is not a positive count"),
        ((f"{T}lora_rank=0",), "lora_rank", "is not a positive count"),
        ((f"{T}per_device_train_batch_size=0",), "per_device_train_batch_size", "is not a positive count"),
        ((f"{T}num_train_epochs=-1", f"{T}max_steps=-1"), "num_train_epochs", "would run no step"),
    ],
)
def test_a_value_the_framework_refuses_is_refused_and_named(tmp_path, overrides, key, words):
    text = refusal(tmp_path, *overrides)
    assert f"backend_config.training.{key}" in text and words in text, text


def test_valid_neighbours_of_those_values_pass(tmp_path):
    cfg = lf_yaml(
        plan_for(
            tmp_path,
            f"{T}logging_steps=0.1",
            f"{T}seed=4294967295",
            f"{T}lora_target=[q_proj, v_proj]",
            f"{T}eval_strategy=steps",
            f"{T}val_size=0.1",
            f"{T}fsdp_config={{min_num_params: 0}}",
            f"{T}num_train_epochs=0",
            f"{T}max_steps=5",
        )
    )
    assert cfg["logging_steps"] == 0.1 and cfg["lora_target"] == ["q_proj", "v_proj"]


def test_a_package_the_parser_requires_is_looked_up_in_the_environment():
    training = {"enable_liger_kernel": True, "use_galore": False}
    assert combos.problems(training, None) == []  # environment not known: not checked
    found = combos.problems(training, lambda dist: dist != "liger-kernel")
    assert [p.key for p in found] == ["enable_liger_kernel"] and "liger-kernel" in found[0].message
    assert combos.problems(training, lambda dist: True) == []


def test_a_wrong_type_is_left_to_the_kind_check():
    assert combos.problems({"seed": "abc", "image_max_pixels": [1]}, None) == []


def test_device_only_keys_are_refused_on_a_machine_without_an_accelerator():
    from ascendfactory.backends.llamafactory.rules import device_problems

    training = {"tf32": True, "bf16_full_eval": True, "pure_bf16": True, "fp16": False}
    assert [p.key for p in device_problems(training, "cpu")] == [
        "backend_config.training.pure_bf16",
        "backend_config.training.bf16_full_eval",
        "backend_config.training.tf32",
    ]
    assert device_problems(training, "cuda") == []
