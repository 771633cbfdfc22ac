"""Flag lists as data, parsing, and every problem reported at once."""

import pytest
from train_testlib import REQUIRED_ARGV

from ascendfactory.engine.train import flags
from ascendfactory.errors import ConfigError

BASE = REQUIRED_ARGV


def test_lists_are_disjoint():
    lists = [set(flags.HONOURED), set(flags.ARCHITECTURE), set(flags.IGNORED), set(flags.REFUSED)]
    for i, a in enumerate(lists):
        for b in lists[i + 1 :]:
            assert not a & b
    assert set(flags.known_flags()) == set().union(*lists)


def test_mindspeed_sft_script_flags_parse():
    argv = BASE + [
        "--finetune",
        "--stage",
        "sft",
        "--is-instruction-dataset",
        "--tokenizer-not-use-fast",
        "--prompt-type",
        "qwen",
        "--padded-samples",
        "--variable-seq-lengths",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--use-mcore-models",
        "--tensor-model-parallel-size",
        "1",
        "--num-layers",
        "28",
        "--group-query-attention",
        "--num-query-groups",
        "4",
        "--use-flash-attn",
        "--swiglu",
        "--use-fused-swiglu",
        "--normalization",
        "RMSNorm",
        "--rotary-base",
        "1000000",
        "--untie-embeddings-and-output-weights",
        "--add-qkv-bias",
        "--disable-bias-linear",
        "--initial-loss-scale",
        "4096",
        "--no-gradient-accumulation-fusion",
        "--bf16",
        "--distributed-backend",
        "nccl",
        "--split",
        "100,0,0",
        "--no-load-optim",
        "--no-load-rng",
        "--recompute-granularity",
        "full",
        "--log-throughput",
        "--eval-iters",
        "0",
    ]
    args, ignored = flags.parse_args(argv)
    assert args.stage == "sft" and args.bf16 and args.num_query_groups == 4
    assert ignored == [f for f in flags.IGNORED if f in argv]
    assert "--recompute-granularity" in ignored


def test_refused_and_unknown_and_bad_values_all_reported():
    with pytest.raises(ConfigError) as e:
        flags.parse_args(
            BASE
            + [
                "--lora-r",
                "8",
                "--qlora",
                "--no-such-flag",
                "--context-parallel-size",
                "2",
                "--lr-decay-style",
                "poly",
                "--stage",
                "dpo",
            ]
        )
    keys = [p.key for p in e.value.problems]
    for key in (
        "--lora-r",
        "--qlora",
        "--no-such-flag",
        "--context-parallel-size",
        "--lr-decay-style",
        "--stage",
    ):
        assert any(key in k for k in keys), key
    assert "context parallelism (2) is not supported" in str(e.value)


def test_required_flags():
    with pytest.raises(ConfigError) as e:
        flags.parse_args(["--lr", "1"])
    assert {p.key for p in e.value.problems} >= {
        "--seq-length",
        "--train-iters",
        "--data-path",
        "--tokenizer-name-or-path",
    }


def test_stage_defaults_from_instruction_flag():
    args, _ = flags.parse_args(BASE + ["--is-instruction-dataset"])
    assert args.stage == "sft"
    args, _ = flags.parse_args(BASE)
    assert args.stage == "pt"


def test_help_lists_honoured_and_architecture_flags(capsys):
    from ascendfactory.engine.train.__main__ import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--exit-interval" in out and "iteration % N" in out and "--num-query-groups" in out
    assert "--use-flash-attn" not in out  # ignored flags are accepted but not advertised


def test_collective_timeout_precedence(monkeypatch):
    from ascendfactory.engine.train.parallel import collective_timeout_s

    monkeypatch.delenv("AF_DISTRIBUTED_TIMEOUT_S", raising=False)
    assert collective_timeout_s(None) == 600.0
    monkeypatch.setenv("AF_DISTRIBUTED_TIMEOUT_S", "45")
    assert collective_timeout_s(None) == 45.0
    assert collective_timeout_s(2) == 120.0
