"""verl's rules, table-driven: a valid GRPO config, one change per row, the findings with their messages."""

from __future__ import annotations

import pytest

from ascendfactory.backends.common.hydra import schema as hydra_schema
from ascendfactory.backends.common.hydra.schema import Override
from ascendfactory.backends.verl import rules
from ascendfactory.backends.verl import schema as sc

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
BASE = {
    "data.train_batch_size": 32,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.model.path": "/m",
    A + "ppo_mini_batch_size": 8,
    A + "ppo_micro_batch_size_per_gpu": 1,
    A + "use_kl_loss": True,
    R + "name": "vllm",
    R + "n": 5,
    R + "tensor_model_parallel_size": 4,
    R + "log_prob_micro_batch_size_per_gpu": 1,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 1,
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 8,
}


def view(changes: dict | None = None, *, engine: str = "dp", heads: int = 28, kv: int = 4) -> rules.View:
    schema = sc.load(engine)
    values = {**BASE, **(changes or {})}
    overrides = [Override(k, v, plus=schema.kind(k) is None) for k, v in values.items()]
    composed = hydra_schema.compose(schema, overrides, environ={})
    assert not composed.problems
    user = [o for o in overrides if o.key in (changes or {})]
    return rules.View(composed.config, user=user, schema=schema, heads=heads, kv_heads=kv)


def test_the_base_config_breaks_no_rule():
    assert rules.run(view()) == []


CASES = [
    # (rule, changes, expected [(key, text in the message)], text in the first fix)
    (
        "batch_divisible",
        {"data.train_batch_size": 30},
        [
            (
                "data.train_batch_size",
                "30 x actor_rollout_ref.rollout.n 5 = 150 responses per step are not divisible by the 8 "
                "devices",
            )
        ],
        "use data.train_batch_size 32",
    ),
    (
        "batch_divisible (megatron)",
        {A + "megatron.tensor_model_parallel_size": 3},
        [(A + "megatron.tensor_model_parallel_size", "TP 3 x PP 1 x CP 1 = 3 does not divide the 8 devices")],
        "product divides the device count",
    ),
    (
        "micro_batch_pairs: neither",
        {A + "ppo_micro_batch_size_per_gpu": None},
        [(A + "ppo_micro_batch_size_per_gpu", "neither actor_rollout_ref.actor.ppo_micro_batch_size nor")],
        "set actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    ),
    (
        "micro_batch_pairs: both",
        {R + "log_prob_micro_batch_size": 8},
        [
            (
                R + "log_prob_micro_batch_size",
                "both actor_rollout_ref.rollout.log_prob_micro_batch_size (8) and",
            )
        ],
        "remove actor_rollout_ref.rollout.log_prob_micro_batch_size",
    ),
    (
        "micro_batch_pairs: ref only when a reference policy is used",
        {"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": None, A + "use_kl_loss": False},
        [],
        None,
    ),
    (
        "micro_batch_pairs: ref",
        {"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": None},
        [("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "neither actor_rollout_ref.ref.")],
        "set actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ),
    (
        "dynamic batch size skips the batch rules",
        {A + "use_dynamic_bsz": True, A + "ppo_micro_batch_size_per_gpu": None, "data.train_batch_size": 30},
        [],
        None,
    ),
    (
        "loss_agg_mode",
        {A + "loss_agg_mode": "foo"},
        [(A + "loss_agg_mode", "'foo' is not a loss aggregation mode")],
        "use one of: token-mean, token-sum, seq-mean-token-sum",
    ),
    (
        "mini_batch",
        {A + "ppo_mini_batch_size": 64},
        [(A + "ppo_mini_batch_size", "64 is larger than data.train_batch_size 32")],
        "use at most 32",
    ),
    (
        "mini_batch: deprecated global micro",
        {A + "ppo_micro_batch_size_per_gpu": None, A + "ppo_micro_batch_size": 3},
        [
            (A + "ppo_micro_batch_size", "3 does not divide actor_rollout_ref.actor.ppo_mini_batch_size 8"),
            (A + "ppo_micro_batch_size", "3 x ulysses_sequence_parallel_size 1 = 3 is below the 8 devices"),
        ],
        "use a divisor",
    ),
    (
        "sequence_parallel",
        {A + "ulysses_sequence_parallel_size": 2, "actor_rollout_ref.model.use_remove_padding": False},
        [("actor_rollout_ref.model.use_remove_padding", "ulysses_sequence_parallel_size is 2")],
        "use_remove_padding: true",
    ),
    (
        "sampling_temperature",
        {R + "val_kwargs.do_sample": True, R + "temperature": 0},
        [(R + "temperature", "is 0, but actor_rollout_ref.rollout.val_kwargs.do_sample is true")],
        "temperature > 0",
    ),
    (
        "router_replay",
        {"algorithm.rollout_correction.bypass_mode": True, A + "megatron.router_replay.mode": "R2"},
        [("algorithm.rollout_correction.bypass_mode", "router_replay.mode is R2")],
        "bypass_mode: false",
    ),
    (
        "lora_rank",
        {"actor_rollout_ref.model.lora_rank": 1024},
        [("actor_rollout_ref.model.lora_rank", "1024 is above vLLM's largest LoRA rank 512")],
        "<= 512",
    ),
    (
        "critic: placeholder path and no micro batch",
        {"algorithm.adv_estimator": "gae", R + "n": 1},
        [
            ("critic.model.path", "verl's placeholder"),
            ("critic.ppo_micro_batch_size_per_gpu", "neither critic.ppo_micro_batch_size nor"),
        ],
        "set critic.model.path",
    ),
    (
        "critic: mini batch",
        {
            "critic.enable": True,
            "critic.model.path": "/m",
            "critic.ppo_micro_batch_size_per_gpu": 1,
            "critic.ppo_mini_batch_size": 64,
        },
        [("critic.ppo_mini_batch_size", "64 is larger than data.train_batch_size 32")],
        "use at most 32",
    ),
    (
        "worker_mini_batch (verl checks it on the workers only)",
        {
            "trainer.n_gpus_per_node": 4,
            "data.train_batch_size": 6,
            A + "ppo_mini_batch_size": 3,
            R + "n": 2,
            R + "tensor_model_parallel_size": 2,
        },
        [
            (
                A + "ppo_mini_batch_size",
                "3 x actor_rollout_ref.rollout.n 2 = 6 samples per mini-batch do not split over the "
                "actor's 4 data-parallel ranks",
            )
        ],
        "use ppo_mini_batch_size 4",
    ),
    (
        "rollout_parallel: heads",
        {R + "tensor_model_parallel_size": 8},
        [(R + "tensor_model_parallel_size", "8 does not divide the model's 28 attention heads")],
        "use one of: 1, 2, 4",
    ),
    (
        "rollout_parallel: devices",
        {R + "tensor_model_parallel_size": 3},
        [
            (
                R + "tensor_model_parallel_size",
                "rollout TP 3 x DP 1 x PP 1 = 3 does not divide the 8 devices",
            ),
            (R + "tensor_model_parallel_size", "3 does not divide the model's 28 attention heads"),
            (
                R + "tensor_model_parallel_size",
                "3 and the model's 4 key/value heads do not divide one another",
            ),
        ],
        "rollout sizes whose product divides",
    ),
    (
        "rollout_engine",
        {R + "name": "hf"},
        [(R + "name", "is 'hf': verl 0.9.1's rollouts are the servers vllm, sglang, trtllm")],
        "vllm",
    ),
    (
        "separate_async",
        {"trainer.v1.trainer_mode": "separate_async", "data.train_batch_size": 16},
        [
            (
                "data.train_batch_size",
                "is 16, but separate-async training needs parameter_sync_step 4 x ppo_mini_batch_size 8 = 32",
            )
        ],
        None,
    ),
    (
        "types: lists of files are fine where verl's default is one file",
        {"data.train_files": ["/a.parquet", "/b.parquet"], "trainer.logger": "console"},
        [],
        None,
    ),
    (
        "types: nnodes=abc, a string batch, a bool as a string",
        {
            "trainer.nnodes": "abc",
            "data.train_batch_size": "foo",
            A + "use_kl_loss": "maybe",
            A + "clip_ratio": "x",
        },
        [
            ("data.train_batch_size", "is 'foo': verl needs a whole number >= 1 here"),
            ("trainer.nnodes", "is 'abc': verl needs a whole number >= 1 here"),
            (A + "use_kl_loss", "is 'maybe' (str); verl's default is False, a bool"),
            (A + "clip_ratio", "is 'x' (str); verl's default is 0.2, a number"),
        ],
        "set data.train_batch_size to a positive integer",
    ),
]


@pytest.mark.parametrize("name,changes,expected,fix", CASES, ids=[c[0] for c in CASES])
def test_each_rule_names_the_key_and_the_numbers(name, changes, expected, fix):
    found = rules.run(view(changes, engine="megatron" if "megatron" in str(changes) else "dp"))
    got = [(p.key, next((e for _, e in expected if e in p.message), p.message)) for p in found]
    assert got == expected, found
    if fix:
        assert fix in found[0].fix


def test_every_broken_rule_is_reported_at_once():
    found = rules.run(view({A + "loss_agg_mode": "foo", R + "name": "hf", A + "ppo_mini_batch_size": 64}))
    assert {p.key for p in found} == {A + "loss_agg_mode", R + "name", A + "ppo_mini_batch_size"}


def test_the_table_names_where_verl_enforces_each_rule():
    assert len({r.name for r in rules.RULES}) == len(rules.RULES)
    assert all(r.source for r in rules.RULES)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # found by benchmarks/diff_validate.py: verl's Hydra instantiate / config dataclasses refuse these
        (A + "optim._target_", 1),
        (A + "fsdp_config._target_", [1, 2]),
        (A + "checkpoint._target_", ""),
        (A + "loss_agg_mode", ["token-mean"]),
    ],
)
def test_a_value_of_the_wrong_type_for_a_class_path_or_a_text_is_named(key, value):
    found = rules.run(view({key: value}))
    assert {p.key for p in found} == {key} and any("a string" in p.message for p in found), found


def test_file_keys_still_take_lists():
    assert rules.run(view({"data.train_files": ["/a.parquet", "/b.parquet"]})) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (A + "optim.warmup_style", ""),
        (A + "optim.warmup_style", "linear"),
        (A + "optim.lr_scheduler_type", "x"),
    ],
)
def test_the_fsdp_optimizer_takes_constant_or_cosine(key, value):
    found = rules.run(view({key: value}))
    assert [p.key for p in found] == [key] and "constant or cosine" in found[0].message, found
    assert rules.run(view({key: "cosine"})) == []


def test_a_default_that_selects_another_key_has_its_fallbacks_type():
    key = A + "profiler.tool_config.precision_debugger.strict"  # ${oc.select:global_profiler...,False}
    found = rules.run(view({key: [1, 2]}))
    assert [p.key for p in found] == [key] and "a bool" in found[0].message, found
    assert rules.run(view({key: True})) == []


def test_a_mapping_for_the_actor_strategy_is_named_not_a_crash():
    found = rules.run(view({A + "strategy": {"a": 1}}))  # found by the harness: a TypeError before
    assert [p.key for p in found] == [A + "strategy"], found


P = A + "profiler."


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("global_profiler.finish_hook_ranks", "0", "a list"),  # ProfilerConfig: set | list | tuple
        (P + "ranks", "0", "a list"),
        (P + "finish_hook_cmd", 3, "a string or null"),
        (P + "tool_config.torch.schedule.skip_first", -1, "a whole number >= 0"),
        (P + "tool_config.torch_memory.stack_depth", 0, "a whole number >= 1"),
        (P + "tool_config.npu.contents", ["npu", "gpu"], "takes only npu, cpu"),
        (P + "tool_config.torch.contents", ["npu"], "takes only cuda, cpu"),
        (P + "tool_config.npu.level", "level3", "takes only level_none"),
    ],
)
def test_the_profiler_configs_own_asserts_are_ours(key, value, words):
    """verl/utils/profiler/config.py asserts these in the config classes' __post_init__ on the workers;
    the harness found them accepted by our dry run and refused by verl."""
    found = rules.run(view({key: value}))
    assert [p.key for p in found if p.key == key] == [key], found
    assert any(words in p.message for p in found if p.key == key), found


def test_good_profiler_values_pass_and_the_token_window_must_open():
    good = {
        "global_profiler.finish_hook_ranks": [0],
        P + "tool_config.npu.contents": ["npu", "cpu"],
        P + "tool_config.npu.level": "level1",
        P + "tool_config.torch.schedule.skip_first": 0,
    }
    assert rules.run(view(good)) == []
    window = {P + "tool_config.npu.profile_token_start": 5, P + "tool_config.npu.profile_token_end": 5}
    found = rules.run(view(window))
    assert [p.key for p in found] == [P + "tool_config.npu.profile_token_end"], found


# -- found by the coverage map (tests/diffval/maps/verl-0.9.1.yaml): the engine config classes' asserts -----
@pytest.mark.parametrize(
    ("engine", "changes", "key", "words"),
    [
        ("megatron", {A + "megatron.dtype": "float32"}, A + "megatron.dtype", "bfloat16, float16"),
        ("megatron", {A + "megatron.router_replay.mode": "R9"}, A + "megatron.router_replay.mode", "R3"),
        (
            "megatron",
            {A + "megatron.dynamic_context_parallel": True},
            A + "megatron.max_seqlen_per_dp_cp_rank",
            "positive whole number",
        ),
        ("megatron", {A + "optim.exp_avg_dtype": "fp8"}, A + "optim.exp_avg_dtype", "fp32, float32"),
        ("dp", {A + "fsdp_config.strategy": "ddp"}, A + "fsdp_config.strategy", "fsdp_turbo"),
        ("torchtitan", {A + "torchtitan.attn_type": "sdpa"}, A + "torchtitan.attn_type", "flex"),
        ("torchtitan", {A + "torchtitan.spmd_backend": "x"}, A + "torchtitan.spmd_backend", "full_dtensor"),
        (
            "veomni",
            {A + "veomni.activation_offload_host_cache_limit_gb": -1.0},
            A + "veomni.activation_offload_host_cache_limit_gb",
            "finite value >= 0",
        ),
        (
            "veomni",
            {A + "veomni.router_replay.mode": "R2", "actor_rollout_ref.model.use_remove_padding": False},
            A + "veomni.router_replay.mode",
            "remove-padding",
        ),
    ],
)
def test_the_engine_config_classes_asserts_are_ours(engine, changes, key, words):
    found = rules.run(view(changes, engine=engine))
    assert [p.key for p in found] == [key] and words in found[0].message, found


def test_the_torchtitan_optimizer_is_not_held_to_the_fsdp_schedules():
    # TorchtitanOptimizerConfig leaves lr_scheduler_type null; FSDPOptimizerConfig's choices are not its own
    assert rules.run(view(engine="torchtitan")) == []


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"critic.model.target_modules": 3}, "critic.model.target_modules"),
        ({"critic.model.target_modules": ["q_proj", 3]}, "critic.model.target_modules"),
    ],
)
def test_target_modules_takes_a_text_or_a_list_of_texts(changes, key):
    assert [p.key for p in rules.run(view(changes))] == [key]
    assert rules.run(view({"critic.model.target_modules": ["q_proj", "v_proj"]})) == []


def test_the_critics_model_names_one_architecture(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["A", "B"]}), encoding="utf-8")
    ppo = {
        "algorithm.adv_estimator": "gae",
        "critic.model.path": str(tmp_path),
        "critic.ppo_micro_batch_size_per_gpu": 1,
    }
    assert [p.key for p in rules.run(view(ppo))] == ["critic.model.path"]
    one = {**ppo, "critic.model.override_config": {"architectures": ["A"]}}
    assert rules.run(view(one)) == []


def test_the_veomni_critic_needs_its_micro_batch_over_the_devices():
    ppo = {
        "algorithm.adv_estimator": "gae",
        "critic.model.path": "/m",
        "critic.ppo_micro_batch_size": 1,
        "critic.ppo_micro_batch_size_per_gpu": None,
    }
    found = rules.run(view(ppo, engine="veomni"))
    assert "critic.ppo_micro_batch_size" in {p.key for p in found}, found
