import pytest

from ascendfactory.backends.registry import directory
from ascendfactory.config.load import load_experiment
from ascendfactory.config.tree import merge_layers
from ascendfactory.errors import ConfigError

MINIMAL = """
backend: torch
af_model_name: tiny-demo
exp_name: t
af_output_dir: /tmp/out/${af_model_name}-${exp_name}
backend_config:
  training:
    lr: 1e-5
    seq-length: 128
"""


def test_new_style_loads_types_and_interpolates(write_yaml):
    loaded = load_experiment(write_yaml(MINIMAL))
    cfg = loaded.config
    assert cfg.backend == "torch" and cfg.af_output_dir == "/tmp/out/tiny-demo-t"
    assert cfg.backend_config["training"]["lr"] == 1e-5  # YAML 1.1 would have made this a string
    assert cfg.ckpt_load_type == 1 and cfg.env.NNODES == 1 and loaded.style == "new"


def test_overrides_win_and_interpolation_sees_them(write_yaml):
    loaded = load_experiment(
        write_yaml(MINIMAL),
        ["--exp_name=x", "--backend_config.training.lr", "2e-5", "--env.NODE_RANK=1", "--env.NNODES=2"],
    )
    assert loaded.config.af_output_dir == "/tmp/out/tiny-demo-x"
    assert loaded.config.backend_config["training"]["lr"] == 2e-5
    assert loaded.config.env.NODE_RANK == 1
    assert loaded.source_of("backend_config.training.lr") == "command line"
    assert loaded.source_of("backend_config.training.seq-length").endswith("exp.yaml")


def test_unknown_top_level_key_suggests_the_nearest(write_yaml):
    with pytest.raises(ConfigError) as e:
        load_experiment(write_yaml(MINIMAL + "train_auto_resum: true\n"))
    assert "train_auto_resum: unknown key (did you mean: train_auto_resume" in str(e.value)
    assert e.value.exit_code == 2


def test_every_schema_problem_reported_at_once(write_yaml):
    text = MINIMAL.replace("backend: torch", "backend: torchx") + "ckpt_load_type: 5\nenv: {NNODE: 2}\n"
    with pytest.raises(ConfigError) as e:
        load_experiment(write_yaml(text), backends=directory())
    msg = str(e.value)
    assert "backend:" in msg and "'torchx'" in msg
    assert "ckpt_load_type:" in msg
    assert "env.NNODE looks like a misspelling of env.NNODES" in msg
    assert len(e.value.problems) == 3


def test_missing_required_keys(write_yaml):
    with pytest.raises(ConfigError) as e:
        load_experiment(write_yaml("backend: torch\n"))
    keys = {p.key for p in e.value.problems}
    assert keys == {"af_model_name", "exp_name", "af_output_dir"}


def test_node_rank_must_be_below_nnodes(write_yaml):
    with pytest.raises(ConfigError, match=r"NODE_RANK \(2\) must be < NNODES \(2\)"):
        load_experiment(write_yaml(MINIMAL), ["--env.NNODES=2", "--env.NODE_RANK=2"])


def test_extra_env_vars_are_exported_as_strings(write_yaml):
    loaded = load_experiment(
        write_yaml(MINIMAL + "env: {HCCL_CONNECT_TIMEOUT: 1200, GLOO_SOCKET_IFNAME: eth0}\n")
    )
    assert loaded.config.env.extra_vars() == {"HCCL_CONNECT_TIMEOUT": "1200", "GLOO_SOCKET_IFNAME": "eth0"}


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("a: [1,\n", "not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping"),
    ],
)
def test_malformed_files(write_yaml, text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_experiment(write_yaml(text))


def test_missing_file_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="ascendfactory-cli config"):
        load_experiment(tmp_path / "nope.yaml")


def test_merge_layers_is_deep_and_later_wins():
    assert merge_layers({"a": {"b": 1, "c": 2}, "x": 1}, {"a": {"c": 3}}, {"x": {"y": 1}}) == {
        "a": {"b": 1, "c": 3},
        "x": {"y": 1},
    }
