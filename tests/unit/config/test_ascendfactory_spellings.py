"""AscendFactory's own spellings: the flat hyperparameters on the command line, MindSpore Transformers'
`callbacks` (docs/sources.md), and the top-level keys of its documents that live elsewhere here."""

from __future__ import annotations

import pytest

from ascendfactory.cli._experiment_args import load_from_args
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

MULTI = str(REPO / "cfgs" / "multi_model_cfgs.yaml")
QUICK = str(REPO / "cfgs" / "quickstart.yaml")


def test_flat_hyperparameters_on_the_command_line_go_where_they_go_in_an_old_style_file():
    args = [MULTI, "qwen2.5-7b", "full-4k", "--SEQ_LEN=128", "--train-iters=20", "--NPUS_PER_NODE=2"]
    args += ["--save-total-limit=2", "--bf16=false"]
    loaded = load_from_args(args)
    training = loaded.config.backend_config["training"]
    assert training["seq-length"] == 128 and training["train-iters"] == 20 and training["bf16"] is False
    assert loaded.config.env.NPUS_PER_NODE == 2 and loaded.config.save_total_limit == 2
    assert loaded.source_of("backend_config.training.seq-length") == "command line"


def test_flat_keys_work_on_a_new_style_file_and_slips_of_top_level_keys_keep_their_hint():
    loaded = load_from_args([QUICK, "--train-iters=7", "--SEQ_LEN=64"])
    assert loaded.config.backend_config["training"]["train-iters"] == 7
    assert loaded.config.backend_config["training"]["seq-length"] == 64
    with pytest.raises(ConfigError, match=r"exp_nme: unknown key \(did you mean: exp_name\?\)"):
        load_from_args([QUICK, "--exp_nme=x"])


def test_modelarts_mount_type_is_refused_with_the_reason():
    with pytest.raises(ConfigError) as err:
        load_from_args([QUICK, "--mount_type=OBS"])
    assert "ModelArts' storage switch" in err.value.problems[0].message


def test_seed_001_callbacks_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(open(QUICK).read() + "\ncallbacks:\n  - type: MFLossMonitor\n    per_print_times: 1\n")
    with pytest.raises(ConfigError) as err:
        load_from_args([str(path)])
    [problem] = err.value.problems
    assert problem.key == "callbacks" and "MFLossMonitor" in problem.message and "log-interval" in problem.fix


def test_save_total_limit_below_zero_gets_a_fix():
    with pytest.raises(ConfigError) as err:
        load_from_args([QUICK, "--save_total_limit=-1"])
    assert err.value.problems[0].fix == "set save_total_limit: 0 or more (0 keeps every checkpoint)"
