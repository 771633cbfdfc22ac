"""Mixture-of-experts conversion: expert parallelism and the grouped-GEMM layout as MindSpeed-LLM writes them.

Rules (MindSpeed-LLM 26.1.0 `mindspeed_llm/tasks/checkpoint/convert_hf2mg.py` `set_model_layer_mlp` /
`set_model_layer_attn`, `model_builder.py` `MegatronModel.get_module_mapping`):
- EP rank e holds the routed experts e*El .. e*El+El-1 (El = experts / EP) as `local_experts.J`
  (J = G - e*El); every other tensor is the same on every EP rank; folders `mp_rank_TT[_PPP][_EEE]`.
- with --moe-grouped-gemm each layer's experts become `weight1` = stack_J(fc1_J.t()) viewed [h, El*2f/TP] and
  `weight2` = stack_J(fc2_J.t()) viewed [El*f/TP, h] (Megatron's GroupedMLP reads `weight1.view(El, h, -1)`).
- MLA: `linear_qkv` = [q_proj | q_a_proj ; kv_a_proj_with_mqa], the same on every TP rank.
The opt-in `tests/integration/test_convert_matches_mindspeed_v2.py` compares with the real converter.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
import torch
from convert_testlib import load_hf

from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.engine.convert import tensor_ops
from ascendfactory.engine.convert.__main__ import main
from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.convert.families import family_for, get_family
from ascendfactory.engine.convert.shard_map import (
    hf_full_to_local,
    hf_local_to_megatron,
    megatron_to_hf_local,
)
from ascendfactory.errors import ConfigError, ConversionKeyError

FAMILIES = ("qwen3-moe", "deepseek2-lite", "deepseek3")
SIZES = dict(num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=96, vocab_size=256)


@pytest.fixture(scope="module")
def moe_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny bf16 model per family: 4 experts (top 2), expert FFN 32; DeepSeek with a dense first layer
    and two shared experts (DeepSeek-V3's router bias fp32, as on the Hub)."""
    from tests.support.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("tiny_moe")
    return {
        f: build_tiny_model(root / f, f, seed=i + 11, dtype="bfloat16", **SIZES)
        for i, f in enumerate(FAMILIES)
    }


def convert(*argv: str | Path) -> int:
    return main([str(a) for a in argv])


def hf_to_mg(src: Path, dst: Path, tp: int, pp: int, ep: int, *extra: str) -> None:
    flags = ["--load-dir", src, "--save-dir", dst, "--target-tensor-parallel-size", str(tp)]
    flags += ["--target-pipeline-parallel-size", str(pp), "--target-expert-parallel-size", str(ep)]
    assert convert(*flags, *extra) == 0


def mg_to_hf(src: Path, dst: Path, hf_cfg: Path) -> None:
    flags = ["--load-model-type", "mg", "--save-model-type", "hf", "--load-dir", src, "--save-dir", dst]
    assert convert(*flags, "--hf-cfg-dir", hf_cfg) == 0


def assert_bit_identical(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_group_experts_is_megatrons_grouped_mlp_layout():
    fc1 = [torch.arange(12.0).reshape(4, 3) + 100 * j for j in range(2)]  # 2 experts, 2f = 4, h = 3
    fc2 = [torch.arange(6.0).reshape(3, 2) - 100 * j for j in range(2)]  # [h, f]
    w1, w2 = tensor_ops.group_experts(fc1, fc2)
    assert w1.shape == (3, 8) and w2.shape == (4, 3)
    for j in range(2):  # GroupedMLP.forward: weight1.view(E, h, -1)[j] is expert j's fc1 transposed
        assert torch.equal(w1.view(2, 3, -1)[j], fc1[j].t())
        assert torch.equal(w2.view(2, -1, 3)[j], fc2[j].t())
    # the memory order MindSpeed-LLM's torch.cat(fc1_T_list).view(h, -1) gives
    assert torch.equal(w1.flatten(), torch.cat([f.t().flatten() for f in fc1]))
    back1, back2 = tensor_ops.ungroup_experts(w1, w2, 2)
    assert all(torch.equal(x, y) for x, y in zip(back1 + back2, fc1 + fc2))
    with pytest.raises(ValueError, match="do not hold 3 experts"):
        tensor_ops.ungroup_experts(w1, w2, 3)


def test_family_tables_number_experts_and_pick_the_deepseek_variant():
    fam = get_family("qwen3-moe")
    m = fam.match_hf("model.layers.7.mlp.experts.41.down_proj.weight")
    assert (m.layer, m.expert, m.target) == (
        7,
        41,
        "decoder.layers.*.mlp.experts.local_experts.#.linear_fc2.weight",
    )
    m = fam.match_megatron("decoder.layers.2.mlp.router.weight")
    assert m.target == "model.layers.*.mlp.gate.weight" and m.expert is None
    assert family_for({"model_type": "deepseek_v2", "q_lora_rank": None}).name == "deepseek2-lite"
    assert family_for({"model_type": "deepseek_v2", "q_lora_rank": 1536}).name == "deepseek2"
    assert family_for({"model_type": "deepseek_v3", "q_lora_rank": 1536}).name == "deepseek3"
    assert family_for({"model_type": "qwen3_moe"}).name == "qwen3-moe"
    assert get_family("deepseek3").lookup_megatron("decoder.layers.0.mlp.router.expert_bias")[2] == (
        "model.layers.*.mlp.gate.e_score_correction_bias"
    )
    with pytest.raises(ConversionKeyError, match="expert_bias"):
        get_family("deepseek2-lite").lookup_megatron("decoder.layers.0.mlp.router.expert_bias")


@pytest.mark.parametrize("family", FAMILIES)
def test_tp2_pp2_ep2_grouped_round_trip_is_bit_identical(moe_models, tmp_path, family):
    src = moe_models[family]
    hf_to_mg(src, tmp_path / "mg", 2, 2, 2, "--moe-grouped-gemm")
    names = sorted(d.name for d in (tmp_path / "mg" / "iter_0000001").iterdir())
    assert names == [f"mp_rank_0{t}_00{p}_00{e}" for t in range(2) for p in range(2) for e in range(2)]
    mg_to_hf(tmp_path / "mg", tmp_path / "back", src)
    assert_bit_identical(load_hf(src), load_hf(tmp_path / "back"))


@pytest.mark.parametrize("family", ["qwen3-moe", "deepseek2-lite"])
def test_ep_rank_holds_its_experts_in_both_layouts(moe_models, tmp_path, family):
    src = moe_models[family]
    hf = load_hf(src)
    cfg = json.loads((src / "config.json").read_text())
    dims = ModelDims.from_hf_config(cfg)
    hf_to_mg(src, tmp_path / "plain", 2, 1, 2)
    hf_to_mg(src, tmp_path / "grouped", 2, 1, 2, "--moe-grouped-gemm")
    layer, h, f = 1, dims.hidden_size, dims.moe_ffn_hidden_size  # layer 1 is a MoE layer in every family
    for tp_rank in range(2):
        for ep_rank in range(2):
            plain = mio.load_shard(tmp_path / "plain", 1, tp_rank, 0, 1, ep_rank, 2)["model"]
            grouped = mio.load_shard(tmp_path / "grouped", 1, tp_rank, 0, 1, ep_rank, 2)["model"]
            w1 = grouped[f"decoder.layers.{layer}.mlp.experts.weight1"]
            w2 = grouped[f"decoder.layers.{layer}.mlp.experts.weight2"]
            assert w1.shape == (h, 2 * 2 * f // 2) and w2.shape == (2 * f // 2, h)  # El = 2, TP = 2
            for j in range(2):
                g = ep_rank * 2 + j  # the global expert
                x = f"model.layers.{layer}.mlp.experts.{g}."
                fc1 = torch.cat(
                    [hf[x + "gate_proj.weight"].chunk(2)[tp_rank], hf[x + "up_proj.weight"].chunk(2)[tp_rank]]
                )
                fc2 = hf[x + "down_proj.weight"].chunk(2, dim=1)[tp_rank]
                p = f"decoder.layers.{layer}.mlp.experts.local_experts.{j}."
                assert torch.equal(plain[p + "linear_fc1.weight"], fc1)
                assert torch.equal(plain[p + "linear_fc2.weight"], fc2)
                assert torch.equal(w1.view(2, h, -1)[j], fc1.t()) and torch.equal(
                    w2.view(2, -1, h)[j], fc2.t()
                )
            router = hf[f"model.layers.{layer}.mlp.gate.weight"]
            assert torch.equal(plain[f"decoder.layers.{layer}.mlp.router.weight"], router)  # replicated


def test_mla_qkv_is_the_same_on_every_tp_rank(moe_models, tmp_path):
    src = moe_models["deepseek3"]
    hf = load_hf(src)
    hf_to_mg(src, tmp_path / "mg", 2, 1, 1)
    a = "model.layers.0.self_attn."
    want = torch.cat([hf[a + "q_a_proj.weight"], hf[a + "kv_a_proj_with_mqa.weight"]])
    for r in range(2):
        model = mio.load_shard(tmp_path / "mg", 1, r, 0, 1)["model"]
        assert torch.equal(model["decoder.layers.0.self_attention.linear_qkv.weight"], want)
        kv_up = model["decoder.layers.0.self_attention.linear_kv_up_proj.weight"]
        assert torch.equal(kv_up, hf[a + "kv_b_proj.weight"].chunk(2)[r])
        bias = model["decoder.layers.1.mlp.router.expert_bias"]
        assert bias.dtype == torch.float32  # kept as on the Hub (no --params-dtype)


def test_mg_to_mg_reshards_experts(moe_models, tmp_path):
    src = moe_models["qwen3-moe"]
    hf_to_mg(src, tmp_path / "direct", 1, 1, 4, "--moe-grouped-gemm")
    hf_to_mg(src, tmp_path / "a", 2, 2, 2)
    flags = ["--load-model-type", "mg", "--save-model-type", "mg", "--load-dir", tmp_path / "a"]
    flags += ["--save-dir", tmp_path / "b", "--target-expert-parallel-size", "4", "--moe-grouped-gemm"]
    assert convert(*flags) == 0
    assert mio.discover_parallel(tmp_path / "b", 1) == (1, 1, 4)  # mp_rank_00_00E: EP from the args
    for e in range(4):
        x = mio.load_shard(tmp_path / "b", 1, 0, 0, 1, e, 4)["model"]
        y = mio.load_shard(tmp_path / "direct", 1, 0, 0, 1, e, 4)["model"]
        assert_bit_identical(x, y)


def test_discover_parallel_reads_ambiguous_folders_from_the_args(tmp_path):
    for pp, ep in ((2, 1), (1, 2)):
        root = tmp_path / f"pp{pp}ep{ep}"
        for p in range(pp):
            for e in range(ep):
                args = argparse.Namespace(pipeline_model_parallel_size=pp, expert_model_parallel_size=ep)
                mio.save_shard(root, 3, 0, p, pp, {"args": args, "model": {}}, e, ep)
        assert sorted(d.name for d in (root / "iter_0000003").iterdir()) == [
            "mp_rank_00_000",
            "mp_rank_00_001",
        ]
        assert mio.discover_parallel(root, 3) == (1, pp, ep)
    with pytest.raises(ConfigError, match="expert-parallel checkpoint"):
        mio.discover_layout(tmp_path / "pp1ep2", 3)


def test_expert_parallel_errors(moe_models, tmp_path, capsys):
    src = moe_models["qwen3-moe"]
    flags = ["--load-dir", src, "--save-dir", tmp_path / "o", "--target-expert-parallel-size", "3"]
    assert convert(*flags) == 2
    assert "EP 3 does not divide the model's 4 routed experts" in capsys.readouterr().err
    from tests.support.tiny_model import build_tiny_model

    dense = build_tiny_model(tmp_path / "dense", "qwen3", num_layers=2)
    assert (
        convert("--load-dir", dense, "--save-dir", tmp_path / "d", "--target-expert-parallel-size", "2") == 2
    )
    assert "is a dense model" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "d").exists()
    dims = ModelDims.from_hf_config(json.loads((src / "config.json").read_text()))
    local = hf_full_to_local(load_hf(src), cfg=dims, tp=1, tp_rank=0, padded_vocab_size=256)  # all 4 experts
    with pytest.raises(ConversionKeyError, match="expert 2 is not on EP rank 0 of 2"):
        hf_local_to_megatron(local, cfg=dims, tp=1, tp_rank=0, layer_offset=0, ep=2, ep_rank=0)


def test_mg_to_hf_of_moe_needs_the_hf_config(moe_models, tmp_path, capsys):
    src = moe_models["deepseek2-lite"]
    hf_to_mg(src, tmp_path / "mg", 1, 1, 2)
    flags = ["--load-model-type", "mg", "--save-model-type", "hf", "--load-dir", tmp_path / "mg"]
    assert convert(*flags, "--save-dir", tmp_path / "out") == 2
    assert "--hf-cfg-dir: is required for the mixture-of-experts family" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_fp8_refused_and_mtp_layers_left_out(moe_models, tmp_path, capsys):
    from safetensors.torch import save_file

    src = tmp_path / "hf"
    shutil.copytree(moe_models["deepseek3"], src)
    weights = load_hf(src)
    mtp = {
        "model.layers.4.enorm.weight": torch.ones(64),
        "model.layers.4.eh_proj.weight": torch.ones(64, 128),
    }
    save_file({**weights, **mtp}, str(src / "model.safetensors"))
    hf_to_mg(src, tmp_path / "mg", 1, 1, 1)  # num_hidden_layers 4: layer 4 is the MTP layer
    assert "leaving out 2 tensors of the multi-token-prediction layer(s)" in capsys.readouterr().err
    save_file(
        {**weights, "model.layers.0.mlp.down_proj.weight_scale_inv": torch.ones(1)},
        str(src / "model.safetensors"),
    )
    assert convert("--load-dir", src, "--save-dir", tmp_path / "fp8") == 2
    assert "FP8 weights" in capsys.readouterr().err


def test_dims_from_mindspeed_v2_converter_args_and_training_args():
    """The args MindSpeed-LLM's convert_ckpt_v2.py stores (HF names, group_query_attention False beside
    num_key_value_heads, no padded_vocab_size) and Megatron training args give the same dims."""
    v2 = argparse.Namespace(
        model_type_hf="qwen3-moe", num_layers=48, hidden_size=2048, intermediate_size=6144,
        num_attention_heads=32, num_key_value_heads=4, group_query_attention=False, kv_channels=128,
        vocab_size=151936, num_experts=128, moe_intermediate_size=768, num_experts_per_tok=8,
        first_k_dense_replace=0, untie_embeddings_and_output_weights=True,
    )  # fmt: skip
    train = argparse.Namespace(
        num_layers=48, hidden_size=2048, ffn_hidden_size=6144, num_attention_heads=32,
        group_query_attention=True, num_query_groups=4, kv_channels=128, padded_vocab_size=151936,
        num_experts=128, moe_ffn_hidden_size=768, moe_router_topk=8, first_k_dense_replace=-1,
        qk_layernorm=True, untie_embeddings_and_output_weights=True,
    )  # fmt: skip
    a, b = ModelDims.from_megatron_args(v2), ModelDims.from_megatron_args(train)
    assert a == b and a.family == "qwen3-moe" and a.num_kv_heads == 4 and a.num_experts == 128
    ds = argparse.Namespace(
        num_layers=27, hidden_size=2048, ffn_hidden_size=10944, num_attention_heads=16,
        padded_vocab_size=102400, multi_latent_attention=True, kv_lora_rank=512, qk_head_dim=128,
        qk_pos_emb_head_dim=64, v_head_dim=128, num_experts=64, moe_ffn_hidden_size=1408,
        n_shared_experts=2, first_k_dense_replace=1, moe_router_topk=6,
    )  # fmt: skip
    d = ModelDims.from_megatron_args(ds)
    assert d.family == "deepseek2-lite" and (d.mla_q_rows, d.mla_kv_a_rows) == (16 * 192, 576)
    assert d.shared_expert_ffn == 2816 and d.first_k_dense == 1


def test_local_maps_invert_for_the_trainer(moe_models):
    """What H38e's trainer calls per rank: local HF tensors (global expert numbers) <-> its Megatron shard."""
    src = moe_models["deepseek2-lite"]
    dims = ModelDims.from_hf_config(json.loads((src / "config.json").read_text()))
    full = load_hf(src)
    for grouped in (False, True):
        local = hf_full_to_local(full, cfg=dims, tp=2, tp_rank=1, padded_vocab_size=256, ep=2, ep_rank=1)
        assert "model.layers.1.mlp.experts.3.up_proj.weight" in local
        assert "model.layers.1.mlp.experts.1.up_proj.weight" not in local
        shard = hf_local_to_megatron(
            local, cfg=dims, tp=2, tp_rank=1, layer_offset=0, ep=2, ep_rank=1, grouped_gemm=grouped
        )
        back = megatron_to_hf_local(shard, cfg=dims, tp=2, tp_rank=1, layer_offset=0, ep=2, ep_rank=1)
        assert_bit_identical({k: v.contiguous() for k, v in local.items()}, back)


def test_target_mindspeed_llm_2_1_0_writes_its_mla_names(moe_models, tmp_path):
    """MindSpeed-LLM 2.1.0's deepseek_spec.py names three MLA tensors linear_qb, linear_kvb, k_layernorm
    (26.1.0: linear_q_up_proj, linear_kv_up_proj, kv_layernorm); every tensor else and every value is the
    same, and mg->hf / mg->mg read either (the opt-in test_convert_matches_mindspeed_v1.py compares with
    2.1.0's own convert_ckpt.py)."""
    src = moe_models["deepseek3"]  # q latent: all three names
    hf_to_mg(src, tmp_path / "core", 2, 2, 2, "--moe-grouped-gemm")
    v1_argv = [
        "--use-mcore-models",
        "--model-type",
        "GPT",
        "--spec",
        "mindspeed_llm.tasks.models.spec.deepseek_spec",
    ]
    v1_argv += ["layer_spec", "--moe-grouped-gemm", "--target-mindspeed-llm", "2.1.0"]
    hf_to_mg(src, tmp_path / "v1", 2, 2, 2, *v1_argv)
    renamed = {
        "linear_q_up_proj.weight": "linear_qb.weight",
        "linear_kv_up_proj.weight": "linear_kvb.weight",
        "kv_layernorm.weight": "k_layernorm.weight",
    }
    for t, p, e in [(t, p, e) for t in range(2) for p in range(2) for e in range(2)]:
        core = mio.load_shard(tmp_path / "core", 1, t, p, 2, e, 2)["model"]
        v1 = mio.load_shard(tmp_path / "v1", 1, t, p, 2, e, 2)["model"]
        want = {}
        for name, tensor in core.items():
            stem, _, last = name.partition(".self_attention.")
            want[f"{stem}.self_attention.{renamed.get(last, last)}" if last else name] = tensor
        assert_bit_identical(want, v1)
        assert any(n.endswith(".self_attention.linear_kvb.weight") for n in v1)
    mg_to_hf(tmp_path / "v1", tmp_path / "back", src)
    assert_bit_identical(load_hf(src), load_hf(tmp_path / "back"))
    flags = ["--load-model-type", "mg", "--save-model-type", "mg", "--load-dir", tmp_path / "v1"]
    assert convert(*flags, "--save-dir", tmp_path / "again", "--target-mindspeed-llm", "2.1.0") == 0
    again = mio.load_shard(tmp_path / "again", 1, 0, 0, 1)["model"]
    assert "decoder.layers.0.self_attention.linear_qb.weight" in again
    qwen = moe_models["qwen3-moe"]  # no MLA: the same output for both versions
    hf_to_mg(qwen, tmp_path / "q26", 1, 1, 2)
    hf_to_mg(qwen, tmp_path / "q21", 1, 1, 2, "--target-mindspeed-llm", "2.1.0")
    for e in range(2):
        assert_bit_identical(
            mio.load_shard(tmp_path / "q26", 1, 0, 0, 1, e, 2)["model"],
            mio.load_shard(tmp_path / "q21", 1, 0, 0, 1, e, 2)["model"],
        )
