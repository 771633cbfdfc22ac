"""The MindSpeed-RL config reader: the typed object, the fills, the yaml round trip, the key lists."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from msrl_helpers import DELETE, context

from ascendfactory.backends.common.mindspeed_rl_experiment import keys as keyfiles
from ascendfactory.backends.common.mindspeed_rl_experiment.read import load_yaml, read_config, render_yaml
from ascendfactory.errors import ConfigError

MIRROR = Path("/work/.mirror/Ascend+MindSpeed-RL/repo")


def messages(excinfo: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return [f"{p.key}: {p.message}" for p in excinfo.value.problems]


def test_the_base_experiment_reads_into_the_numbers_mindspeed_rl_derives(read):
    cfg = read()
    d = cfg.derived
    assert (d.nnodes, d.npus_per_node, d.cluster_npus, d.actor_npus, d.world_size) == (1, 16, 16, 16, 16)
    assert (d.tp, d.pp, d.cp, d.actor_dp) == (2, 2, 1, 4)
    assert (d.infer_tp, d.infer_pp, d.rollout_dp) == (1, 1, 16)
    assert (d.gbs, d.n_samples, d.samples_per_iteration, d.mbs) == (32, 8, 256, 4)
    assert (d.mini_batch_prompts, d.mini_batch_samples) == (32, 256)
    # validate_rl_args' defaults (master): GBS*n // DP for the actor, GBS*n // nodes for the rule reward
    assert d.dispatch == {
        "actor_rollout": 16,
        "actor_logprob": 64,
        "adv": 256,
        "ref": 64,
        "actor_update": 64,
        "reward": 256,
    }
    assert d.reward_metrics == ("math_17k_acc_rewards/mean",)
    assert (d.heads, d.kv_heads, d.num_layers) == (28, 4, 28)
    # the views: MegatronConfig defaults under the model entry under megatron_training under actor_config
    assert cfg.actor["bf16"] is True and cfg.actor["micro_batch_size"] == 4
    assert cfg.actor["num_attention_heads"] == 28 and cfg.actor["pad_to_multiple_of"] == 2
    assert cfg.ref is cfg.actor and cfg.reward is cfg.actor  # integrated worker
    assert cfg.rl["mini_batch_size"] == 256  # RLConfig holds it in samples
    assert cfg.generate["dtype"] == "bfloat16" and cfg.sampling["top_k"] == -1


def test_the_reader_fills_stage_model_entry_and_npus(read):
    cfg = read()
    mt = cfg.sections["megatron_training"]
    assert mt["stage"] == "ray_grpo" and mt["model"] == "qwen2_5_7b"
    assert cfg.sections["rl_config"]["actor_resource"] == {"num_npus": 16}
    assert cfg.model_generated and list(cfg.sections["model"]) == ["qwen2_5_7b"]
    assert list(cfg.sections)[:3] == ["model", "megatron_training", "actor_config"]


def test_the_generated_model_entry_is_mindspeed_rls_own_qwen25_7b():
    """Expected: MindSpeed-RL configs/model/qwen25_7b.yaml (master 05a90d77, identical on 2.1.0 d9e8db94)."""
    from ascendfactory.backends.common.mindspeed_rl_experiment.read import model_entry
    from ascendfactory.config.catalog import from_catalog

    expected = {
        "use_mcore_models": True,
        "num_layers": 28,
        "hidden_size": 3584,
        "ffn_hidden_size": 18944,
        "num_attention_heads": 28,
        "rotary_base": 1000000,
        "max_position_embeddings": 32768,
        "make_vocab_size_divisible_by": 1,
        "padded_vocab_size": 152064,
        "untie_embeddings_and_output_weights": True,
        "add_qkv_bias": True,
        "disable_bias_linear": True,
        "group_query_attention": True,
        "num_query_groups": 4,
        "position_embedding_type": "rope",
        "norm_epsilon": 1e-6,
        "normalization": "RMSNorm",
        "swiglu": True,
        "attention_softmax_in_fp32": True,
    }
    assert model_entry(from_catalog("qwen2.5-7b")) == expected


def test_a_given_model_entry_is_used_and_checked(read):
    entry = {
        "num_layers": 28,
        "num_attention_heads": 28,
        "hidden_size": 3584,
        "num_query_groups": 4,
        "group_query_attention": True,
        "not_a_key": 1,
    }
    with pytest.raises(ConfigError) as e:
        read({"backend_config": {"model": {"qwen25_7b": entry}, "megatron_training": {"model": "qwen25_7b"}}})
    assert messages(e) == [
        "backend_config.model.qwen25_7b.not_a_key: not a MegatronConfig key of MindSpeed-RL master; "
        'MindSpeed-RL master stops with "The key: not_a_key is missing, causing the setup to fail" '
        "(on the cluster)"
    ]
    del entry["not_a_key"]
    cfg = read(
        {"backend_config": {"model": {"qwen25_7b": entry}, "megatron_training": {"model": "qwen25_7b"}}}
    )
    assert not cfg.model_generated and cfg.sections["model"] == {"qwen25_7b": entry}
    with pytest.raises(ConfigError) as e:
        read({"backend_config": {"model": {"qwen25_7b": entry}, "actor_config": {"model": "qwen3_8b"}}})
    assert "names the model entry 'qwen3_8b', which backend_config.model does not have" in messages(e)[0]


def test_yaml_round_trip(read):
    cfg = read({"backend_config": {"rl_config": {"use_tensorboard": True}}})
    cfg = cfg.replace_values({"actor_config.load": "/abs/ckpt", "actor_config.finetune": True})
    text = render_yaml(cfg)
    assert load_yaml(text) == cfg.sections
    assert cfg.actor["load"] == "/abs/ckpt" and cfg.actor["finetune"] is True
    assert text.startswith("# MindSpeed-RL master configuration")


def test_replace_values_removes_and_respells(read):
    cfg = read({"backend_config": {"actor_config": {"no-load-optim": True}}})
    cfg = cfg.replace_values({"actor_config.no_load_optim": False, "megatron_training.save_interval": None})
    assert cfg.sections["actor_config"]["no_load_optim"] is False
    assert "no-load-optim" not in cfg.sections["actor_config"]
    assert "save_interval" not in cfg.sections["megatron_training"] and cfg.actor["save_interval"] is None


@pytest.mark.parametrize(
    ("version", "key", "accepted"),
    [
        ("2.1.0", ("rl_config", "td_status_log"), True),
        ("master", ("rl_config", "td_status_log"), False),
        ("2.1.0", ("rl_config", "use_kl_in_reward"), False),
        ("2.2.0", ("rl_config", "use_kl_in_reward"), True),
        ("2.3.0", ("rl_config", "hccl_buffersize"), False),
        ("master", ("rl_config", "hccl_buffersize"), True),
        ("2.3.0", ("rl_config", "share_backbone"), False),
        ("master", ("rl_config", "share_backbone"), True),
        ("2.2.0", ("actor_config", "moe_intermediate_size"), True),
        ("2.3.0", ("actor_config", "moe_intermediate_size"), False),
        ("2.3.0", ("actor_config", "moe_ffn_hidden_size"), True),
        ("2.2.0", ("actor_config", "moe_ffn_hidden_size"), False),
    ],
)
def test_keys_are_checked_against_the_version_in_use(read, version, key, accepted):
    section, name = key
    value = 1024 if ("size" in name or "buffer" in name) else False
    change = {"backend_config": {section: {name: value}}}
    if accepted:
        read(change, version=version)
        return
    with pytest.raises(ConfigError) as e:
        read(change, version=version)
    assert messages(e)[0].startswith(
        f"backend_config.{section}.{name}: not a "
        f"{'RLConfig' if section == 'rl_config' else 'MegatronConfig'} key of MindSpeed-RL {version}"
    )


def test_unknown_sections_and_subkeys_are_named(read):
    with pytest.raises(ConfigError) as e:
        read(
            {
                "backend_config": {
                    "critic_config": {},
                    "rl_config": {
                        "actor_resource": {"num_npus": 16, "npus": 2},
                        "integrated_mode_config": {"ref_load": "/x"},
                    },
                    "generate_config": {"sampling_config": {"max-tokens": 10}},
                }
            }
        )
    got = messages(e)
    assert got[0].startswith("backend_config.critic_config: not a section of a MindSpeed-RL experiment")
    assert got[1].startswith(
        "backend_config.rl_config.actor_resource.npus: not a RLConfig.actor_resource key"
    )
    # sub-dict keys are checked as written: MindSpeed-RL does not turn dashes into underscores there
    assert got[2].startswith(
        "backend_config.generate_config.sampling_config.max-tokens: not a GenerateConfig.sampling_config key"
    )
    assert got[3].startswith(
        "backend_config.rl_config.integrated_mode_config.ref_load: MindSpeed-RL reads only "
        "ref_model_load_path here"
    )


def test_value_kinds_and_duplicates(read):
    with pytest.raises(ConfigError) as e:
        read(
            {
                "backend_config": {
                    "megatron_training": {"bf16": "false", "seq-length": 1024},
                    "rl_config": {"verifier_function": "base_acc", "n_samples_per_prompt": "8"},
                }
            }
        )
    got = sorted(messages(e))
    assert got[0].startswith("backend_config.megatron_training.bf16: must be true or false (got 'false'")
    assert got[1].startswith(
        "backend_config.megatron_training.seq-length: given twice (as seq_length and seq-length)"
    )
    assert got[2] == "backend_config.rl_config.n_samples_per_prompt: must be a number (got '8')"
    assert got[3] == "backend_config.rl_config.verifier_function: must be a list (got 'base_acc')"
    assert len(got) == 4


def test_version_choice(tmp_path, clean_env):
    ctx = context(tmp_path, {"backend_config": {"mindspeed_rl_version": "2.1.0"}})
    cfg = read_config(ctx)
    assert cfg.keys.version == "2.1.0" and cfg.derived.reward_metrics == ("grpo/math_17k_acc_rewards/mean",)
    assert cfg.version_reason == "backend_config.mindspeed_rl_version: 2.1.0"
    cfg = read_config(context(tmp_path, {"backend_config": {"mindspeed_rl_version": DELETE}}))
    assert cfg.keys.version == keyfiles.shipped_versions()[-1]
    assert cfg.warnings[0].startswith("no MindSpeed-RL checkout found: checking against MindSpeed-RL master")
    with pytest.raises(ConfigError) as e:
        read_config(context(tmp_path, {"backend_config": {"mindspeed_rl_version": "2.0.0"}}))
    assert messages(e) == [
        "backend_config.mindspeed_rl_version: '2.0.0' is not a MindSpeed-RL version with a shipped key list"
    ]


# -- the key lists ----------------------------------------------------------------------------------------
FAKE_RL = {
    "mindspeed_rl/config_cls/base_config.py": """
        class BaseConfig:
            def update(self, config_dict, model_config_dict=None):
                for key, value in config_dict.items():
                    if not hasattr(self, key):
                        raise ValueError(f"The key: {key} is missing")
    """,
    "mindspeed_rl/config_cls/megatron_config.py": """
        class MegatronConfig(BaseConfig):
            def __init__(self, training_config, model_config):
                self.tensor_model_parallel_size = 1
                self.initial_loss_scale = 2 ** 32
                if training_config:
                    self.bf16 = True
                self.update(training_config, model_config)
                self.pad_to_multiple_of = self.tensor_model_parallel_size
    """,
    "mindspeed_rl/config_cls/rl_config.py": """
        class RLConfig(BaseConfig):
            def __init__(self, config_dict):
                self.actor_resource = {"num_npus": None}
                self.n_samples_per_prompt = config_dict.get('n_samples_per_prompt', 1)
                self.max_packing_token_size = 4096
                self.ref_max_packing_token_size = self.max_packing_token_size
                if config_dict.get("actor_resource") is not None:
                    for key, _ in config_dict["actor_resource"].items():
                        if key not in self.actor_resource:
                            raise ValueError(key)
                self.update(config_dict)
    """,
    "mindspeed_rl/config_cls/generate_config.py": """
        class GenerateConfig(BaseConfig):
            def __init__(self, config_dict):
                self.sampling_config = {"max_tokens": 128}
                self.update(config_dict)
    """,
    "mindspeed_rl/config_cls/mindstudio_config.py": """
        class ProfilerConfig(BaseConfig):
            def __init__(self, config_dict, role=""):
                self.role = role
                self.update(config_dict)
        class MsprobeConfig(BaseConfig):
            def __init__(self, config_dict, role=""):
                self.msprobe = False
                self.update(config_dict)
    """,
    "mindspeed_rl/config_cls/data_handler_config.py": """
        class DataHandlerConfig(BaseConfig):
            def __init__(self, config_dict):
                self.input = None
                if config_dict is not None:
                    self.update(config_dict)
                self.late = 1
    """,
    "mindspeed_rl/config_cls/validate_config.py": """
        def validate_data_handler_config(config):
            support_prompt_type_handler = ["AlpacaStyleInstructionHandler"]
    """,
    "mindspeed_rl/models/rule_verifier.py": """
        def verifier(responses, data, config, **kwargs):
            rule_verifier_function = {"acc": accuracy_reward, "base_acc": base_model_accuracy_reward}
            for idx, fun_verifier in enumerate(config.verifier_function):
                metrics[f'grpo/{fun_verifier}_rewards/mean'] = scores
    """,
    "configs/model/templates.json": '[{"name": "empty"}, {"name": "qwen_r1"}]',
    "cli/train_grpo.py": "",
    "cli/preprocess_data.py": "",
}


def fake_checkout(root: Path) -> Path:
    for rel, text in FAKE_RL.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_the_source_parser_reads_what_base_config_update_accepts(tmp_path):
    ks = keyfiles.from_checkout(str(fake_checkout(tmp_path / "MindSpeed-RL")))
    mc = ks.classes["MegatronConfig"]
    # assignments before self.update(...) count (nested ones too); pad_to_multiple_of, set after, does not
    assert mc.keys == {
        "tensor_model_parallel_size": 1,
        "initial_loss_scale": keyfiles.Expr("2 ** 32"),
        "bf16": True,
    }
    rl = ks.classes["RLConfig"]
    assert rl.keys["n_samples_per_prompt"] == 1  # config_dict.get('n_samples_per_prompt', 1)
    assert rl.keys["ref_max_packing_token_size"] == 4096  # self.max_packing_token_size, as at __init__ time
    assert rl.checked == {"actor_resource": ("num_npus",)}
    assert ks.classes["GenerateConfig"].checked == {}  # it has a sampling_config dict, but no check loop
    assert ks.classes["ProfilerConfig"].keys == {"role": keyfiles.Expr("role")}
    assert ks.classes["DataHandlerConfig"].keys == {"input": None}
    assert ks.unknown_keys == "error" and ks.verifiers == ("acc", "base_acc")
    assert ks.reward_metric == "grpo/{verifier}_rewards/mean"
    assert ks.prompt_types == ("empty", "qwen_r1")
    assert ks.version == "checkout" and ks.closest in keyfiles.shipped_versions()


def test_a_checkout_is_read_with_its_own_keys(tmp_path, clean_env):
    root = fake_checkout(tmp_path / "MindSpeed-RL")
    ctx = context(tmp_path, {"scripts_dir": str(root), "backend_config": {"actor_config": {"lr": 1e-6}}})
    with pytest.raises(ConfigError) as e:
        read_config(ctx)
    assert any(
        m.startswith("backend_config.actor_config.lr: not a MegatronConfig key of MindSpeed-RL checkout")
        for m in messages(e)
    )


def test_shipped_files_round_trip_through_render_and_parse():
    for version in keyfiles.shipped_versions():
        ks = keyfiles.shipped(version)
        again = keyfiles.parse_file(keyfiles.render(ks, ["header"]))
        assert again == ks
        assert set(ks.classes) == {
            "MegatronConfig",
            "RLConfig",
            "GenerateConfig",
            "ProfilerConfig",
            "MsprobeConfig",
            "DataHandlerConfig",
        }
    # the counts of master's config classes (mindspeed_rl/config_cls/*.py), generated when this was written
    counts = {n: len(c.keys) for n, c in keyfiles.shipped("master").classes.items()}
    assert counts == {
        "MegatronConfig": 174,
        "RLConfig": 106,
        "GenerateConfig": 26,
        "ProfilerConfig": 16,
        "MsprobeConfig": 13,
        "DataHandlerConfig": 35,
    }
    assert keyfiles.shipped("2.1.0").reward_metric == "grpo/{verifier}_rewards/mean"
    assert keyfiles.shipped("2.2.0").reward_metric == "{verifier}_rewards/mean"


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no MindSpeed-RL mirror on this machine")
def test_the_generator_reproduces_the_shipped_files(tmp_path):
    script = Path(__file__).resolve().parents[4] / "scripts" / "gen_mindspeed_rl_keys.py"
    subprocess.run(
        ["python3", str(script), "--repo", str(MIRROR), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for version in keyfiles.shipped_versions():
        assert (tmp_path / f"{version}.txt").read_text() == (keyfiles.KEYS_DIR / f"{version}.txt").read_text()


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no MindSpeed-RL mirror on this machine")
@pytest.mark.parametrize("version", keyfiles.ORDER)
def test_a_real_checkout_is_named_after_its_version(tmp_path, version):
    """The files of each MindSpeed-RL branch, laid out as a checkout, are recognised as that version."""
    for rel in sorted(
        {
            *keyfiles.SOURCE_FILES.values(),
            keyfiles.BASE_CONFIG,
            keyfiles.VALIDATE,
            keyfiles.VERIFIERS,
            keyfiles.TEMPLATES,
        }
    ):
        text = subprocess.run(
            ["git", "-C", str(MIRROR), "show", f"{version}:{rel}"], check=True, capture_output=True, text=True
        ).stdout
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert keyfiles.from_checkout(str(tmp_path)).version == version
