"""The trainer's bridge: per-rank local HF shards <-> Megatron shards agree with the contract's layout."""

from __future__ import annotations

import pytest
import torch
from convert_testlib import VARIANTS, load_hf, variant_id

from ascendfactory.engine.convert import tensor_ops as ops
from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.convert.shard_map import (
    hf_full_to_local,
    hf_local_to_megatron,
    hf_locals_to_full,
    megatron_to_hf_local,
)
from ascendfactory.errors import ConfigError, ConversionKeyError


def contract_shard(hf: dict, dims: ModelDims, tp: int, r: int, padded: int) -> dict:
    """Megatron shard of TP rank r written straight from docs/engine-contract.md (not via shard_map)."""
    heads = dict(num_heads=dims.num_heads, num_kv_heads=dims.num_kv_heads, head_dim=dims.head_dim)
    out = {
        "embedding.word_embeddings.weight": ops.chunk(
            ops.pad_vocab(hf["model.embed_tokens.weight"], padded), tp, r
        ),
        "decoder.final_layernorm.weight": hf["model.norm.weight"],
    }
    if not dims.tie_word_embeddings:
        out["output_layer.weight"] = ops.chunk(ops.pad_vocab(hf["lm_head.weight"], padded), tp, r)
    for n in range(dims.num_layers):
        a, m, p = f"model.layers.{n}.self_attn.", f"model.layers.{n}.mlp.", f"decoder.layers.{n}."
        qkv = ops.merge_qkv(
            hf[a + "q_proj.weight"], hf[a + "k_proj.weight"], hf[a + "v_proj.weight"], **heads
        )
        out[p + "self_attention.linear_qkv.weight"] = ops.chunk(qkv, tp, r)
        if a + "q_proj.bias" in hf:
            b = ops.merge_qkv(hf[a + "q_proj.bias"], hf[a + "k_proj.bias"], hf[a + "v_proj.bias"], **heads)
            out[p + "self_attention.linear_qkv.bias"] = ops.chunk(b, tp, r)
        if a + "q_norm.weight" in hf:
            out[p + "self_attention.q_layernorm.weight"] = hf[a + "q_norm.weight"]
            out[p + "self_attention.k_layernorm.weight"] = hf[a + "k_norm.weight"]
        out[p + "self_attention.linear_proj.weight"] = ops.chunk(hf[a + "o_proj.weight"], tp, r, dim=1)
        out[p + "input_layernorm.weight"] = hf[f"model.layers.{n}.input_layernorm.weight"]
        out[p + "pre_mlp_layernorm.weight"] = hf[f"model.layers.{n}.post_attention_layernorm.weight"]
        out[p + "mlp.linear_fc1.weight"] = ops.merge_gate_up(
            hf[m + "gate_proj.weight"], hf[m + "up_proj.weight"], tp=tp, rank=r
        )
        out[p + "mlp.linear_fc2.weight"] = ops.chunk(hf[m + "down_proj.weight"], tp, r, dim=1)
    return out


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].shape == b[k].shape and torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_local_maps_agree_with_full_conversion(tiny_models, variant, tp):
    path = tiny_models[variant]
    hf = load_hf(path)
    dims = ModelDims.from_hf_config(__import__("json").loads((path / "config.json").read_text()))
    padded = dims.padded_vocab_size(tp)
    locals_ = []
    for r in range(tp):
        local = hf_full_to_local(hf, cfg=dims, tp=tp, tp_rank=r, padded_vocab_size=padded)
        assert (
            local["model.layers.0.self_attn.k_proj.weight"].shape[0]
            == dims.num_kv_heads // tp * dims.head_dim
        )
        assert torch.equal(
            local["model.layers.1.self_attn.o_proj.weight"],
            hf["model.layers.1.self_attn.o_proj.weight"].chunk(tp, dim=1)[r],
        )
        mg = hf_local_to_megatron(local, cfg=dims, tp=tp, tp_rank=r, layer_offset=0)
        assert_same(mg, contract_shard(hf, dims, tp, r, padded))
        back = megatron_to_hf_local(mg, cfg=dims, tp=tp, tp_rank=r, layer_offset=0)
        expected_local = {
            k: v for k, v in local.items() if not (k == "lm_head.weight" and dims.tie_word_embeddings)
        }
        assert_same(back, expected_local)
        locals_.append(back)
    full = hf_locals_to_full(locals_, cfg=dims, vocab_size=dims.vocab_size)
    assert_same(full, hf)


def test_pipeline_stage_layer_numbers(tiny_models):
    path = tiny_models[("qwen25", False)]
    hf = load_hf(path)
    dims = ModelDims.from_hf_config(__import__("json").loads((path / "config.json").read_text()))
    stage = {k: v for k, v in hf.items() if k.startswith(("model.layers.2.", "model.layers.3."))}
    local = hf_full_to_local(stage, cfg=dims, tp=2, tp_rank=1, padded_vocab_size=250)
    mg = hf_local_to_megatron(local, cfg=dims, tp=2, tp_rank=1, layer_offset=2)
    assert {k.split(".")[2] for k in mg} == {"0", "1"}
    back = megatron_to_hf_local(mg, cfg=dims, tp=2, tp_rank=1, layer_offset=2)
    assert_same(back, local)
    with pytest.raises(ValueError, match="before this stage"):
        hf_local_to_megatron(local, cfg=dims, tp=2, tp_rank=1, layer_offset=3)


def test_megatron_args_are_accepted_as_cfg_and_extra_state_ignored(tiny_models):
    path = tiny_models[("qwen3", False)]
    dims = ModelDims.from_hf_config(__import__("json").loads((path / "config.json").read_text()))
    args = dims.megatron_args(
        tp=2, pp=1, num_layer_list=None, padded_vocab_size=250, params_dtype=torch.float32
    )
    assert ModelDims.from_megatron_args(args) == dims
    hf = load_hf(path)
    local = hf_full_to_local(hf, cfg=dims, tp=2, tp_rank=0, padded_vocab_size=250)
    mg = hf_local_to_megatron(local, cfg=args, tp=2, tp_rank=0, layer_offset=0)
    mg["decoder.layers.0.self_attention.core_attention._extra_state"] = torch.zeros(1)
    assert_same(megatron_to_hf_local(mg, cfg=args, tp=2, tp_rank=0, layer_offset=0), local)


def test_errors(tiny_models):
    path = tiny_models[("llama2", False)]
    dims = ModelDims.from_hf_config(__import__("json").loads((path / "config.json").read_text()))
    with pytest.raises(ConfigError, match=r"use a TP size in \[1, 2, 4\]"):
        dims.check_tp(3)
    with pytest.raises(ConversionKeyError, match="decoder.layers.0.mlp.router.weight"):
        megatron_to_hf_local(
            {"decoder.layers.0.mlp.router.weight": torch.zeros(1)}, cfg=dims, tp=1, tp_rank=0, layer_offset=0
        )
    with pytest.raises(ConversionKeyError, match="missing model.layers.0.self_attn.v_proj.weight"):
        hf_local_to_megatron(
            {
                "model.layers.0.self_attn.q_proj.weight": torch.zeros(64, 64),
                "model.layers.0.self_attn.k_proj.weight": torch.zeros(32, 64),
            },
            cfg=dims,
            tp=1,
            tp_rank=0,
            layer_offset=0,
        )
    rank0 = {"model.norm.weight": torch.ones(4)}
    with pytest.raises(ConversionKeyError, match="differs between TP rank 0 and 1"):
        hf_locals_to_full([rank0, {"model.norm.weight": torch.zeros(4)}], cfg=dims)
