"""The embedded GRPO trainer's reader: Hydra's subset (model group, overrides), the key subset, refusals."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascendfactory.engine.rl.config import load_yaml, read_trainer_yaml, to_flags
from ascendfactory.errors import ConfigError

BASE: dict[str, Any] = {
    "megatron_training": {
        "model": "tiny",
        "tokenizer_name_or_path": "/m",
        "global_batch_size": 4,
        "seq_length": 64,
        "train_iters": 3,
        "stage": "ray_grpo",
        "dataset_additional_keys": ["labels"],
        "data_path": "/d/x",
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "use_fused_rmsnorm": True,  # a performance flag: accepted, listed
    },
    "actor_config": {"micro_batch_size": 2, "lr": 1e-3, "tensor_model_parallel_size": 1},
    "rl_config": {
        "n_samples_per_prompt": 2,
        "mini_batch_size": 4,
        "verifier_function": ["base_acc"],
        "verifier_weight": [1.0],
        "blocking": True,  # Ray scheduling: accepted, listed
        "use_integrated_worker": True,
    },
    "generate_config": {"max_model_len": 64, "sampling_config": {"max_tokens": 16, "temperature": 1.0}},
}
MODEL = {
    "tiny": {
        "num_layers": 2,
        "hidden_size": 64,
        "normalization": "RMSNorm",
        "position_embedding_type": "rope",
        "norm_epsilon": 1e-6,
        "make_vocab_size_divisible_by": 1,
    }
}


def with_(**changes: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE)
    cfg["model"] = copy.deepcopy(MODEL)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return cfg


def problems(cfg: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        read_trainer_yaml(cfg, "exp.yaml")
    return {p.key: p.message for p in e.value.problems}


def test_a_valid_config_reads_with_mindspeed_rl_semantics():
    cfg = read_trainer_yaml(with_(), "exp.yaml")
    assert cfg.n == 2 and cfg.rl["mini_batch_size"] == 4 and cfg.rl["epochs"] == 1
    assert cfg.args.bf16 is True  # MindSpeed-RL's MegatronConfig default, passed to Megatron
    assert cfg.args.normalization == "RMSNorm" and cfg.args.micro_batch_size == 2
    assert cfg.sampling.max_tokens == 16 and cfg.sampling.top_k == 50  # sampling_config's default
    assert cfg.rollout_dtype == "bfloat16" and cfg.sampling_seed == cfg.args.seed
    # --use-fused-rmsnorm is honoured (engine/train/kernels.py), the scheduling keys are accepted and ignored
    assert cfg.args.use_fused_rmsnorm and "--use-fused-rmsnorm" not in cfg.ignored_flags
    assert "rl_config.blocking" in cfg.ignored_keys


@pytest.mark.parametrize(
    "changes,key,text",
    [
        ({"rl_config__use_kl_in_reward": True}, "rl_config.use_kl_in_reward", "not supported"),
        ({"rl_config__filter_groups_enable": True}, "rl_config.filter_groups_enable", "DAPO"),
        ({"rl_config__adv_estimator": "gae"}, "rl_config.adv_estimator", "group_norm"),
        ({"rl_config__critic_resource": {"num_npus": 1}}, "rl_config.critic_resource", "subset"),
        ({"rl_config__verifier_function": ["nope"]}, "rl_config.verifier_function", "unknown verifier"),
        ({"rl_config__verifier_weight": [1.0, 2.0]}, "rl_config.verifier_weight", "mismatch: 1 vs 2"),
        ({"rl_config__kl_penalty": "full"}, "rl_config.kl_penalty", "'full'"),
        ({"rl_config__n_samples_per_prompt": 0}, "rl_config.n_samples_per_prompt", ">= 1"),
        (
            {"generate_config__sampling_config": {"beam": 2}},
            "generate_config.sampling_config.beam",
            "sampling",
        ),
        (
            {"generate_config__infer_pipeline_parallel_size": 2},
            "generate_config.infer_pipeline_parallel_size",
            "",
        ),
        (
            {"generate_config__max_model_len": 32},
            "generate_config.max_model_len",
            "exceeds vLLM max_model_len",
        ),
        (
            {"actor_config__pipeline_model_parallel_size": 2},
            "actor_config.pipeline_model_parallel_size",
            "stage",
        ),
        ({"actor_config__lora_r": 8}, "actor_config.lora_r", "LoRA"),
        ({"actor_config__lora_target_modules": ["linear_qkv"]}, "actor_config.lora_target_modules", "LoRA"),
        ({"actor_config__no_such_flag": 1}, "actor_config.no_such_flag", "not a key this trainer knows"),
        ({"megatron_training__stage": "ray_ppo"}, "megatron_training.stage", "ray_grpo"),
        (
            {"megatron_training__dataset_additional_keys": []},
            "megatron_training.dataset_additional_keys",
            "labels",
        ),
        ({"megatron_training__hidden_dropout": None}, "megatron_training.hidden_dropout", "default 0.1"),
        ({"megatron_training__attention_dropout": None}, "megatron_training.attention_dropout", "default"),
        ({"ref_config": {"lr": 1.0}}, "ref_config", "integrated worker only"),
        ({"critic_config": {}}, "critic_config", "not a section"),
        ({"profiler_config": {"integrated": {"profile": True}}}, "profiler_config.profile", "profiling"),
        ({"megatron_training__model": "other"}, "megatron_training.model", "'other'"),
        (
            {"generate_config__sampling_config": {"top_k": "a b"}},
            "generate_config.sampling_config.top_k",
            "integer >= -1",
        ),
        (
            {"generate_config__sampling_config": {"min_p": 2}},
            "generate_config.sampling_config.min_p",
            "[0, 1]",
        ),
        (
            {"generate_config__sampling_config": {"seed": 1.5}},
            "generate_config.sampling_config.seed",
            "integer",
        ),
    ],
)
def test_refused_by_name(changes, key, text):
    found = problems(with_(**changes))
    assert key in found, found
    assert text in found[key]


def test_every_problem_at_once():
    found = problems(with_(rl_config__use_kl_in_reward=True, actor_config__lora_r=8, rl_config__epochs=0))
    assert {"rl_config.use_kl_in_reward", "actor_config.lora_r", "rl_config.epochs"} <= set(found)


@pytest.mark.parametrize("tracker", ["wandb", "swanlab"])
def test_a_tracker_switched_on_needs_its_project(tracker):
    found = problems(with_(**{f"rl_config__use_{tracker}": True}))
    assert f"use_{tracker} is true" in found[f"rl_config.{tracker}_project"]
    cfg = read_trainer_yaml(
        with_(**{f"rl_config__use_{tracker}": True, f"rl_config__{tracker}_project": "p"}), "exp.yaml"
    )
    assert cfg.rl[f"use_{tracker}"] is True and cfg.rl[f"{tracker}_exp_name"] == ""


def test_actor_config_wins_and_model_entry_is_beneath():
    cfg = read_trainer_yaml(with_(megatron_training__lr=0.5, model__tiny__hidden_size=64), "exp.yaml")
    assert cfg.args.lr == 1e-3 and cfg.args.hidden_size == 64


def test_to_flags_is_parse_args_from_config():
    assert to_flags({"bf16": True, "fp16": False, "load": None, "data_path": ["a", "b"], "lr": 0.1}) == [
        "--bf16",
        "--data-path",
        "a",
        "b",
        "--lr",
        "0.1",
    ]


def test_hydra_subset_defaults_model_group_and_overrides(tmp_path: Path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tiny.yaml").write_text(yaml.safe_dump(MODEL))
    body = {"defaults": [{"model": ["tiny"]}], **BASE}
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(body))
    raw, source = load_yaml(
        str(tmp_path), "grpo", ["rl_config.n_samples_per_prompt=4", "+rl_config.epochs=2"]
    )
    assert source == str(tmp_path / "grpo.yaml") and raw["model"] == MODEL
    cfg = read_trainer_yaml(raw, source)
    assert cfg.n == 4 and cfg.rl["epochs"] == 2
    with pytest.raises(ConfigError, match="no such key"):
        load_yaml(str(tmp_path), "grpo", ["rl_config.epochs=2"])  # Hydra needs + for a new key
    with pytest.raises(ConfigError, match="not found"):
        load_yaml(str(tmp_path), "missing", [])
