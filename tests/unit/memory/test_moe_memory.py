"""The memory model's mixture-of-experts terms, by hand, and against published MoE peaks (ms-swift's Megatron
example scripts, which name each layout and its memory per GPU: tests/support/published_moe.py)."""

from __future__ import annotations

import pytest

from ascendfactory.memory.devices import RESERVE_FIXED, RESERVE_FRACTION
from ascendfactory.memory.megatron import (
    MegatronJob,
    estimate_megatron,
    layer_activation,
    moe_activation,
    stage_params,
)
from ascendfactory.memory.shape import MLAShape, ModelShape
from tests.support.published_moe import published

GiB = 2**30
# 4 layers, the first dense; 8 experts of 32 (top 2) and a shared expert MLP of 32
MOE = ModelShape(
    name="moe",
    layers=4,
    hidden=64,
    ffn=128,
    heads=4,
    kv_heads=2,
    vocab=1024,
    tied=False,
    experts=8,
    moe_topk=2,
    moe_ffn=32,
    shared_ffn=32,
    dense_layers=1,
)


def test_parameters_by_hand():
    attn = 64 * (64 + 2 * 32) + 64 * 64  # 12288
    dense = attn + 3 * 64 * 128 + 128
    moe = attn + 64 * 8 + 3 * 64 * 32 + 8 * 3 * 64 * 32 + 128  # router, shared, experts, norms
    assert MOE.decoder_params() == dense + 3 * moe
    active = attn + 64 * 8 + 3 * 64 * 32 + 2 * 3 * 64 * 32 + 128  # top 2 of the 8 experts
    assert MOE.active_decoder_params() == dense + 3 * active
    job = MegatronJob(shape=MOE, tp=2, pp=2, ep=2, dp=2, vocab_divisible_by=1)
    # stage 0: layers 0 (dense) and 1 (MoE); TP shards attention, MLPs and experts, EP the experts
    first, _ = stage_params(job, 0, 2)
    want = 2 * (attn / 2 + 128) + 3 * 64 * 128 / 2 + 64 * 8 + 3 * 64 * 32 / 2 + 8 * 3 * 64 * 32 / 4
    assert first == pytest.approx(want + 1024 * 64 / 2)


def test_expert_optimizer_state_is_sharded_over_dp_over_ep():
    job = MegatronJob(shape=MOE, dp=4, ep=2, distributed_optimizer=True, vocab_divisible_by=1)
    s = estimate_megatron(job).stages[0]
    total, _ = stage_params(job, 0, 4)
    experts = 3 * 8 * 3 * 64 * 32 / 2  # three MoE layers, half the experts on this EP rank
    assert s.optimizer == pytest.approx(12 * (total - experts) / 4 + 12 * experts / 2)  # DP 4; DP/EP 2


def test_moe_layer_activations_by_hand():
    job = MegatronJob(shape=MOE, seq=16, mbs=1, tp=1)
    router, copies = 4 * 16 * 8, 2 * 16  # fp32 logits; top-2 copies of 16 tokens
    assert moe_activation(job, 16) == pytest.approx(router + 2 * copies * 64 + copies * (2 * 64 + 6 * 32))
    dense, moe = layer_activation(job, moe=False), layer_activation(job)
    assert moe - dense == pytest.approx(moe_activation(job, 16) + 6 * 16 * 32 - 6 * 16 * 128)
    # a capacity factor below 1 drops tokens; padding to capacity fills every expert
    capped = job.with_(capacity_factor=0.5)
    assert moe_activation(capped, 16) < moe_activation(job, 16)
    padded = job.with_(capacity_factor=1.5, pad_to_capacity=True)
    assert moe_activation(padded, 16) > moe_activation(job, 16)


def test_mla_attention_parameters_by_hand():
    mla = MLAShape(q_lora=24, kv_lora=32, qk_nope=16, qk_rope=8, v_head=16)
    q = 64 * 24 + 24 + 24 * 4 * 24
    kv = 64 * (32 + 8) + 32 + 32 * 4 * (16 + 16)
    assert mla.params(64, 4) == q + kv + 4 * 16 * 64


def test_step_time_counts_active_parameters():
    dense_equivalent = ModelShape(
        name="d", layers=4, hidden=64, ffn=128, heads=4, kv_heads=2, vocab=1024, tied=False
    )
    moe = MegatronJob(shape=MOE, gbs=8, seq=64)
    assert moe.step_time(1e12) < MegatronJob(shape=dense_equivalent, gbs=8, seq=64).step_time(1e12) * 10
    more_experts = moe.with_(shape=ModelShape(**{**MOE.__dict__, "experts": 64}))
    # routing to 2 of 64 instead of 2 of 8 experts: the work per token barely moves (the router grows)
    assert more_experts.step_time(1e12) == pytest.approx(moe.step_time(1e12), rel=0.05)


def _error(job: MegatronJob, measured: float) -> float:
    peak = max(s.total for s in estimate_megatron(job).stages)
    peak += RESERVE_FIXED + RESERVE_FRACTION * 80 * GiB  # nvidia-smi: the runtime context and allocator
    return (peak - measured * GiB) / (measured * GiB)


CASES = published()


@pytest.mark.parametrize(("label", "job", "measured"), CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_within_15_percent_of_published_moe_peaks(label, job, measured):
    assert abs(_error(job, measured)) <= 0.15, f"{label}: {_error(job, measured):+.1%}"


def test_qwen3_30b_tp2_ep8_tensors_by_hand():
    """What one rank of ms-swift's Qwen3-30B-A3B TP2 x EP8 run (16 GPUs) holds at its peak, by hand from the
    model's config.json and Megatron's rules (the run used core_r0.11.0; each rule the same at core_v0.12.1):
    - the routed experts: 16 of 128 per EP rank, each sharded by the expert TP size, which defaults to TP
      (megatron/training/arguments.py line 358 at core_v0.12.1); the router, norms and q/k norms replicated;
    - bytes per parameter: bf16 weight 2, fp32 main gradient 4 (arguments.py line 593: bf16 accumulates in
      fp32; megatron/core/distributed/distributed_data_parallel.py line 124), fp32 master 4 + Adam moments 8
      (megatron/core/optimizer/distrib_optimizer.py line 366, `clone().float()`), the last 12 sharded over
      DP = 8 for dense parameters and over the expert data-parallel group, 16 / (ETP 2 x EP 8 x PP 1) = 1,
      for experts (megatron/core/parallel_state.py line 699; megatron/core/optimizer/__init__.py line 586);
    - full recompute (uniform, 1 layer): each layer's SP-sharded bf16 input, and the final norm's and output
      layer's; the fused cross entropy's bf16 logits and their fp32 copy over the TP vocabulary shard
      (megatron/core/tensor_parallel/cross_entropy.py line 28, `.float()`; kept as the softmax for backward:
      megatron/core/fusions/fused_cross_entropy.py `ctx.save_for_backward(exp_logits, ...)`), which
      outweigh one recomputed MoE layer's working set, so that set adds nothing at the peak."""
    _, job, _ = CASES[3]
    h, layers, experts, f, vocab, q, kv = 2048, 48, 128, 768, 151936, 32 * 128, 4 * 128
    tp, ep, dp, s = 2, 8, 8, 8192
    expert = layers * (experts // ep) * 3 * h * f / tp
    dense = layers * ((h * (q + 2 * kv) + q * h) / tp + 2 * h + h * experts) + 2 * vocab * h / tp + h
    stage = estimate_megatron(job).stages[0]
    assert stage.weights == pytest.approx(2 * (dense + expert), rel=1e-5)  # q/k norms (256 a layer) aside
    assert stage.gradients == pytest.approx(4 * (dense + expert), rel=1e-5)
    assert stage.optimizer == pytest.approx(12 * dense / dp + 12 * expert / 1, rel=1e-5)
    states = stage.weights + stage.gradients + stage.optimizer
    assert 35.7 * GiB < states < 35.9 * GiB
    layer_input = 2 * s * h / tp
    assert stage.activations == pytest.approx((layers + 2) * layer_input)
    assert stage.logits == pytest.approx((2 + 4) * s * vocab / tp)
    assert layer_activation(job.with_(recompute="none")) < stage.logits
    assert stage.total == pytest.approx(states + stage.activations + stage.logits + 2 * s * h)  # + SP gather


@pytest.mark.xfail(
    strict=True,
    reason="ms-swift's 60 GiB is a device-level reading (not max_memory_allocated) of a 2-node run on "
    "Megatron core_r0.11.0 without expandable segments; the tensors Megatron keeps at that rank's peak are "
    "40.1 GiB (test_qwen3_30b_tp2_ep8_tensors_by_hand: states 35.8, layer inputs 0.8, fused-CE logits "
    "3.5), and the ~14 GiB beyond our 6 GiB reserve is the caching allocator's cache, NCCL's buffers and "
    "the CUDA context, which no term derived from the configuration can give "
    "(tests/support/published_moe.py)",
)
def test_qwen3_30b_full_tp2_ep8_is_the_known_miss():
    label, job, measured = CASES[3]
    assert abs(_error(job, measured)) <= 0.15, f"{label}: {_error(job, measured):+.1%}"


def test_expert_tensor_parallel_size_by_hand():
    """--expert-tensor-parallel-size 1 under TP 2 (MindSpeed-LLM 26.1.0's DeepSeek-V3 example passes it):
    each device holds its EP share of the experts whole, their optimizer state is sharded over TP x DP / (ETP
    x EP) = 4 ranks (Megatron-LM core_v0.12.1 megatron/core/parallel_state.py line 699), and the dispatcher
    gathers over the expert TP group only (token_dispatcher.py line 53), so a device computes the copies of
    its own sequence shard through full-width experts."""
    job = MegatronJob(
        shape=MOE, tp=2, ep=2, dp=4, seq=16, sequence_parallel=True, distributed_optimizer=True, etp=1
    )
    assert (job.expert_tp, job.expert_dp) == (1, 4)
    assert job.with_(etp=None).expert_dp == 2  # ETP = TP: DP / EP
    s = estimate_megatron(job).stages[0]
    total, _ = stage_params(job, 0, 4)
    experts = 3 * 8 * 3 * 64 * 32 / 2  # three MoE layers, half the experts on this EP rank, each whole
    assert stage_params(job.with_(etp=None), 0, 4)[0] == pytest.approx(total - experts / 2)
    assert s.optimizer == pytest.approx(12 * (total - experts) / 4 + 12 * experts / 4)
    router, copies = 4 * 16 * 8 / 2, 2 * 16 / 2  # the SP shard's 8 tokens, top 2
    assert moe_activation(job, 16) == pytest.approx(router + 2 * copies * 64 + copies * (2 * 64 + 6 * 32))
    # ETP = TP: the TP group's 16 tokens gathered, the expert FFN halved
    tp_sharded = moe_activation(job.with_(etp=None), 16)
    assert tp_sharded == pytest.approx(router + 2 * 2 * copies * 64 + 2 * copies * (2 * 64 + 6 * 32 / 2))


def test_the_estimate_reads_the_expert_tensor_parallel_size_it_launches(tmp_path, monkeypatch, capsys):
    """mindspeed-llm 26.1.0 hands Megatron --expert-tensor-parallel-size: the estimate follows it."""
    import json
    import os

    from ascendfactory.cli.app import main
    from ascendfactory.features.templates import render_experiment
    from ascendfactory.memory import devices

    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    monkeypatch.setattr(devices, "probe_devices", lambda **_: None)
    path = tmp_path / "q30.yaml"
    path.write_text(
        render_experiment(
            backend="mindspeed-llm", model_name="qwen3-30b-a3b", exp_name="full-4k", output_file=str(path)
        )
    )
    layout = [
        f"--backend_config.training.{k}"
        for k in (
            "tensor-model-parallel-size=2",
            "sequence-parallel=true",
            "expert-model-parallel-size=4",
            "moe-token-dispatcher-type=alltoall",
        )
    ]
    weights = {}
    for etp in ("2", "1"):
        assert (
            main(
                [
                    "estimate",
                    str(path),
                    "--json",
                    *layout,
                    f"--backend_config.training.expert-tensor-parallel-size={etp}",
                ]
            )
            == 0
        )
        memory = json.loads(capsys.readouterr().out)["memory"]
        weights[etp] = memory["stages"][0]["weights"]
        assert f"sharded by expert TP{etp}" in next(a for a in memory["assumptions"] if a.startswith("MoE"))
    # 48 MoE layers x 128 experts / EP 4, each 3 x 2048 x 768 in bf16: whole with ETP 1, halved with ETP 2
    assert weights["1"] - weights["2"] == 2 * 48 * 128 // 4 * 3 * 2048 * 768 // 2
