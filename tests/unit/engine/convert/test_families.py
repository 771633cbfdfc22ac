"""Name tables: computed reverse maps, lookups, unknown keys, family selection."""

from __future__ import annotations

import pytest

from ascendfactory.engine.convert.families import FAMILIES, QKVMapping, family_for, get_family, hf_name
from ascendfactory.errors import ConfigError, ConversionKeyError


@pytest.mark.parametrize("name", list(FAMILIES))
def test_reverse_is_the_inverse_of_names(name):
    fam = FAMILIES[name]
    for mg, hf in fam.reverse.items():
        assert fam.names[hf] == mg
    assert len(fam.reverse) == sum(v is not None for v in fam.names.values())
    for pat in fam.hf_patterns:  # every HF tensor has a TP rule, except the dropped ones
        assert pat in fam.tp_dims or fam.names.get(pat, "x") is None


def test_lookup_both_ways_with_layer_numbers():
    fam = get_family("qwen3")
    pat, layer, target = fam.lookup_hf("model.layers.17.self_attn.k_norm.weight")
    assert layer == 17 and hf_name(target, layer) == "decoder.layers.17.self_attention.k_layernorm.weight"
    pat, layer, target = fam.lookup_megatron("decoder.layers.3.self_attention.linear_qkv.weight")
    assert layer == 3 and isinstance(target, QKVMapping)
    assert fam.lookup_hf("model.rotary_emb.inv_freq")[2] is None


def test_bias_only_in_qwen25_and_qk_norm_only_in_qwen3():
    bias = "decoder.layers.0.self_attention.linear_qkv.bias"
    get_family("qwen25").lookup_megatron(bias)
    with pytest.raises(ConversionKeyError, match="linear_qkv.bias"):
        get_family("llama2").lookup_megatron(bias)
    with pytest.raises(ConversionKeyError, match="q_norm"):
        get_family("qwen25").lookup_hf("model.layers.0.self_attn.q_norm.weight")


def test_unknown_key_lists_known_patterns():
    with pytest.raises(ConversionKeyError) as e:
        get_family("llama2").lookup_hf("model.layers.0.mlp.experts.3.w1.weight")
    msg = str(e.value)
    assert "model.layers.0.mlp.experts.3.w1.weight" in msg
    assert "model.layers.*.self_attn.q_proj.weight" in msg and "--model-type-hf" in msg


@pytest.mark.parametrize(
    ("model_type", "expected"), [("llama", "llama2"), ("qwen2", "qwen25"), ("qwen3", "qwen3")]
)
def test_family_for_model_type(model_type, expected):
    assert family_for({"model_type": model_type}).name == expected


def test_family_for_prefers_model_type_hf_and_rejects_unknown():
    assert family_for({"model_type": "llama"}, "qwen25").name == "qwen25"
    assert family_for(None, "qwen3").name == "qwen3"
    with pytest.raises(ConfigError, match="llama2, qwen25, qwen3"):
        family_for({"model_type": "mixtral"})
    with pytest.raises(ConfigError, match="unknown model family 'gpt'"):
        get_family("gpt")
    with pytest.raises(ConfigError, match="attention_bias"):
        family_for({"model_type": "llama", "attention_bias": True})
