"""The Megatron memory model, term by term against hand calculations, and its monotonicity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.config.catalog import from_catalog
from ascendfactory.memory.megatron import (
    MegatronJob,
    estimate_megatron,
    in_flight,
    layer_activation,
    stage_params,
)
from ascendfactory.memory.shape import ModelShape, shape_from_arch

# A small GQA model whose every term is easy to compute by hand.
SHAPE = ModelShape(name="hand", layers=4, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=1000, tied=False)


def test_parameter_counts_match_published_sizes():
    # HF model cards: Qwen2.5-7B 7.61B, Llama-2-7B 6.74B, Qwen2.5-0.5B 0.49B (tied)
    assert shape_from_arch(from_catalog("qwen2.5-7b")).params(divisible_by=1) == pytest.approx(
        7.615e9, rel=2e-3
    )
    assert shape_from_arch(from_catalog("llama2-7b")).params(divisible_by=1) == pytest.approx(
        6.738e9, rel=2e-3
    )
    assert shape_from_arch(from_catalog("qwen2.5-0.5b")).params(divisible_by=1) == pytest.approx(
        0.494e9, rel=2e-3
    )


def test_layer_and_stage_parameters_by_hand():
    # attention: 64*(64 + 2*32) + 64*64 = 12288; MLP 3*64*128 = 24576; norms 128
    assert SHAPE.layer_params() == 12288 + 24576 + 128
    job = MegatronJob(shape=SHAPE, tp=2, pp=2, dp=1, vocab_divisible_by=128)
    vocab = 1024  # 1000 padded to a multiple of 128 x TP 2
    assert SHAPE.padded_vocab(2) == vocab
    per_layer = (12288 + 24576) / 2 + 128  # TP shards the matrices; the norms are replicated
    first, _ = stage_params(job, 0, 2)
    last, _ = stage_params(job, 1, 2)
    assert first == pytest.approx(2 * per_layer + vocab * 64 / 2)
    assert last == pytest.approx(2 * per_layer + 64 + vocab * 64 / 2)


def test_model_state_bytes_follow_megatron_table():
    job = MegatronJob(shape=SHAPE, dp=4, precision="bf16")
    p, _ = stage_params(job, 0, 4)
    s = estimate_megatron(job).stages[0]
    assert (s.weights, s.gradients, s.optimizer) == pytest.approx((2 * p, 4 * p, 12 * p))
    s = estimate_megatron(job.with_(distributed_optimizer=True)).stages[0]
    assert s.optimizer == pytest.approx(12 * p / 4)  # 6 + 12/d bytes per parameter
    s = estimate_megatron(job.with_(precision="fp16")).stages[0]
    assert s.weights + s.gradients + s.optimizer == pytest.approx(20 * p)
    s = estimate_megatron(job.with_(precision="fp32", distributed_optimizer=True)).stages[0]
    assert s.weights + s.gradients + s.optimizer == pytest.approx((8 + 8 / 4) * p)


def test_lora_freezes_the_base():
    job = MegatronJob(shape=SHAPE, lora_rank=8)
    s = estimate_megatron(job).stages[0]
    total, trainable = stage_params(job, 0, 4)
    # rank 8 on qkv (64 -> 128), proj (64 -> 64), fc1 (64 -> 256), fc2 (128 -> 64), four layers
    assert trainable == 4 * 8 * ((64 + 128) + (64 + 64) + (64 + 256) + (128 + 64))
    assert s.gradients == pytest.approx(4 * trainable)
    assert s.weights == pytest.approx(2 * total)


def test_layer_activation_by_hand():
    job = MegatronJob(shape=SHAPE, seq=32, mbs=2)
    sbh = 32 * 2 * 64
    # 8sbh (norm, QKV and fc1 inputs) + Q 2sbq + K,V 4sb*kv + attention output 2sbq + gated MLP 6sbf + LSE
    expected = 8 * sbh + 2 * 32 * 2 * (2 * 64 + 2 * 32) + 6 * 32 * 2 * 128 + 4 * 32 * 2 * 4
    assert layer_activation(job) == pytest.approx(expected)
    no_flash = job.with_(flash_attention=False)
    assert layer_activation(no_flash) == pytest.approx(expected - 4 * 32 * 2 * 4 + 2 * 4 * 32 * 32 * 2)
    assert layer_activation(no_flash.with_(recompute="selective")) == pytest.approx(expected - 4 * 32 * 2 * 4)


def test_full_recompute_keeps_layer_inputs():
    # PP 2 (two layers a stage), two micro-batches in flight on stage 0, recompute groups of two layers
    job = MegatronJob(shape=SHAPE, pp=2, seq=32, mbs=2, gbs=4, recompute="full", recompute_num_layers=2)
    plain = job.with_(recompute="none")
    s, p = estimate_megatron(job).stages[0], estimate_megatron(plain).stages[0]
    sbh = 32 * 2 * 64
    full = layer_activation(plain)
    # each in-flight pass keeps its group's 16-bit input (2sbh), plus one group re-created in backward
    assert s.activations == pytest.approx(2 * 2 * sbh + 2 * full)
    assert p.activations == pytest.approx(2 * 2 * full)
    # on the last stage the re-created group comes after the loss's logits are freed: the larger counts
    last = estimate_megatron(job).stages[1]
    assert last.activations == pytest.approx(2 * sbh + max(0.0, 2 * full - last.logits) + 2 * 2 * sbh)


def test_in_flight_micro_batches():
    job = MegatronJob(shape=SHAPE, pp=4, dp=1, mbs=1, gbs=8)
    assert [in_flight(job, r) for r in range(4)] == [4, 3, 2, 1]
    assert in_flight(job.with_(gbs=2), 0) == 2  # fewer micro-batches than stages
    vpp = job.with_(vpp=2)
    assert in_flight(vpp, 0) == 2 * 3 + 1 * 4 + 1  # Megatron's interleaved warm-up + 1


layouts = st.fixed_dictionaries(
    {
        "tp": st.sampled_from([1, 2, 4]),
        "pp": st.sampled_from([1, 2, 4]),
        "dp": st.sampled_from([1, 2, 8]),
        "mbs": st.sampled_from([1, 2, 4]),
        "seq": st.sampled_from([512, 4096, 32768]),
        "precision": st.sampled_from(["bf16", "fp16", "fp32"]),
        "flash_attention": st.booleans(),
        "sequence_parallel": st.booleans(),
        "lora_rank": st.sampled_from([0, 16]),
        "engine": st.sampled_from(["megatron", "embedded"]),
    }
)
MODELS = [shape_from_arch(from_catalog(m)) for m in ("qwen2.5-7b", "llama2-7b", "qwen3-8b")]


@settings(max_examples=150, deadline=None)
@given(layout=layouts, model=st.sampled_from(MODELS), gbs_factor=st.sampled_from([8, 16, 64]))
def test_memory_features_never_raise_the_peak(layout, model, gbs_factor):
    job = MegatronJob(shape=model, gbs=layout["dp"] * layout["mbs"] * gbs_factor, **layout)
    peak = estimate_megatron(job).peak
    selective = estimate_megatron(job.with_(recompute="selective")).peak
    full = estimate_megatron(job.with_(recompute="full")).peak
    assert full <= selective <= peak
    assert estimate_megatron(job.with_(distributed_optimizer=True)).peak <= peak
    if job.tp > 1:
        assert estimate_megatron(job.with_(sequence_parallel=True)).peak <= peak
    # doubling TP or PP (DP halves, same devices; at least PP micro-batches either way, layers split
    # evenly) never raises the peak
    # (the embedded trainer under PP excepted: torch.distributed.pipelining allocates a receive buffer for
    # every micro-batch of the step, and halving DP doubles the micro-batches)
    if job.dp % 2 == 0 and (job.engine == "megatron" or job.pp == 1):
        assert estimate_megatron(job.with_(tp=job.tp * 2, dp=job.dp // 2)).peak <= peak * 1.0001
        # (not for the embedded trainer: torch.distributed.pipelining allocates a receive buffer for every
        # micro-batch of the step, so PP can cost memory there; see `pipelining_buffers`)
        if model.layers % (job.pp * 2) == 0 and job.engine == "megatron":
            assert estimate_megatron(job.with_(pp=job.pp * 2, dp=job.dp // 2)).peak <= peak * 1.0001
