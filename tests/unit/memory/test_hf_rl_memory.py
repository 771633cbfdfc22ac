"""The HF (LLaMA-Factory, verl) and RL memory models against hand calculations."""

from __future__ import annotations

import pytest

from ascendfactory.memory.hf import HFJob, estimate_hf, trainable_params
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.rl import RLJob, estimate_rl
from ascendfactory.memory.shape import ModelShape

SHAPE = ModelShape(name="hand", layers=4, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=1000, tied=False)
P = SHAPE.params(tp=1, divisible_by=1)


def states(job: HFJob) -> tuple[float, float, float]:
    s = estimate_hf(job).stages[0]
    return s.weights, s.gradients, s.optimizer


def test_zero_stages_by_hand():
    base = HFJob(shape=SHAPE, devices=8, finetuning="full")
    assert states(base.with_(zero=0)) == pytest.approx((2 * P, 2 * P, 16 * P))
    assert states(base.with_(zero=1)) == pytest.approx((2 * P, 2 * P, 16 * P / 8))
    assert states(base.with_(zero=2)) == pytest.approx((2 * P, 2 * P / 8, 16 * P / 8))
    largest = SHAPE.largest_layer()
    assert states(base.with_(zero=3)) == pytest.approx((2 * P / 8 + 4 * largest, 2 * P / 8, 16 * P / 8))
    assert states(base.with_(zero=3, offload_optimizer=True))[2] == 0
    assert states(base.with_(zero=3, offload_param=True)) == pytest.approx((4 * largest, 0, 0))
    assert states(base) == pytest.approx((4 * P, 4 * P, 8 * P))  # DDP, fp32 AMP
    assert states(base.with_(pure_bf16=True)) == pytest.approx((2 * P, 2 * P, 4 * P))


def test_lora_and_qlora_freeze_the_base():
    lora = HFJob(shape=SHAPE, finetuning="lora", lora_rank=8)
    t = trainable_params(lora)
    # q (64->64), k, v (64->32 each), o (64->64), gate, up (64->128), down (128->64): r x (in + out) each
    per_layer = 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64))
    assert t == 4 * per_layer
    w, g, o = states(lora)
    assert w == pytest.approx(4 * t + 2 * (P - t)) and g == pytest.approx(4 * t) and o == pytest.approx(8 * t)
    w4, _, _ = states(lora.with_(quantization_bit=4))
    assert w4 == pytest.approx(4 * t + 0.53 * (P - t))


def test_gradient_checkpointing_keeps_layer_inputs_and_logits_are_fp32():
    job = HFJob(shape=SHAPE, batch=2, seq=32)
    s = estimate_hf(job).stages[0]
    plain = estimate_hf(job.with_(gradient_checkpointing=False)).stages[0]
    assert s.activations < plain.activations
    assert s.logits == plain.logits == 10 * 32 * 2 * 1000


def test_fsdp_shards_fp32_states():
    job = HFJob(shape=SHAPE, devices=4, fsdp=True)
    assert states(job) == pytest.approx((4 * P / 4, 4 * P / 4, 8 * P / 4))
    assert states(job.with_(offload_param=True, offload_optimizer=True)) == (0, 0, 0)


def test_rl_phases_share_the_device():
    actor = MegatronJob(shape=SHAPE, dp=2, mbs=1, gbs=4, seq=64)
    job = RLJob(actor=actor, gpu_memory_utilization=0.5)
    est = estimate_rl(job, device_memory=1000**3)
    update, rollout = est.stages
    assert update.stage.startswith("update") and rollout.stage.startswith("rollout")
    from ascendfactory.memory.megatron import estimate_megatron

    actor_weights = estimate_megatron(actor).stages[0].weights
    assert update.weights == pytest.approx(2 * actor_weights)  # the actor's and the reference's weights
    assert rollout.weights == pytest.approx(2 * actor_weights) and rollout.activations == 0
    assert rollout.buffers == pytest.approx(0.5 * 1000**3)  # vLLM's share of the whole device
    offloaded = estimate_rl(job.with_(offload_grad=True, offload_optimizer=True), device_memory=1000**3)
    assert offloaded.stages[1].gradients == offloaded.stages[1].optimizer == 0
    unknown = estimate_rl(job, device_memory=None)
    assert unknown.stages[1].buffers == 0 and any("unknown" in a for a in unknown.assumptions)
