"""Megatron's distributed-optimizer buffer layout (`engine/train/megatron_buffer.py`), against expectations
worked out by hand from Megatron-LM core_r0.8.0's source (each rule is cited in words next to its test)."""

from __future__ import annotations

import pytest
import torch

from ascendfactory.engine.train import megatron_buffer as mb

NAMES = [  # one Qwen2.5 layer in the order Megatron's GPT model (local spec) registers its parameters
    "embedding.word_embeddings.weight",
    "decoder.layers.0.input_layernorm.weight",
    "decoder.layers.0.self_attention.linear_proj.weight",
    "decoder.layers.0.self_attention.linear_qkv.weight",
    "decoder.layers.0.self_attention.linear_qkv.bias",
    "decoder.layers.0.pre_mlp_layernorm.weight",
    "decoder.layers.0.mlp.linear_fc1.weight",
    "decoder.layers.0.mlp.linear_fc2.weight",
    "decoder.layers.1.input_layernorm.weight",
    "decoder.final_layernorm.weight",
    "output_layer.weight",
]


def test_registration_order():
    # GPTModel registers embedding, decoder (layers, then final_layernorm), output_layer; a TransformerLayer
    # input_layernorm, self_attention, pre_mlp_layernorm, mlp; Attention builds linear_proj before
    # SelfAttention builds linear_qkv; ColumnParallelLinear creates weight before bias
    shuffled = sorted(NAMES, key=lambda n: n[::-1])
    assert sorted(shuffled, key=mb.registration_key) == NAMES
    fc1 = "decoder.layers.0.mlp.linear_fc1."
    lora = [fc1 + "lora_B.default.weight", fc1 + "lora_A.default.weight"]
    assert sorted(lora, key=mb.registration_key) == lora[::-1]  # PEFT: lora_A registered before lora_B
    assert mb.registration_key("decoder.layers.10.input_layernorm.weight") > mb.registration_key(
        "decoder.layers.9.mlp.linear_fc2.weight"
    )  # numeric, not lexical
    with pytest.raises(ValueError, match="not a parameter"):
        mb.registration_key("decoder.layers.0.self_attention.core_attention.scale")


def test_reverse_order_and_64_element_starts():
    # ParamAndGradBuffer iterates params[::-1]; with the distributed optimizer each start is padded up to a
    # multiple of 64 (`_pad_start_of_param_if_needed`), the buffer's end to lcm(DP, 128)
    lay = mb.build_layout([("a", 100), ("b", 10), ("c", 64)], dp=2)
    assert lay.index == {"c": (0, 64), "b": (64, 74), "a": (128, 228)}
    assert lay.buckets == [mb.Bucket(0, 256, 228)]  # numel_unpadded keeps the gap 74..128
    assert lay.world_start == {"c": 0, "b": 64, "a": 128}
    assert mb.build_layout([("a", 100)], dp=3).buckets == [mb.Bucket(0, 384, 100)]  # lcm(3, 128)


def test_bucket_size_splits_and_world_tensor_drops_bucket_padding():
    # a bucket closes once (end - bucket start) >= bucket_size; the next starts at the padded end; the
    # dp-zero world tensor concatenates each bucket's first numel_unpadded elements
    lay = mb.build_layout([("a", 50), ("b", 200), ("c", 10)], dp=2, bucket_size=150)
    assert lay.index == {"c": (0, 10), "b": (64, 264), "a": (384, 434)}
    assert lay.buckets == [mb.Bucket(0, 384, 264), mb.Bucket(384, 512, 50)]
    assert lay.world_start == {"c": 0, "b": 64, "a": 264}
    assert lay.numel_unpadded == 314


def test_shared_embedding_gets_its_own_bucket():
    # `_does_param_require_new_bucket`: a `shared_embedding` param closes the bucket before it (at its own
    # 64-padded start) and one after it
    out = "output_layer.weight"
    last = mb.build_layout([("norm", 8), (out, 300)], dp=1, shared_embedding=out)
    assert last.index == {"output_layer.weight": (0, 300), "norm": (384, 392)}
    assert last.buckets == [mb.Bucket(0, 384, 300), mb.Bucket(384, 512, 8)]
    assert last.world_start == {"output_layer.weight": 0, "norm": 300}
    first = mb.build_layout([("emb", 300), ("w", 128)], dp=2, shared_embedding="emb")
    assert first.index == {"w": (0, 128), "emb": (128, 428)} and not first.straddle_fixed
    assert first.buckets == [mb.Bucket(0, 128, 128), mb.Bucket(128, 512, 300)]
    # 64-aligned but not 128-aligned: core_r0.8.0 would straddle two buckets; here it starts at its bucket
    odd = mb.build_layout([("emb", 300), ("w", 10)], dp=2, shared_embedding="emb")
    assert odd.straddle_fixed and odd.index["emb"] == (128, 428)
    assert odd.buckets[0] == mb.Bucket(0, 128, 64) and odd.world_start == {"w": 0, "emb": 64}


def test_bucket_size_rule():
    # DistributedDataParallel: None without --overlap-grad-reduce; max(40M, 1M x DP); no bucketing on
    # pipeline ranks > 0 nor for model chunks after the first (training.py get_model)
    assert mb.bucket_size_for(overlap_grad_reduce=False, dp=8, pp_rank=0, chunk=0) is None
    assert mb.bucket_size_for(overlap_grad_reduce=True, dp=8, pp_rank=0, chunk=0) == 40_000_000
    assert mb.bucket_size_for(overlap_grad_reduce=True, dp=64, pp_rank=0, chunk=0) == 64_000_000
    assert mb.bucket_size_for(overlap_grad_reduce=True, dp=8, pp_rank=1, chunk=0) is None
    assert mb.bucket_size_for(overlap_grad_reduce=True, dp=8, pp_rank=0, chunk=1) is None


def test_world_round_trip():
    tensors = {"a": torch.arange(6.0).view(2, 3), "b": torch.ones(70), "c": torch.full((4,), 7.0)}
    lay = mb.build_layout([(n, t.numel()) for n, t in tensors.items()], dp=2, bucket_size=64)
    world = mb.to_world(tensors, lay)
    assert world.dtype == torch.float32 and world.numel() == lay.numel_unpadded
    back = mb.from_world(world, lay, {n: t.shape for n, t in tensors.items()})
    assert all(torch.equal(back[n], t) for n, t in tensors.items())
    gaps = torch.ones(lay.numel_unpadded, dtype=torch.bool)
    for n, s in lay.world_start.items():
        gaps[s : s + tensors[n].numel()] = False
    assert gaps.any() and not world[gaps].any()  # padding between parameters is zero
