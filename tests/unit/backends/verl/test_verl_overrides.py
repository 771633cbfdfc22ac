"""backend_config -> Hydra overrides (flattening, '+', value syntax) and composing against the key lists."""

from __future__ import annotations

import pytest

from ascendfactory.backends.common.hydra import schema as hydra_schema
from ascendfactory.backends.common.hydra.overrides import flatten, format_value, override_text
from ascendfactory.backends.common.hydra.schema import Override
from ascendfactory.backends.verl import schema as sc

DP = sc.load("dp")


@pytest.mark.parametrize(
    "value,text",
    [
        (None, "null"),
        (True, "true"),
        (32, "32"),
        (5e-08, "5e-8"),
        (1e-06, "1e-6"),
        (0.001, "0.001"),
        (1e20, "1e20"),
        (1.0, "1.0"),
        (float("inf"), "inf"),
        ("vllm", "vllm"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        ("/root/data/gsm8k/train.parquet", "/root/data/gsm8k/train.parquet"),
        ("token-mean", "token-mean"),
        ("true", "'true'"),  # a string that Hydra would read as a bool
        ("1e-5", "'1e-5'"),
        ("null", "'null'"),
        ("", "''"),
        ("a b", "'a b'"),
        ("x:y", "'x:y'"),
        ("it's", '"it\'s"'),
        (["console", "tensorboard"], "[console,tensorboard]"),
        ({"enable": True, "len": 512}, "{enable:true,len:512}"),
    ],
)
def test_values_in_hydra_syntax(value, text):
    assert format_value(value) == text


def test_flatten_walks_verls_sections_and_keeps_the_users_order():
    bc = {
        "data": {"train_batch_size": 32, "train_files": ["/a.parquet", "/b.parquet"]},
        "model_engine": "megatron",
        "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}, "rollout": {"n": 5}},
    }
    assert [override_text(o) for o in flatten(bc, DP)] == [
        "data.train_batch_size=32",
        "data.train_files=[/a.parquet,/b.parquet]",
        "model_engine=megatron",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.rollout.n=5",
    ]


def test_plus_adds_keys_verl_lacks_and_is_dropped_on_keys_it_has():
    bc = {
        "actor_rollout_ref": {
            "model": {"override_config": {"+attn_implementation": "eager"}},
            "rollout": {"+n": 2},  # in the schema: a plain override (Hydra refuses '+' on a set key)
        },
        "reward": {"+reward_kwargs": {"max_resp_len": 2048}},
    }
    assert [override_text(o) for o in flatten(bc, DP)] == [
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.rollout.n=2",
        "+reward.reward_kwargs={max_resp_len:2048}",
    ]


def test_compose_names_every_unknown_key_with_a_suggestion_or_the_plus_fix():
    found = hydra_schema.compose(
        DP,
        [
            Override("trainer.n_gpu_per_node", 2),
            Override("actor_rollout_ref.model.override_config.attn_implementation", "eager"),
            Override("actor_rollout_ref.actr.lr", 1),
            Override("trainer", 3),
            Override("data.train_batch_size", 8),
        ],
    )
    by_key = {p.key: (p.message, p.fix) for p in found.problems}
    assert set(by_key) == {
        "trainer.n_gpu_per_node",
        "actor_rollout_ref.model.override_config.attn_implementation",
        "actor_rollout_ref.actr.lr",
        "trainer",
    }
    assert "not in verl 0.9.1's config" in by_key["trainer.n_gpu_per_node"][0]
    assert "did you mean trainer.n_gpus_per_node?" in by_key["trainer.n_gpu_per_node"][1]
    assert "open map" in by_key["actor_rollout_ref.model.override_config.attn_implementation"][0]
    assert (
        "'+attn_implementation'" in by_key["actor_rollout_ref.model.override_config.attn_implementation"][1]
    )
    assert "did you mean actor_rollout_ref.actor?" in by_key["actor_rollout_ref.actr.lr"][1]
    assert "is a section of verl's config" in by_key["trainer"][0]
    assert found.config["data"]["train_batch_size"] == 8


def test_compose_resolves_interpolations_as_omegaconf_does():
    found = hydra_schema.compose(
        DP,
        [
            Override("actor_rollout_ref.rollout.n", 5),
            Override("trainer.project_name", "p"),
            Override("trainer.experiment_name", "e"),
            Override("actor_rollout_ref.actor.use_dynamic_bsz", True),
            Override("custom.x", "${oc.env:AF_TEST_VAR,fallback}", plus=True),
        ],
        environ={},
    ).config
    assert found["actor_rollout_ref"]["actor"]["rollout_n"] == 5  # ${oc.select:actor_rollout_ref.rollout.n,1}
    assert found["trainer"]["default_local_dir"] == "checkpoints/p/e"  # two interpolations in one string
    assert found["critic"]["use_dynamic_bsz"] is True  # a select of a key the override changed
    assert found["actor_rollout_ref"]["ref"]["strategy"] == "fsdp"  # ${actor_rollout_ref.actor.strategy}
    assert found["custom"]["x"] == "fallback"
    # a relative reference: checkpoint.load_contents is ${.save_contents}
    assert found["actor_rollout_ref"]["actor"]["checkpoint"]["load_contents"] == [
        "model",
        "optimizer",
        "extra",
    ]
    # a nested oc.select whose default is another oc.select; a missing ('???') value selects the default
    assert found["distillation"]["teacher_models"]["teacher_model"]["inference"]["name"] is None


def test_megatron_has_its_own_keys():
    mg = sc.load("megatron")
    assert mg.kind("actor_rollout_ref.actor.megatron.tensor_model_parallel_size") == "leaf"
    assert DP.kind("actor_rollout_ref.actor.megatron.tensor_model_parallel_size") is None
    assert mg.default("actor_rollout_ref.actor.strategy") == "megatron"
    assert any("sha256" not in line and "verl 0.9.1" in line for line in sc.header("megatron"))
