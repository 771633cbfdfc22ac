"""Architecture flags are checked against config.json; mismatches are listed together."""

import pytest
from train_testlib import REQUIRED_ARGV
from transformers import Qwen2Config, Qwen3Config

from ascendfactory.engine.train import flags
from ascendfactory.engine.train.arch import check_architecture, padded_vocab_size
from ascendfactory.errors import ConfigError

BASE = REQUIRED_ARGV
CFG = Qwen2Config(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=250,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    rope_theta=1000000.0,
)
GOOD = [
    "--num-layers",
    "4",
    "--hidden-size",
    "64",
    "--ffn-hidden-size",
    "128",
    "--num-attention-heads",
    "4",
    "--group-query-attention",
    "--num-query-groups",
    "2",
    "--swiglu",
    "--normalization",
    "RMSNorm",
    "--norm-epsilon",
    "1e-6",
    "--rotary-base",
    "1000000",
    "--untie-embeddings-and-output-weights",
    "--add-qkv-bias",
    "--disable-bias-linear",
    "--position-embedding-type",
    "rope",
    "--max-position-embeddings",
    "4096",
]


def test_matching_flags_pass():
    args, _ = flags.parse_args(BASE + GOOD)
    check_architecture(args, CFG)


def test_every_mismatch_is_reported():
    bad = [x if x not in ("128", "RMSNorm") else {"128": "256", "RMSNorm": "LayerNorm"}[x] for x in GOOD]
    bad = [x for x in bad if x not in ("--add-qkv-bias", "--untie-embeddings-and-output-weights")]
    args, _ = flags.parse_args(BASE + bad + ["--num-query-groups", "4"])
    with pytest.raises(ConfigError) as e:
        check_architecture(args, CFG)
    keys = {p.key for p in e.value.problems}
    assert keys == {
        "--ffn-hidden-size",
        "--normalization",
        "--num-query-groups",
        "--add-qkv-bias",
        "--untie-embeddings-and-output-weights",
    }
    assert "config.json has intermediate_size = 128" in str(e.value)


def test_qk_layernorm_only_for_qwen3():
    args, _ = flags.parse_args(BASE + ["--qk-layernorm"])
    with pytest.raises(ConfigError):
        check_architecture(args, CFG)
    check_architecture(args, Qwen3Config(num_attention_heads=4, num_key_value_heads=2, hidden_size=64))


def test_padded_vocab():
    args, _ = flags.parse_args(BASE + ["--tensor-model-parallel-size", "4"])
    assert padded_vocab_size(args, CFG) == 252
    args, _ = flags.parse_args(BASE + ["--make-vocab-size-divisible-by", "128"])
    assert padded_vocab_size(args, CFG) == 256
    args, _ = flags.parse_args(BASE + ["--padded-vocab-size", "300"])
    assert padded_vocab_size(args, CFG) == 300
