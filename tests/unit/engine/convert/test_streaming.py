"""Reused shard buffers and single-threaded copies leave the written checkpoints unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from convert_testlib import VARIANTS, load_hf, variant_id

from ascendfactory.engine.convert import megatron_io as mio
from ascendfactory.engine.convert import tensor_ops
from ascendfactory.engine.convert.__main__ import main
from ascendfactory.engine.convert.dims import ModelDims
from ascendfactory.engine.convert.hf_io import read_config
from ascendfactory.engine.convert.run import _stage_names, tied_output_stage
from ascendfactory.engine.convert.shard_map import hf_full_to_local, hf_local_to_megatron
from ascendfactory.engine.convert.streaming import BufferPool, owns_storage, threads


def test_pool_reuses_released_buffers_only() -> None:
    pool = BufferPool()
    a = pool.take((4, 3), torch.float32)
    assert pool.take((4, 3), torch.float32) is not a  # still lent
    pool.release()
    again = {id(pool.take((4, 3), torch.float32)) for _ in range(2)}
    assert id(a) in again
    assert pool.take((4, 3), torch.bfloat16).dtype == torch.bfloat16


def test_own_copies_views_and_keeps_whole_tensors() -> None:
    pool = BufferPool()
    base = torch.arange(12.0).reshape(4, 3)
    assert pool.own(base) is base
    for view in (base[2:], base[:, 1:], base.t()):
        owned = pool.own(view)
        assert owned is not view and owns_storage(owned) and torch.equal(owned, view)


def test_merge_qkv_into_buffer_equals_new_tensor() -> None:
    q, k, v = torch.randn(8 * 4, 6), torch.randn(2 * 4, 6), torch.randn(2 * 4, 6)
    heads = dict(num_heads=8, num_kv_heads=2, head_dim=4)
    out = torch.empty(48, 6)
    assert tensor_ops.merge_qkv(q, k, v, **heads, out=out) is out
    assert torch.equal(out, tensor_ops.merge_qkv(q, k, v, **heads))
    bias = torch.empty(48)
    assert torch.equal(
        tensor_ops.merge_qkv(q[:, 0], k[:, 0], v[:, 0], **heads, out=bias),
        tensor_ops.merge_qkv(q[:, 0], k[:, 0], v[:, 0], **heads),
    )


def test_threads_restores_the_count() -> None:
    before = torch.get_num_threads()
    with threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_saved_shards_equal_the_plain_mapping(tiny_models: dict, tmp_path: Path, variant: tuple) -> None:
    """Every shard (TP 2, PP 2) holds exactly the tensors of the unpooled mapping, each in its own storage."""
    src = tiny_models[variant]
    assert (
        main(
            [
                "--load-model-type",
                "hf",
                "--save-model-type",
                "mg",
                "--load-dir",
                str(src),
                "--save-dir",
                str(tmp_path),
                "--target-tensor-parallel-size",
                "2",
                "--target-pipeline-parallel-size",
                "2",
            ]
        )
        == 0
    )
    cfg = read_config(src)
    dims = ModelDims.from_hf_config(cfg, variant[0])
    full = load_hf(src)
    if dims.tie_word_embeddings:
        full.pop("lm_head.weight", None)
    padded = dims.padded_vocab_size(2, 1)
    counts = mio.layers_per_stage(dims.num_layers, 2, None)
    for pp_rank, offset in enumerate(mio.layer_offsets(counts)):
        for tp_rank in range(2):
            stage = {n: full[n] for n in _stage_names(list(full), dims, offset, counts[pp_rank], pp_rank, 2)}
            keep = tied_output_stage(dims, pp_rank, 2)
            if keep:  # the last stage's own copy of a tied embedding (convert_ckpt_v2.py)
                stage["lm_head.weight"] = full["model.embed_tokens.weight"]
            local = hf_full_to_local(stage, cfg=dims, tp=2, tp_rank=tp_rank, padded_vocab_size=padded)
            want = hf_local_to_megatron(
                local, cfg=dims, tp=2, tp_rank=tp_rank, layer_offset=offset, keep_tied_output=keep
            )
            got = mio.load_shard(tmp_path, 1, tp_rank, pp_rank, 2)["model"]
            assert list(got) == list(want)
            for name, t in got.items():
                assert torch.equal(t, want[name]) and t.dtype == want[name].dtype, name
                assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), name
