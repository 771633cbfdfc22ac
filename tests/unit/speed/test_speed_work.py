"""What one step does, each term by hand: the GEMMs (their FLOPs are Megatron's), the memory-bound bytes, the
operator count, the GEMM table's interpolation, and how a device that queues kernels (a GPU) adds them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.speed import work
from ascendfactory.speed.devices import DeviceSpeed
from ascendfactory.speed.model import Workload, predict

DEV = DeviceSpeed(
    name="test",
    matmul_flops={"bf16": 1e12, "fp16": 1e12, "fp32": 1e11},
    memory_bandwidth=1e11,
    intra_bandwidth=1e10,
    inter_bandwidth=1e9,
    latency_s=1e-5,
    efficiency=1.0,
    step_overhead_s=0.0,
    launch_s=2e-5,
    source="test device",
)
W = Workload(
    layers=4, hidden=64, ffn=176, heads=4, kv_heads=2, kv_channels=16, vocab=1000, seq=128, mbs=2, gbs=8
)


@given(
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2]),
    cp=st.sampled_from([1, 2]),
    engine=st.sampled_from(["embedded", "megatron"]),
    experts=st.sampled_from([1, 2]),
)
@settings(max_examples=40, deadline=None)
def test_the_gemms_add_up_to_megatrons_flops(tp, pp, dp, cp, engine, experts):
    w = (
        Workload(
            **{**W.__dict__, "tp": tp, "pp": pp, "dp": dp, "cp": cp, "gbs": 8 * dp, "engine": engine},
            routed_experts=experts,
        )
        if False
        else Workload(
            **{
                **W.__dict__,
                "tp": tp,
                "pp": pp,
                "dp": dp,
                "cp": cp,
                "gbs": 8 * dp,
                "engine": engine,
                "routed_experts": experts,
            }
        )
    )
    per_device = sum(g.flops for g in work.gemms(w))
    assert per_device * w.world == pytest.approx(predict(w, DEV).flops, rel=1e-12)


def test_recompute_and_lora_gemms():
    base = sum(g.flops for g in work.gemms(W))
    attention = 12 * 2 * 128 * 128 * 4 * 4 * 16 * 4  # 12 B s^2 L a c, 4 micro-batches of 2 sequences
    logits = 6 * 8 * 128 * 64 * 1024
    layers = base - attention - logits
    full = sum(g.flops for g in work.gemms(Workload(**{**W.__dict__, "recompute": "full"})))
    assert full == pytest.approx(base + (layers + attention) / 3)  # the layers' forward again
    selective = sum(g.flops for g in work.gemms(Workload(**{**W.__dict__, "recompute": "selective"})))
    assert selective == pytest.approx(base + attention / 3)
    frozen = sum(g.flops for g in work.gemms(Workload(**{**W.__dict__, "trainable": 0.0})))
    assert frozen == pytest.approx(attention + (layers + logits) * 2 / 3)  # no weight gradients


def test_the_embedded_trainers_gemm_shapes():
    """HF's separate q, k, v, gate and up projections; the backward's data and weight gradients."""
    one = Workload(**{**W.__dict__, "gbs": 2, "layers": 1, "engine": "embedded"})
    shapes = {(g.m, g.k, g.n) for g in work.gemms(one)}
    t = 256  # MBS 2 x seq 128
    assert {(t, 64, 64), (t, 64, 64), (64, t, 64)} <= shapes  # q forward, its data and weight gradients
    assert {(t, 64, 32), (t, 32, 64), (64, t, 32)} <= shapes  # k and v (2 heads of 16)
    assert {(t, 64, 176), (t, 176, 64), (64, t, 176), (176, t, 64)} <= shapes  # gate / up, down
    assert (t, 64, 1024) in shapes  # the output layer over the padded vocabulary
    fused = {(g.m, g.k, g.n) for g in work.gemms(Workload(**{**one.__dict__, "engine": "megatron"}))}
    assert (t, 64, 64 + 2 * 32) in fused and (t, 64, 2 * 176) in fused


def test_elementwise_bytes_by_hand():
    layers, logits = work.elementwise_bytes(W, 4)
    per_token_layer = 60 * 64 + 54 * 64 + 30 * 32 + 15 * 176
    assert layers == pytest.approx(
        256 * 4 * 4 * per_token_layer * 4
    )  # tokens x micro-batches x layers x fp32
    assert logits == pytest.approx(256 * 4 * 1024 * (32 + 4))
    _, bf16 = work.elementwise_bytes(W, 2)
    assert bf16 == pytest.approx(256 * 4 * 1024 * (32 + 2 + 2 * 6))  # the casts to fp32 and back
    _, full = work.elementwise_bytes(Workload(**{**W.__dict__, "recompute": "full"}), 4)
    assert (
        work.elementwise_bytes(Workload(**{**W.__dict__, "recompute": "full"}), 4)[0]
        == pytest.approx(layers * 4 / 3)
        and full == logits
    )


def test_operators_by_hand():
    assert work.operators(W) == 33 + 4 * (103 + 195 * 4)
    assert work.operators(Workload(**{**W.__dict__, "gbs": 2, "layers": 2})) == 526  # as profiled
    big = Workload(**{**W.__dict__, "vocab": 151936, "seq": 2048, "mbs": 8, "gbs": 8})
    assert work.ce_chunks(big) == 19  # 2^27 // 152064 = 882 tokens a chunk, 16384 tokens
    assert work.operators(big) == 33 + 103 + 195 * 4 + 28 * 18


def test_a_device_that_queues_kernels_pays_the_longer_of_launch_and_work():
    """A tiny model on a GPU: every kernel is shorter than its launch, so the step is the launches; on a
    synchronous CPU thread launches and work add up."""
    gpu = DEV.with_(async_launch=True, launch_s=1e-4)
    p = predict(W, gpu)
    calls = sum(g.count for g in work.gemms(W))
    assert p.parts["compute"] == pytest.approx(calls * 1e-4)
    layers, logits = work.elementwise_bytes(W, 2)
    assert p.parts["launch"] == pytest.approx((work.operators(W) - calls) * 1e-4)  # longer than their bytes
    assert p.parts["memory"] == pytest.approx(logits / 1e11)
    cpu = predict(W, DEV)
    assert cpu.parts["launch"] == pytest.approx(work.operators(W) * 2e-5)
    assert cpu.parts["compute"] == pytest.approx(cpu.flops / 1e12)
    # a large model: the GEMMs outlast their launches and the memory-bound bytes the launches
    big = Workload(
        **{
            **W.__dict__,
            "hidden": 4096,
            "ffn": 11008,
            "heads": 32,
            "kv_heads": 32,
            "kv_channels": 128,
            "seq": 4096,
            "mbs": 1,
            "gbs": 1,
        }
    )
    p = predict(big, gpu.with_(memory_bandwidth=1e9, launch_s=2e-5))
    assert p.parts["compute"] == pytest.approx(p.flops / 1e12)
    layers, logits = work.elementwise_bytes(big, 2)
    assert p.parts["memory"] == pytest.approx((layers + logits) / 1e9) and p.parts["launch"] == 0


def test_the_gemm_table_interpolates_in_log_shape():
    table = tuple(
        (m, k, n, 1.0 + (m == 256) + (k == 256) + (n == 256))
        for m in (64, 256)
        for k in (64, 256)
        for n in (64, 256)
    )
    dev = DEV.with_(gemm_table=table)
    assert dev.gemm_rate(64, 64, 64, "fp32") == pytest.approx(1e11)
    assert dev.gemm_rate(256, 256, 256, "fp32") == pytest.approx(4e11)
    assert dev.gemm_rate(128, 64, 64, "fp32") == pytest.approx(1.5e11)  # halfway in log2 between 64 and 256
    assert dev.gemm_rate(8, 64, 64, "fp32") == pytest.approx(1e11)  # clamped at the table's edge
    assert dev.gemm_rate(4096, 4096, 4096, "fp32") == pytest.approx(4e11)
    assert DEV.gemm_rate(8, 8, 8, "fp32") == 1e11  # no table: the large-GEMM rate
