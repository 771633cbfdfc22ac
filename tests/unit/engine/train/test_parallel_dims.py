"""ParallelDims: Megatron's messages, DP derivation, GBS default, all problems at once (no mesh built)."""

from types import SimpleNamespace

import pytest

from ascendfactory.engine.train.parallel import ParallelDims
from ascendfactory.errors import ParallelismError


def _args(tp=1, pp=1, mbs=1, gbs=None):
    return SimpleNamespace(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        micro_batch_size=mbs,
        global_batch_size=gbs,
    )


def test_dp_and_microbatches():
    d = ParallelDims.from_args(_args(tp=2, pp=2, mbs=2, gbs=16), 8, num_heads=4, num_kv_heads=2, vocab=256)
    assert (d.dp, d.num_microbatches) == (2, 4)
    assert (
        ParallelDims.from_args(_args(mbs=3), 4, num_heads=4, num_kv_heads=2, vocab=256).global_batch_size
        == 12
    )


def test_world_size_message():
    with pytest.raises(
        ParallelismError, match=r"world size \(6\) is not divisible by tensor parallel size \(4\)"
    ):
        ParallelDims.from_args(_args(tp=4), 6, num_heads=4, num_kv_heads=4, vocab=256)


def test_all_problems_reported():
    with pytest.raises(ParallelismError) as e:
        ParallelDims.from_args(_args(tp=4, mbs=2, gbs=5), 4, num_heads=6, num_kv_heads=2, vocab=250)
    text = str(e.value)
    assert (
        "global batch size (5) is not divisible by micro batch size (2) times data parallel size (1)" in text
    )
    assert "num_attention_heads (6) must be a multiple of tensor_model_parallel_size (4)." in text
    assert "num_query_groups (2) must be a multiple" in text and "padded vocabulary (250)" in text


def test_interleaved_schedule_needs_microbatches_divisible_by_pp():
    """Megatron's rule for the interleaved schedule, checked once DP is known (here PP 2, DP 2)."""
    args = _args(pp=2, mbs=1, gbs=6)
    d = ParallelDims.from_args(args, 4, num_heads=4, num_kv_heads=2, vocab=256)
    assert d.num_microbatches == 3  # without a virtual pipeline 3 micro-batches over PP 2 are fine
    args.num_layers_per_virtual_pipeline_stage = 1
    with pytest.raises(
        ParallelismError,
        match=r"number of microbatches \(3\) is not divisible by pipeline-model-parallel-size \(2\) "
        "when using interleaved schedule",
    ):
        ParallelDims.from_args(args, 4, num_heads=4, num_kv_heads=2, vocab=256)
    args.global_batch_size = 8
    assert ParallelDims.from_args(args, 4, num_heads=4, num_kv_heads=2, vocab=256).num_microbatches == 4
