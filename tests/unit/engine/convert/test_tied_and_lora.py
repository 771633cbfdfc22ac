"""Tied embeddings under PP > 1 and LoRA merging, each as MindSpeed-LLM's converter does it.

Rule for a tied model (MindSpeed-LLM master `tasks/checkpoint/convert_hf2mg.py`, `set_model_preprocess` /
`set_model_postprocess`): the first stage holds `embedding.word_embeddings.weight` = TP row chunk r of the
(vocab-padded) embedding; with PP > 1 the last stage also holds `output_layer.weight` = the same chunk
(`if untie_embeddings_and_output_weights or pipeline_model_parallel_size > 1`); with PP == 1 no file has
`output_layer.weight`. Every other tensor is what the untied mapping writes. mg->hf ignores the copy.

LoRA merge (`tasks/checkpoint/convert_mg2hf.py` `_merge_lora`): per TP shard,
`W = W + (lora_alpha / lora_r) * (B.float() @ A.float()).to(W.dtype)`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from convert_testlib import load_hf
from test_roundtrip import convert, hf_to_mg, mg_to_hf

from ascendfactory.engine.convert import lora, tensor_ops
from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.engine.convert.__main__ import main
from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.convert.hf_io import read_config

TIED = ("llama2", True)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_tied_pp2_files_follow_convert_ckpt_v2(tiny_models, tmp_path, tp):
    src = tiny_models[TIED]
    hf_to_mg(src, tmp_path / "pp2", tp, 2)
    hf_to_mg(src, tmp_path / "pp1", tp, 1)
    embedding = load_hf(src)["model.embed_tokens.weight"]
    padded = ModelDims.from_hf_config(read_config(src)).padded_vocab_size(tp)
    for r in range(tp):
        first = mio.load_shard(tmp_path / "pp2", 1, r, 0, 2)["model"]
        last = mio.load_shard(tmp_path / "pp2", 1, r, 1, 2)["model"]
        one = mio.load_shard(tmp_path / "pp1", 1, r, 0, 1)["model"]
        want = tensor_ops.pad_vocab(embedding, padded).chunk(tp)[r]
        assert torch.equal(first["embedding.word_embeddings.weight"], want)
        assert torch.equal(last["output_layer.weight"], want)  # the rule: the last stage's own copy
        assert "output_layer.weight" not in first and "embedding.word_embeddings.weight" not in last
        assert "output_layer.weight" not in one  # PP 1: one tensor serves both
        # every other tensor: the PP 1 file's, layers renumbered per stage
        rest = {k: v for k, v in {**first, **_renumber(last, 2)}.items() if k != "output_layer.weight"}
        assert rest.keys() == one.keys()
        assert all(torch.equal(v, one[k]) for k, v in rest.items())


def _renumber(model: dict, offset: int) -> dict:
    out = {}
    for k, v in model.items():
        if k.startswith("decoder.layers."):
            n = int(k.split(".")[2])
            k = k.replace(f"decoder.layers.{n}.", f"decoder.layers.{n + offset}.", 1)
        out[k] = v
    return out


def test_tied_pp2_back_to_hf_and_through_resharding_is_bit_identical(tiny_models, tmp_path):
    src = tiny_models[TIED]
    hf_to_mg(src, tmp_path / "a", 2, 2)
    _mg_to_mg(tmp_path / "a", tmp_path / "b", 1, 1)
    _mg_to_mg(tmp_path / "b", tmp_path / "c", 2, 2)
    for t in range(2):
        for p in range(2):
            x, y = (mio.load_shard(tmp_path / d, 1, t, p, 2)["model"] for d in ("a", "c"))
            assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    mg_to_hf(tmp_path / "a", tmp_path / "hf", src)
    back, ref = load_hf(tmp_path / "hf"), load_hf(src)
    assert back.keys() == ref.keys() and all(torch.equal(back[k], ref[k]) for k in ref)


def _mg_to_mg(a: Path, b: Path, tp: int, pp: int) -> None:
    convert(
        *("--load-model-type", "mg", "--save-model-type", "mg", "--load-dir", a, "--save-dir", b),
        *("--target-tensor-parallel-size", tp, "--target-pipeline-parallel-size", pp),
    )


# ------------------------------------------------------------------------------------------------ LoRA
def test_merge_is_the_v2_formula_per_shard():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(6, 4, generator=g).bfloat16()
    a, b = torch.randn(2, 4, generator=g).bfloat16(), torch.randn(6, 2, generator=g).bfloat16()
    stem = "decoder.layers.0.self_attention.linear_qkv"
    unified = {
        stem + ".base_layer.weight": w,
        stem + ".base_layer.bias": torch.ones(6),
        stem + lora.A_SUFFIX: a,
        stem + lora.B_SUFFIX: b,
        "decoder.final_layernorm.weight": torch.ones(4),
    }
    out = lora.merge(unified, r=2, alpha=16)
    want = w + 8.0 * torch.matmul(b.float(), a.float()).to(torch.bfloat16)
    assert torch.equal(out[stem + ".weight"], want) and out[stem + ".weight"].dtype == torch.bfloat16
    assert set(out) == {stem + ".weight", stem + ".bias", "decoder.final_layernorm.weight"}
    # independent: the base checkpoint's W, every tensor of the LoRA checkpoint on top
    base = {
        stem + ".weight": w,
        stem + ".bias": torch.ones(6),
        "decoder.final_layernorm.weight": torch.ones(4),
    }
    filtered = {k: v for k, v in unified.items() if lora.is_lora_key(k)}
    assert torch.equal(lora.merge(base, r=2, alpha=16, override=filtered)[stem + ".weight"], want)
    assert torch.equal(lora.merge(base, r=2, alpha=16, override=unified)[stem + ".weight"], want)
    with pytest.raises(Exception, match="rank 2"):
        lora.merge(unified, r=4, alpha=16)


@pytest.mark.parametrize("tp", [1, 2])
def test_local_adapters_round_trip_and_shard_merge_equals_full_merge(tiny_models, tp):
    """The trainer's per-projection lora_B fuse like the weights; merging each TP shard = merging the full."""
    cfg = ModelDims.from_hf_config(read_config(tiny_models[("qwen25", False)]))
    g = torch.Generator().manual_seed(1)
    r, h, ffn = 4, cfg.hidden_size, cfg.ffn_hidden_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    full = {  # full (TP 1) local tensors of layer 2
        lora.local_name(2, "linear_qkv", "A"): torch.randn(r, h, generator=g),
        **{lora.local_name(2, "linear_qkv", "B", p): torch.randn(n, r, generator=g)
           for p, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv))},
        lora.local_name(2, "linear_proj", "A"): torch.randn(r, q, generator=g),
        lora.local_name(2, "linear_proj", "B", "o_proj"): torch.randn(h, r, generator=g),
        lora.local_name(2, "linear_fc1", "A"): torch.randn(r, h, generator=g),
        **{lora.local_name(2, "linear_fc1", "B", p): torch.randn(ffn, r, generator=g)
           for p in ("gate_proj", "up_proj")},
    }  # fmt: skip

    def shard(name: str, t: torch.Tensor, rank: int) -> torch.Tensor:
        column = "lora_B" in name and "o_proj" not in name  # B of qkv / fc1: rows; A of proj: columns
        if column:
            return t.chunk(tp)[rank].clone()
        return t.chunk(tp, dim=1)[rank].clone() if "linear_proj.lora_A" in name else t

    one = lora.local_to_megatron(full, cfg=cfg, tp=1, tp_rank=0, layer_offset=1)
    assert lora.adapter_targets(one) == {"linear_qkv", "linear_proj", "linear_fc1"}
    assert one["decoder.layers.1.self_attention.linear_qkv" + lora.B_SUFFIX].shape == (q + 2 * kv, r)
    for rank in range(tp):
        local = {k: shard(k, v, rank) for k, v in full.items()}
        mg = lora.local_to_megatron(local, cfg=cfg, tp=tp, tp_rank=rank, layer_offset=1)
        back = lora.megatron_to_local(mg, cfg=cfg, tp=tp, tp_rank=rank, layer_offset=1)
        assert back.keys() == local.keys() and all(torch.equal(back[k], local[k]) for k in local)
        if tp == 2:  # fc1's lora_B on rank r is [gate_B_r; up_B_r], like linear_fc1.weight
            fc1 = mg["decoder.layers.1.mlp.linear_fc1" + lora.B_SUFFIX]
            gate = full[lora.local_name(2, "linear_fc1", "B", "gate_proj")].chunk(2)[rank]
            assert torch.equal(fc1[: ffn // 2], gate)


def _adapters(root: Path, out: Path, *, r: int, scale: float, filtered: bool) -> None:
    """A LoRA training output shaped as MindSpeed-LLM saves it, on every shard of the base `root`."""
    it = mio.read_tracker(root)
    tp, pp = mio.discover_layout(root, it)
    g = torch.Generator().manual_seed(5)
    for t in range(tp):
        for p in range(pp):
            shard = mio.load_shard(root, it, t, p, pp)
            model = lora.to_peft_layout(shard["model"], ["linear_qkv", "linear_fc2"])
            for name in list(model):
                if name.endswith(".base_layer.weight"):
                    stem = name[: -len(".base_layer.weight")]
                    rows, cols = model[name].shape
                    model[stem + lora.A_SUFFIX] = torch.randn(r, cols, generator=g) * scale
                    model[stem + lora.B_SUFFIX] = torch.randn(rows, r, generator=g) * scale
            if filtered:
                model = lora.filter_lora(model)
            mio.save_shard(out, 7, t, p, pp, {**shard, "model": model, "iteration": 7})
    mio.write_tracker(out, 7)


@pytest.mark.parametrize("filtered", [False, True], ids=["full-save", "lora-ckpt-filter"])
def test_mg2hf_with_lora_load_merges_into_loadable_hf(tiny_models, tmp_path, filtered):
    from transformers import AutoModelForCausalLM

    src = tiny_models[("qwen25", False)]
    hf_to_mg(src, tmp_path / "base", 2, 2)
    _adapters(tmp_path / "base", tmp_path / "lora", r=4, scale=0.05, filtered=filtered)
    flags = ["--lora-r", "4", "--lora-alpha", "8", "--lora-target-modules", "linear_qkv", "linear_fc2"]
    mg_to_hf(tmp_path / "base", tmp_path / "hf", src, "--lora-load", str(tmp_path / "lora"), *flags)
    merged, ref = load_hf(tmp_path / "hf"), load_hf(src)
    assert merged.keys() == ref.keys()
    changed = sorted(k for k in ref if not torch.equal(merged[k], ref[k]))
    assert changed and all(k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "down_proj.weight"))
                           for k in changed)  # fmt: skip
    AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    if not filtered:  # a full LoRA save also merges on its own ("unified")
        mg_to_hf(tmp_path / "lora", tmp_path / "hf2", src, *flags)
        assert all(torch.equal(v, merged[k]) for k, v in load_hf(tmp_path / "hf2").items())


def test_lora_checkpoint_without_merge_flags_is_a_clear_error(tiny_models, tmp_path, capsys):
    src = tiny_models[("qwen25", False)]
    hf_to_mg(src, tmp_path / "base", 1, 1)
    _adapters(tmp_path / "base", tmp_path / "lora", r=4, scale=0.05, filtered=False)
    args = ["--load-model-type", "mg", "--save-model-type", "hf", "--load-dir", str(tmp_path / "lora")]
    assert main([*args, "--save-dir", str(tmp_path / "x"), "--hf-cfg-dir", str(src)]) == 2
    assert "holds LoRA adapters (linear_fc2, linear_qkv)" in capsys.readouterr().err
    code = main([*args, "--save-dir", str(tmp_path / "x"), "--lora-r", "4", "--lora-target-modules", "qkv"])
    err = capsys.readouterr().err
    assert code == 2 and "--lora-alpha" in err and "qkv: not a LoRA target" in err
    hf_to_mg(src, tmp_path / "tp2", 2, 1)
    code = main([*args[:-1], str(tmp_path / "tp2"), "--save-dir", str(tmp_path / "y"),
                 "--lora-load", str(tmp_path / "lora"), "--lora-r", "4", "--lora-alpha", "8"])  # fmt: skip
    assert code == 2 and "has TP 1 PP 1 but --load-dir has TP 2 PP 1" in capsys.readouterr().err
