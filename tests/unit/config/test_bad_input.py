"""Malformed experiment files: a ConfigError naming the key, in well under a second, never a traceback."""

from __future__ import annotations

import time

import pytest

from ascendfactory.cli.app import main
from ascendfactory.config.bounds import MAX_DEPTH, MAX_STRING, MAX_VALUES, check_tree
from ascendfactory.config.load import load_experiment
from ascendfactory.config.yamlio import loads
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

QUICK = (REPO / "cfgs" / "quickstart.yaml").read_text()


def _error(path, *overrides) -> str:
    with pytest.raises(ConfigError) as e:
        load_experiment(path, list(overrides))
    return e.value.render()


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines)


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("backend_config:\n  training:\n    1: 2\n", "backend_config.training.1", "quote it"),
        ("backend_config:\n  training:\n    on: 2\n", "backend_config.training.True", "booleans"),
        # a key read as a number is named as the file wrote it, and the fix quotes that text
        ("backend_config:\n  training:\n    0E0: 2\n", "backend_config.training.0E0", "quote it: '0E0'"),
        ("backend_config:\n  training:\n    1e3: 2\n", "backend_config.training.1e3", "quote it: '1e3'"),
        ('backend_config:\n  x: "a\\0b"\n', "backend_config.x", "NUL"),
        ("backend_config:\n  training:\n    lr: .inf\n", "backend_config.training.lr", "not a finite number"),
        ("backend_config:\n  training:\n    lr: .nan\n", "backend_config.training.lr", "not a finite number"),
        ("backend_config:\n  training:\n    when: 2024-01-01\n", "backend_config.training.when", "quote it"),
        ("extra: " + "[" * 200 + "]" * 200 + "\n", "extra.0.0", f"deeper than {MAX_DEPTH}"),
        ("backend_config:\n  x: &a [1, *a]\n", "backend_config.x", "contains itself"),
    ],
)
def test_unusable_values_are_named(write_yaml, text, key, words):
    path = write_yaml("backend: torch\naf_model_name: m\nexp_name: e\naf_output_dir: o\n" + text)
    message = _error(path)
    assert key in message and words in message


def test_alias_bomb_is_refused_fast(write_yaml):
    path = write_yaml(QUICK.replace("backend_config:\n", "backend_config:\n  bomb:\n    ") + "\n")
    text = QUICK + "\n" + _bomb(10) + "\n"  # 9**10 values once expanded
    path.write_text(text)
    t0 = time.perf_counter()
    message = _error(path)
    assert time.perf_counter() - t0 < 1.0
    assert f"more than {MAX_VALUES:,} values" in message


def test_interpolation_that_doubles_is_refused_fast(write_yaml):
    refs = "".join(
        f'  d{i}: "${{backend_config.d{i - 1}}}${{backend_config.d{i - 1}}}"\n' for i in range(1, 60)
    )
    path = write_yaml(QUICK.replace("backend_config:\n", "backend_config:\n  d0: xxxxxxxxxx\n" + refs))
    t0 = time.perf_counter()
    message = _error(path)
    assert time.perf_counter() - t0 < 1.0
    assert "backend_config.d17" in message and f"more than {MAX_STRING:,}" in message
    assert message.count("backend_config.d17") == 1  # reached through several references, reported once


def test_a_section_cannot_be_part_of_a_text(write_yaml):
    path = write_yaml(QUICK.replace("exp_name: quickstart-sft", "exp_name: run-${env}"))
    assert "exp_name: ${env} is a section" in _error(path)


def test_duplicate_keys_name_both_lines(write_yaml):
    path = write_yaml(QUICK.replace("  training:\n", "  training:\n    lr: 1.0\n"))
    message = _error(path)
    assert "backend_config.training.lr: given twice, on line" in message


def test_merge_keys_may_be_overridden():
    assert loads("a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  p: 3\n")["b"] == {"p": 3, "q": 2}


def test_non_utf8_file_names_the_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_bytes(b"backend: torch\naf_model_name: \xff\xfe\n")
    assert "line 2: not UTF-8 text" in _error(path)


@pytest.mark.parametrize(
    "override", ["--env.MASTER_PORT=true", "--save_total_limit=false", "--ckpt_load_type=true"]
)
def test_booleans_are_no_numbers(write_yaml, override):
    key = override[2:].split("=")[0]
    message = _error(write_yaml(QUICK), override)
    assert f"{key}: expected a number, got the boolean" in message


@pytest.mark.parametrize("override", ["--backend_config.training.lr=.inf", "--backend_config.x=a\0b"])
def test_overrides_are_checked_like_the_file(write_yaml, override):
    key = override[2:].split("=")[0]
    message = _error(write_yaml(QUICK), override)
    assert f"command line: {key}:" in message


def test_check_tree_counts_aliases_without_expanding_them():
    leaf = ["x"] * 10
    level = leaf
    for _ in range(8):
        level = [level] * 10  # 10**9 values once expanded, a few hundred objects in memory
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="expands to more than"):
        check_tree({"a": level})
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize(
    "override, key",
    [
        ("--backend_config.training=5", "backend_config.training: must be a mapping"),
        (
            "--backend_config.preprocess_data.workers=-3",
            "backend_config.preprocess_data.workers: must be a whole",
        ),
        (
            "--backend_config.preprocess_data.workers=abc",
            "backend_config.preprocess_data.workers: must be a whole",
        ),
        ("--backend_config.training.tokenizer-name-or-path=5", "tokenizer-name-or-path: must be a path"),
        ("--backend_config.training.lr=abc", "backend_config.training.lr: invalid float value"),
        ("--backend_config.preprocess_data.log-interval=0", "log-interval: must be >= 1"),
    ],
)
def test_backend_sections_and_values_exit_2_naming_the_key(tmp_path, capsys, override, key):
    argv = [
        "train",
        str(REPO / "cfgs" / "quickstart.yaml"),
        f"--af_output_dir={tmp_path}",
        override,
        "--dry-run",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err and "internal error" not in err


def test_a_layout_error_does_not_hide_the_other_problems(tmp_path, capsys):
    argv = [
        "train",
        str(REPO / "cfgs" / "quickstart.yaml"),
        f"--af_output_dir={tmp_path}",
        "--backend_config.training.tensor-model-parallel-size=3",
        "--backend_config.training.frob=1",
        "--backend_config.training.lr=abc",
        "--dry-run",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    for key in (
        "tensor-model-parallel-size: tp(3)",
        "training.frob: not a flag",
        "training.lr: invalid float",
    ):
        assert key in err


@pytest.mark.parametrize(
    "override, words",
    [
        (
            "--monitor_config.local_loss_format=csv",
            "monitor_config.local_loss_format.0: Input should be 'log'",
        ),
        (
            "--monitor_config.target=[a(]",
            "monitor_config.target: 'a(' is not a regular expression",
        ),
        ("--monitor_config.step_interval=0", "monitor_config.step_interval: Input should be greater than"),
        (
            "--monitor_config.monitor_onn=true",
            "monitor_config.monitor_onn: unknown key (did you mean: monitor_on?)",
        ),
        ("--tensorboard.tensorboard_queue_size=-1", "tensorboard.tensorboard_queue_size: Input should be"),
        ("--tensorboard.tensorboard_dir=[a]", "tensorboard.tensorboard_dir: Input should be a valid string"),
    ],
)
def test_monitor_and_tensorboard_keys_are_checked_by_the_dry_run(tmp_path, capsys, override, words):
    argv = [
        "train",
        str(REPO / "cfgs" / "quickstart.yaml"),
        f"--af_output_dir={tmp_path}",
        override,
        "--dry-run",
    ]
    assert main(argv) == 2
    assert words in capsys.readouterr().err
