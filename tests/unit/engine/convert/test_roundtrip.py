"""The converter program in-process: hf -> mg -> hf is bit-identical for every family, TP and PP layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from convert_testlib import VARIANTS, load_hf, variant_id

from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.engine.convert.__main__ import main

LAYOUTS = [
    (1, 1, None),
    (2, 1, None),
    (4, 1, None),
    (1, 2, None),
    (2, 2, None),
    (4, 2, None),
    (2, 2, "1,3"),
    (4, 2, "3,1"),
]


def convert(*argv: str | Path) -> None:
    code = main([str(a) for a in argv])
    assert code == 0


def hf_to_mg(src: Path, dst: Path, tp: int, pp: int, layers: str | None = None, *extra: str) -> None:
    more = ["--num-layer-list", layers] if layers else []
    convert(
        "--load-model-type",
        "hf",
        "--save-model-type",
        "mg",
        "--load-dir",
        src,
        "--save-dir",
        dst,
        "--target-tensor-parallel-size",
        tp,
        "--target-pipeline-parallel-size",
        pp,
        *more,
        *extra,
    )


def mg_to_hf(src: Path, dst: Path, hf_cfg: Path, *extra: str) -> None:
    convert(
        "--load-model-type",
        "mg",
        "--save-model-type",
        "hf",
        "--load-dir",
        src,
        "--save-dir",
        dst,
        "--hf-cfg-dir",
        hf_cfg,
        *extra,
    )


def assert_bit_identical(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize(("tp", "pp", "layers"), LAYOUTS, ids=lambda v: str(v))
@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_hf_mg_hf_is_bit_identical(tiny_models, tmp_path, variant, tp, pp, layers):
    src = tiny_models[variant]
    hf_to_mg(src, tmp_path / "mg", tp, pp, layers)
    mg_to_hf(tmp_path / "mg", tmp_path / "hf", src)
    assert_bit_identical(load_hf(tmp_path / "hf"), load_hf(src))
    assert json.loads((tmp_path / "hf" / "config.json").read_text()) == json.loads(
        (src / "config.json").read_text()
    )


def test_megatron_layout_matches_mindspeed(tiny_models, tmp_path):
    hf_to_mg(tiny_models[("qwen25", False)], tmp_path, 2, 2, "1,3")
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "1"
    dirs = sorted(p.name for p in (tmp_path / "iter_0000001").iterdir())
    assert dirs == ["mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"]
    first = mio.load_shard(tmp_path, 1, 1, 0, 2)
    last = mio.load_shard(tmp_path, 1, 0, 1, 2)
    assert set(first) == {"model", "args", "checkpoint_version", "iteration"}
    assert first["checkpoint_version"] == 3.0 and first["iteration"] == 1
    a = first["args"]
    assert (a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.num_layer_list) == (2, 2, "1,3")
    assert (a.num_attention_heads, a.num_query_groups, a.group_query_attention, a.kv_channels) == (
        8,
        4,
        True,
        8,
    )
    assert (a.padded_vocab_size, a.add_qkv_bias, a.qk_layernorm, a.model_type_hf) == (
        250,
        True,
        False,
        "qwen25",
    )
    assert a.untie_embeddings_and_output_weights and a.params_dtype == torch.float32
    m = first["model"]
    assert m["embedding.word_embeddings.weight"].shape == (125, 64)
    assert m["decoder.layers.0.self_attention.linear_qkv.weight"].shape == ((8 // 4 + 2) * 4 // 2 * 8, 64)
    assert m["decoder.layers.0.self_attention.linear_qkv.bias"].shape == (64,)
    assert m["decoder.layers.0.mlp.linear_fc1.weight"].shape == (96, 64)
    assert m["decoder.layers.0.self_attention.linear_proj.weight"].shape == (64, 32)
    assert not any(k.startswith(("decoder.layers.1.", "output_layer", "decoder.final")) for k in m)
    assert sorted({k.split(".")[2] for k in last["model"] if k.startswith("decoder.layers.")}) == [
        "0",
        "1",
        "2",
    ]
    assert last["model"]["output_layer.weight"].shape == (125, 64)


def test_tied_model_has_no_output_layer_and_pp1_names(tiny_models, tmp_path):
    hf_to_mg(tiny_models[("llama2", True)], tmp_path, 4, 1)
    shard = mio.load_shard(tmp_path, 1, 3, 0, 1)
    assert (tmp_path / "iter_0000001" / "mp_rank_03" / "model_optim_rng.pt").is_file()
    assert "output_layer.weight" not in shard["model"]
    assert shard["model"]["embedding.word_embeddings.weight"].shape == (252 // 4, 64)  # 250 padded to 252
    assert not shard["model"]["embedding.word_embeddings.weight"][-2:].any()
    assert not shard["args"].untie_embeddings_and_output_weights


@pytest.mark.parametrize("variant", [("qwen3", False), ("llama2", True)], ids=variant_id)
def test_mg_to_mg_reshard_round_trip(tiny_models, tmp_path, variant):
    src = tiny_models[variant]
    hf_to_mg(src, tmp_path / "a", 2, 2)
    for name, tp, pp, layers in (("b", 4, 1, None), ("c", 1, 2, "3,1"), ("d", 2, 2, None)):
        prev = {"b": "a", "c": "b", "d": "c"}[name]
        more = ["--num-layer-list", layers] if layers else []
        convert(
            "--load-model-type",
            "mg",
            "--save-model-type",
            "mg",
            "--load-dir",
            tmp_path / prev,
            "--save-dir",
            tmp_path / name,
            "--target-tensor-parallel-size",
            tp,
            "--target-pipeline-parallel-size",
            pp,
            *more,
        )
    assert mio.discover_layout(tmp_path / "c", 1) == (1, 2)
    for t in range(2):
        for p in range(2):
            assert_bit_identical(
                mio.load_shard(tmp_path / "d", 1, t, p, 2)["model"],
                mio.load_shard(tmp_path / "a", 1, t, p, 2)["model"],
            )
    mg_to_hf(tmp_path / "c", tmp_path / "hf", src)
    assert_bit_identical(load_hf(tmp_path / "hf"), load_hf(src))


def test_training_checkpoint_with_optimizer_state(tiny_models, tmp_path):
    """mg->hf reads iter_N of a training save (tracker N) and ignores optimizer/RNG entries."""
    src = tiny_models[("qwen25", False)]
    hf_to_mg(src, tmp_path / "conv", 2, 1)
    train = tmp_path / "train"
    for t in range(2):
        shard = mio.load_shard(tmp_path / "conv", 1, t, 0, 1)
        shard.update(
            iteration=20,
            optimizer={"state": {0: {"exp_avg": torch.ones(3)}}},
            opt_param_scheduler={},
            rng_state=[{"random_rng_state": None}],
            num_floating_point_operations_so_far=1.0,
        )
        shard["model"] = {k: v.clone() for k, v in shard["model"].items()}
        shard["model"]["decoder.layers.0.self_attention.core_attention._extra_state"] = None
        mio.save_shard(train, 20, t, 0, 1, shard)
    mio.write_tracker(train, 20)
    mg_to_hf(train, tmp_path / "hf", src)
    assert_bit_identical(load_hf(tmp_path / "hf"), load_hf(src))


def test_sharded_output_with_index_loads_in_transformers(tiny_models, tmp_path):
    from transformers import AutoModelForCausalLM

    src = tiny_models[("qwen3", False)]
    hf_to_mg(src, tmp_path / "mg", 2, 2)
    mg_to_hf(tmp_path / "mg", tmp_path / "hf", src, "--max-shard-size", "40KB")
    files = sorted(p.name for p in (tmp_path / "hf").glob("*.safetensors"))
    assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(files)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in load_hf(src).values())
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert_bit_identical({k: v for k, v in model.state_dict().items()}, load_hf(src))


def test_params_dtype_and_no_hf_cfg_dir(tiny_models, tmp_path):
    from transformers import AutoConfig

    src = tiny_models[("llama2", False)]
    hf_to_mg(src, tmp_path / "mg", 1, 2, None, "--params-dtype", "bf16")
    shard = mio.load_shard(tmp_path / "mg", 1, 0, 0, 2)
    assert shard["args"].params_dtype == torch.bfloat16
    assert {v.dtype for v in shard["model"].values()} == {torch.bfloat16}
    convert(
        "--load-model-type",
        "mg",
        "--save-model-type",
        "hf",
        "--load-dir",
        tmp_path / "mg",
        "--save-dir",
        tmp_path / "hf",
    )
    cfg = AutoConfig.from_pretrained(tmp_path / "hf")
    assert (cfg.model_type, cfg.num_key_value_heads, cfg.vocab_size) == ("llama", 4, 250)
    expected = {k: v.to(torch.bfloat16) for k, v in load_hf(src).items()}
    assert_bit_identical(load_hf(tmp_path / "hf"), expected)


@pytest.mark.parametrize(("tp", "pp", "per_chunk"), [(1, 2, 1), (2, 2, 1), (1, 1, 2)], ids=str)
def test_virtual_pipeline_hf_mg_hf_is_bit_identical(tiny_models, tmp_path, tp, pp, per_chunk):
    """hf -> mg with a virtual pipeline writes Megatron's model-chunk keys: chunk c of PP rank r holds the
    layers of virtual stage c * PP + r (numbered from 0 in each chunk); mg -> hf reads them back exactly."""
    variant = VARIANTS[0]
    src = tiny_models[variant]
    layers = json.loads((src / "config.json").read_text())["num_hidden_layers"]
    vpp = layers // pp // per_chunk
    hf_to_mg(src, tmp_path / "mg", tp, pp, None, "--num-layers-per-virtual-pipeline-stage", str(per_chunk))
    for r in range(pp):
        shard = mio.load_shard(tmp_path / "mg", 1, tp - 1, r, pp)
        assert [k for k in shard if k.startswith("model")] == [f"model{c}" for c in range(vpp)]
        for c in range(vpp):
            chunk = shard[f"model{c}"]
            numbers = {int(k.split(".")[2]) for k in chunk if k.startswith("decoder.layers.")}
            assert numbers == set(range(per_chunk))
            v = c * pp + r
            assert ("embedding.word_embeddings.weight" in chunk) == (v == 0)
            assert ("decoder.final_layernorm.weight" in chunk) == (v == pp * vpp - 1)
        assert shard["args"].virtual_pipeline_model_parallel_size == vpp
    # the layers really are interleaved: chunk c of PP rank r holds global layer (c * PP + r) * per_chunk
    if tp == 1:
        whole = load_hf(src)
        for r in range(pp):
            shard = mio.load_shard(tmp_path / "mg", 1, 0, r, pp)
            for c in range(vpp):
                held = shard[f"model{c}"]["decoder.layers.0.self_attention.linear_proj.weight"]
                expected = whole[f"model.layers.{(c * pp + r) * per_chunk}.self_attn.o_proj.weight"]
                assert torch.equal(held, expected), (r, c)
    mg_to_hf(tmp_path / "mg", tmp_path / "hf", src)
    assert_bit_identical(load_hf(src), load_hf(tmp_path / "hf"))


@pytest.mark.parametrize(
    "argv",
    [
        ["--num-layers-per-virtual-pipeline-stage", "3", "--target-pipeline-parallel-size", "2"],
        ["--num-layers-per-virtual-pipeline-stage", "1", "--num-layer-list", "1,3"]
        + ["--target-pipeline-parallel-size", "2"],
        ["--num-layers-per-virtual-pipeline-stage", "1", "--save-model-type", "hf"],
    ],
)
def test_virtual_pipeline_bad_layouts_are_refused(tiny_models, tmp_path, capsys, argv):
    src = tiny_models[VARIANTS[0]]
    code = main(["--load-dir", str(src), "--save-dir", str(tmp_path / "mg"), *argv])
    assert code != 0
    assert "--num-layers-per-virtual-pipeline-stage" in capsys.readouterr().err
    assert not (tmp_path / "mg" / "latest_checkpointed_iteration.txt").exists()
