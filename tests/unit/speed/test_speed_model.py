"""The step-time model: Megatron's FLOPs formula (one reading with the trainer's log line), each part of the
step against a hand calculation, and the linear form the calibration fits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.engine.train.logline import FlopsDims, num_floating_point_operations
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.shape import ModelShape
from ascendfactory.speed import report
from ascendfactory.speed.devices import DeviceSpeed, device_speed
from ascendfactory.speed.flops import logit_flops, megatron_flops, score_flops
from ascendfactory.speed.model import CALIBRATED, Workload, linear_terms, predict, unknown

DEV = DeviceSpeed(
    name="test",
    matmul_flops={"bf16": 1e12, "fp16": 1e12, "fp32": 1e11},
    memory_bandwidth=1e11,
    intra_bandwidth=1e10,
    inter_bandwidth=1e9,
    latency_s=1e-5,
    efficiency=0.5,
    step_overhead_s=0.01,
    launch_s=1e-5,
    layer_overhead_s=0.001,
    source="test device",
)
W = Workload(
    layers=4, hidden=64, ffn=176, heads=4, kv_heads=2, kv_channels=16, vocab=1000, seq=128, mbs=2, gbs=8
)


@given(
    layers=st.integers(1, 48),
    hidden=st.sampled_from([64, 128, 896, 4096]),
    heads=st.sampled_from([1, 2, 4, 8]),
    groups=st.sampled_from([1, 2]),
    ffn=st.integers(1, 20000),
    vocab=st.integers(1, 200000),
    seq=st.integers(1, 8192),
    batch=st.integers(1, 64),
)
@settings(max_examples=60, deadline=None)
def test_flops_are_the_trainers_own(layers, hidden, heads, groups, ffn, vocab, seq, batch):
    """One formula: the figure the embedded trainer prints as TFLOP/s (Megatron core_r0.8.0's) and ours."""
    dims = FlopsDims(layers, hidden, ffn, heads, max(1, heads // groups), hidden // heads, vocab)
    ours = megatron_flops(
        batch=batch,
        seq=seq,
        layers=layers,
        hidden=hidden,
        ffn=ffn,
        heads=heads,
        kv_heads=max(1, heads // groups),
        kv_channels=hidden // heads,
        padded_vocab=vocab,
    )
    assert ours == pytest.approx(
        num_floating_point_operations(dims, seq_length=seq, batch_size=batch), rel=1e-12
    )


def test_flops_parts_add_up():
    whole = megatron_flops(
        batch=2, seq=64, layers=3, hidden=32, ffn=0, heads=4, kv_heads=4, kv_channels=8, padded_vocab=128
    )
    # with no MLP: QKV + output (4 h^2 per layer and token for MHA) x 6, scores, logits
    qkvo = 6 * 2 * 64 * 3 * 4 * 32 * 32
    assert whole == pytest.approx(
        qkvo
        + score_flops(batch=2, seq=64, layers=3, heads=4, kv_channels=8)
        + logit_flops(batch=2, seq=64, hidden=32, padded_vocab=128)
    )


def test_each_part_by_hand():
    w = Workload(**{**W.__dict__, "tp": 2, "pp": 2, "dp": 2, "gbs": 16})
    p = predict(w, DEV)
    m = 16 // (2 * 2)
    assert w.micro_batches == m == 4
    flops = megatron_flops(
        batch=16,
        seq=128,
        layers=4,
        hidden=64,
        ffn=176,
        heads=4,
        kv_heads=2,
        kv_channels=16,
        padded_vocab=w.padded_vocab,
    )
    assert w.padded_vocab == 1024  # 1000 up to a multiple of 128 x TP 2
    assert p.parts["compute"] == pytest.approx(flops / 8 / (1e12 * 0.5))
    # per device: 2 x 128 tokens a micro-batch, 4 micro-batches, 2 layers; q 64 / TP, kv 32 / TP, ffn 176 / TP
    per_token_layer = (
        60 * 64 + 54 * 32 + 30 * 16 + 15 * 88
    )  # elements read + written (work.ELEMENTWISE_PASSES)
    layers = 256 * 4 * 2 * per_token_layer * 2  # bf16
    logits = 256 * 4 * 512 * (32 + 2 + 2 * (4 + 2)) / 2  # the vocab slice 1024 / TP; the last of 2 stages
    assert p.parts["memory"] == pytest.approx((layers + logits) / 1e11)
    ops = 33 + 4 * (103 / 2 + 195 * 4 / 2)  # one cross-entropy chunk
    assert p.parts["launch"] == pytest.approx(ops * 1e-5)
    work = p.parts["compute"] + p.parts["memory"] + p.parts["launch"]
    assert p.parts["bubble"] == pytest.approx(work * 1 / 4)
    assert p.parts["overhead"] == pytest.approx(0.01 + 0.001 * 2 * 4)
    act = 128 * 2 * 64 * 2  # s x b x h x 2 bytes (bf16)
    assert p.parts["tp_comm"] == pytest.approx(4 * 2 * 4 * (2 * 1 / 2 * act / 1e10 + 1e-5))
    assert p.parts["pp_comm"] == pytest.approx(2 * 4 * (act / 1e10 + 1e-5))
    grads = w.param_count() / 4 * 4
    assert p.parts["dp_comm"] == pytest.approx(2 * 1 / 2 * grads / 1e10 + 1e-5)
    assert p.parts["optimizer"] == pytest.approx(w.param_count() / 4 * 36 / 1e11)
    assert p.step_s == pytest.approx(sum(p.parts.values()))
    assert p.tokens_per_s_per_device == pytest.approx(16 * 128 / p.step_s / 8)


def test_layouts_move_the_parts_the_right_way():
    base = predict(W, DEV)
    assert (
        base.parts["tp_comm"] == base.parts["pp_comm"] == base.parts["dp_comm"] == base.parts["bubble"] == 0
    )
    full = predict(Workload(**{**W.__dict__, "recompute": "full"}), DEV)
    assert full.parts["compute"] > base.parts["compute"] and full.flops == base.flops
    selective = predict(Workload(**{**W.__dict__, "recompute": "selective"}), DEV)
    assert base.parts["compute"] < selective.parts["compute"] < full.parts["compute"]
    dist = predict(Workload(**{**W.__dict__, "dp": 2, "gbs": 16, "distributed_optimizer": True}), DEV)
    plain = predict(Workload(**{**W.__dict__, "dp": 2, "gbs": 16}), DEV)
    assert dist.parts["optimizer"] == pytest.approx(plain.parts["optimizer"] / 2)
    overlap = predict(Workload(**{**W.__dict__, "dp": 2, "gbs": 16, "overlap_grad_reduce": True}), DEV)
    assert overlap.parts["dp_comm"] == 0 < plain.parts["dp_comm"]
    vpp = predict(Workload(**{**W.__dict__, "pp": 2, "vpp": 2}), DEV)
    no_vpp = predict(Workload(**{**W.__dict__, "pp": 2}), DEV)
    assert vpp.parts["bubble"] == pytest.approx(no_vpp.parts["bubble"] / 2)
    lora = predict(Workload(**{**W.__dict__, "trainable": 0.01}), DEV)
    attention = 12 * 8 * 128 * 128 * 4 * 4 * 16  # 12 B s^2 L a c: no weights, so no weight gradient to save
    weights = base.flops - attention
    assert lora.parts["compute"] == pytest.approx((attention + weights * 2.01 / 3) / (1e12 * 0.5), rel=1e-9)
    across = predict(Workload(**{**W.__dict__, "dp": 4, "gbs": 32, "devices_per_node": 2}), DEV)
    inside = predict(Workload(**{**W.__dict__, "dp": 4, "gbs": 32}), DEV)
    assert across.parts["dp_comm"] > inside.parts["dp_comm"]  # the DP group spans two nodes
    assert predict(Workload(**{**W.__dict__, "train_iters": 100}), DEV).run_s == pytest.approx(
        base.step_s * 100
    )


@given(
    tp=st.sampled_from([1, 2, 4]),
    pp=st.sampled_from([1, 2]),
    dp=st.sampled_from([1, 2]),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
@settings(max_examples=30, deadline=None)
def test_linear_terms_rebuild_the_step(tp, pp, dp, recompute):
    """The calibration's linear form is the model itself: columns x unknowns + rest = predict()."""
    w = Workload(**{**W.__dict__, "tp": tp, "pp": pp, "dp": dp, "gbs": 8 * dp, "recompute": recompute})
    columns, rest = linear_terms(w, DEV)
    assert set(columns) == set(CALIBRATED)
    assert columns["layer_overhead_s"] > 0 and columns["launch_s"] > 0
    assert unknown(DEV, "efficiency") == 2 and unknown(DEV, "intra_bandwidth") == 1e-10
    assert unknown(DEV, "launch_s") == 1e-5
    for dev in (DEV, DEV.with_(async_launch=True)):
        columns, rest = linear_terms(w, dev)
        rebuilt = sum(columns[c] * unknown(dev, c) for c in CALIBRATED) + rest
        assert rebuilt == pytest.approx(predict(w, dev).step_s, rel=1e-9)
        # and near the constants: the step moves as the columns say
        moved = dev.with_(efficiency=0.45, launch_s=1.1e-5)
        guess = sum(columns[c] * unknown(moved, c) for c in CALIBRATED) + rest
        assert guess == pytest.approx(predict(w, moved).step_s, rel=1e-6)


def test_megatron_job_workload_counts_what_the_memory_model_counts():
    shape = ModelShape(
        name="q",
        layers=24,
        hidden=896,
        ffn=4864,
        heads=14,
        kv_heads=2,
        vocab=151936,
        tied=True,
        qkv_bias=True,
    )
    job = MegatronJob(shape=shape, tp=2, pp=1, dp=4, mbs=2, gbs=64, seq=2048, train_iters=500)
    w = job.workload(devices_per_node=8)
    assert (w.layers, w.hidden, w.ffn, w.heads, w.kv_heads, w.kv_channels) == (24, 896, 4864, 14, 2, 64)
    assert (w.tp, w.dp, w.mbs, w.gbs, w.seq, w.train_iters, w.devices_per_node) == (2, 4, 2, 64, 2048, 500, 8)
    assert w.params == shape.params(tp=2)
    lora = MegatronJob(shape=shape, lora_rank=16).workload()
    assert 0 < lora.trainable < 0.05


def test_device_names_and_precisions():
    assert device_speed("H200").name == "h200"  # type: ignore[union-attr]
    assert device_speed("ascend-910b3") is device_speed("910B3") is device_speed("910b")
    assert device_speed("tpu-v9") is None and device_speed(None) is None
    assert device_speed("h100-80gb-hbm3") is device_speed("h100-80gb")  # nvidia-smi's name, lower-cased
    h200 = device_speed("h200")
    assert h200 is not None and h200.rate("bf16") == 796e12 and h200.rate("fp8") == h200.rate("fp32")
    npu = device_speed("ascend-910b2")
    assert npu is not None and "not measured" in npu.source and math.isclose(npu.efficiency, h200.efficiency)


def test_a_shape_far_from_the_calibrated_ones_is_said_to_be():
    """The CPU was calibrated on hidden 64 (the quickstart's demo model) to 768: a narrower model gets no
    figure, a model over twice the widest an extrapolated one."""
    cpu = device_speed("cpu")
    assert cpu is not None and cpu.calibrated_hidden == (64, 768)
    inside = predict(W, cpu)  # hidden 64
    outside = predict(Workload(**{**W.__dict__, "hidden": 32, "kv_channels": 8}), cpu)
    assert inside.in_range and not outside.in_range
    assert any("no figure is supported" in a for a in outside.assumptions)
    assert not any("supported" in a or "extrapolated" in a for a in inside.assumptions)
    larger = predict(Workload(**{**W.__dict__, "hidden": 4096, "kv_channels": 1024}), cpu)
    assert larger.in_range and any("extrapolated" in a for a in larger.assumptions)


def test_no_figure_is_printed_where_none_is_supported():
    """A model below the calibrated shapes gets its measured step time and why there is no prediction, in
    words; a supported one (the quickstart's shape among them) gets predicted against measured."""
    cpu = device_speed("cpu")
    assert cpu is not None
    narrow = Workload(**{**W.__dict__, "hidden": 32, "kv_channels": 8})
    tiny = predict(narrow, cpu).to_dict() | {"workload": narrow.to_dict()}
    line = report.versus_measured(tiny, 0.086)
    assert line is not None and line.startswith("step time: measured 86 ms on cpu (no prediction: ")
    assert "hidden sizes 64 to 768" in line and "this model's, 32," in line and "predicted" not in line
    assert report.render_lines(tiny) == [f"time: no estimate: {report.unsupported(tiny)}"]
    for shape in (W, Workload(**{**W.__dict__, "hidden": 768, "kv_channels": 192})):
        timing = predict(shape, cpu).to_dict() | {"workload": shape.to_dict()}
        line = report.versus_measured(timing, timing["step_s"] / 1.1)
        assert line is not None and "predicted" in line and "(+10%)" in line
        assert report.unsupported(timing) is None and "tokens/s per device" in report.render_lines(timing)[1]


def test_tensor_parallel_dispatch_of_the_embedded_trainer():
    """DTensor's dispatch is paid by the embedded trainer's TP layers only: per step, and per local layer and
    micro-batch (a third more of it under full recompute); never at TP 1 nor for a Megatron job."""
    dev = DEV.with_(tp_dispatch_step_s=0.03, tp_dispatch_layer_s=0.02)
    tp2 = Workload(**{**W.__dict__, "tp": 2, "pp": 2, "gbs": 8, "engine": "embedded"})
    # 4 layers / PP 2 = 2 local layers, GBS 8 / MBS 2 = 4 micro-batches
    assert predict(tp2, dev).parts["tp_dispatch"] == pytest.approx(0.03 + 0.02 * 2 * 4)
    full = Workload(**{**tp2.__dict__, "recompute": "full"})
    assert predict(full, dev).parts["tp_dispatch"] == pytest.approx(0.03 + 0.02 * 2 * 4 * 4 / 3)
    assert predict(Workload(**{**tp2.__dict__, "tp": 1}), dev).parts["tp_dispatch"] == 0
    assert predict(Workload(**{**tp2.__dict__, "engine": "megatron"}), dev).parts["tp_dispatch"] == 0
    assert predict(tp2, DEV).parts["tp_dispatch"] == 0  # not measured on this device


def test_processes_side_by_side_share_the_cpu():
    """On a device that computes in the host's thread, a job of several processes on one machine runs its
    compute, memory-bound work and launches at the measured side-by-side share of a lone process's rate; a
    one-process job, and a GPU, at the whole rate."""
    cpu = DEV.with_(side_by_side=0.8)
    one = predict(W, cpu).parts
    dp2 = predict(Workload(**{**W.__dict__, "dp": 2, "gbs": 16}), cpu).parts
    for part in ("compute", "memory", "launch"):
        assert dp2[part] == pytest.approx(one[part] / 0.8)
    assert predict(W, cpu).step_s == pytest.approx(predict(W, DEV).step_s)
    gpu = DEV.with_(side_by_side=0.8, async_launch=True)
    dp2_gpu = predict(Workload(**{**W.__dict__, "dp": 2, "gbs": 16}), gpu).parts
    assert dp2_gpu["compute"] == pytest.approx(predict(W, gpu).parts["compute"])


def test_data_parallel_step_cost_of_the_embedded_trainer():
    """The measured per-step cost of data parallelism besides the gradient all-reduce is paid once per step
    by the embedded trainer's data-parallel jobs, even when the all-reduce overlaps the backward."""
    dev = DEV.with_(dp_step_s=0.004)
    dp2 = Workload(**{**W.__dict__, "dp": 2, "gbs": 16, "engine": "embedded"})
    assert predict(dp2, dev).parts["dp_comm"] == pytest.approx(predict(dp2, DEV).parts["dp_comm"] + 0.004)
    overlapped = Workload(**{**dp2.__dict__, "overlap_grad_reduce": True})
    assert predict(overlapped, dev).parts["dp_comm"] == pytest.approx(0.004)
    assert predict(Workload(**{**dp2.__dict__, "engine": "megatron"}), dev).parts["dp_comm"] == pytest.approx(
        predict(Workload(**{**dp2.__dict__, "engine": "megatron"}), DEV).parts["dp_comm"]
    )
    assert predict(Workload(**{**W.__dict__, "engine": "embedded"}), dev).parts["dp_comm"] == 0
