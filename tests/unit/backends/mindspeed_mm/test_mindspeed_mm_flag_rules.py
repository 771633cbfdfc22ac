"""MindSpeed-MM 2.1.0's rules across training flags (backends/mindspeed_mm/flag_rules.py): each rule refuses
its own example and passes the same flags with the fix applied; a broken rule stops the plan naming its key.
Each rule was a statement of the coverage map whose case we accepted and MindSpeed-MM refused; the examples
are judged by MindSpeed-MM itself in tests/integration/test_mindspeed_mm_flag_rules_judged.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ascendfactory.backends.mindspeed_mm.flag_rules import ENV, RULES, WORLD, broken_rules, problems
from ascendfactory.backends.mindspeed_mm.keys import preset_name, presets, training_defaults
from ascendfactory.backends.mindspeed_mm.read import example_flags

OFF = None  # in an example: the flag removed
MOE = {"num-experts": 8}


def base_flags() -> dict[str, Any]:
    """What the plan of the shipped Qwen2.5-VL-7B template hands pretrain_vlm.py (TP1 PP4 on 8 devices),
    with model.json's sizes as MindSpeed-MM's validate_args copies them and the example's exports."""
    preset = presets("2.1.0")["models"][preset_name("qwen2.5-vl-7b", None, "2.1.0")]
    flags = example_flags(preset).merged()
    layout = {"TP": 1, "PP": 4, "CP": 1, "MBS": 1, "GBS": 192}
    for k, v in list(flags.items()):
        if isinstance(v, str) and v.startswith("${"):
            flags[k] = layout.get(v[2:-1], "/out/x")
    decoder = preset["model"]["text_decoder"]
    flags.update(
        {
            "num-layers": decoder["num_layers"],
            "hidden-size": decoder["hidden_size"],
            "num-attention-heads": decoder["num_attention_heads"],
            "max-position-embeddings": decoder["max_position_embeddings"],
        }
    )
    flags.update({ENV + k: v for k, v in preset["exports"].items()})
    flags[WORLD] = 8
    return flags


# rule name -> (flags that break it, the same with the fix applied over them)
EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "moe-coc": ({**MOE, "use-ascend-coc": True}, {"use-ascend-coc": OFF}),
    "moe-mc2": ({**MOE, "use-ascend-mc2": True}, {"use-ascend-mc2": OFF}),
    "moe-legacy-megatron-moe": ({**MOE, "use-legacy-models": True}, {"use-legacy-models": OFF}),
    "moe-deepspeed-mcore": ({**MOE, "moe-model-type": "deepspeed_moe"}, {"moe-model-type": OFF}),
    "ema-adamw-reuse-fp32": (
        {"optimizer-selection": "fused_ema_adamw", "reuse-fp32-param": True},
        {"reuse-fp32-param": OFF},
    ),
    "mla-dims": (
        {"multi-head-latent-attention": True, "kv-lora-rank": 16},
        {"multi-head-latent-attention": OFF},
    ),
    "yarn-original-max": (
        {"rope-scaling-type": "yarn"},
        {"rope-scaling-original-max-position-embeddings": 32768},
    ),
    "optimize-vpp-send-recv-comm": (
        {"optimize-vpp-send-recv-comm": True},
        {"optimize-vpp-send-recv-comm": OFF},
    ),
    "zero3": ({"enable-zero3": True, "reuse-fp32-param": True}, {"reuse-fp32-param": OFF}),
    "moe-no-drop-pp": ({"moe-no-drop": True}, {"moe-no-drop": OFF}),
    "param-and-grad-buffer-pad": ({"param-and-grad-buffer-pad": -1}, {"param-and-grad-buffer-pad": 64}),
    "fused-rmsnorm-normalization": ({"normalization": "LayerNorm"}, {"normalization": "RMSNorm"}),
    "fused-rmsnorm-nd-matmul": ({"use-nd-matmul": True}, {"use-nd-matmul": OFF}),
    "fused-swiglu": ({"swiglu": False}, {"swiglu": True}),
    "fused-rotary-pos-emb": (
        {"use-fused-rotary-pos-emb": True},
        {"position-embedding-type": "rope"},
    ),
    "alibi-fusion-attn-type": ({"alibi-fusion-attn-type": 1}, {"alibi-fusion-attn-type": 0}),
    "reuse-fp32-param-bf16": ({"reuse-fp32-param": True, "bf16": False}, {"bf16": True}),
    "pipe-experts-multi-data": (
        {**MOE, "use-pipe-experts": True, "pipe-experts-multi-data": 0},
        {"pipe-experts-multi-data": 2},
    ),
    "pipe-experts-multi-stream": (
        {**MOE, "use-pipe-experts": True, "pipe-experts-multi-stream": True},
        {"pipe-experts-multi-stream": OFF},
    ),
    "pipe-experts-experts": ({"use-pipe-experts": True}, {"use-pipe-experts": OFF}),
    "moe-alltoall-overlap-dispatcher": (
        {"moe-alltoall-overlap-comm": True},
        {"moe-alltoall-overlap-comm": OFF},
    ),
    "moe-adaptive-recompute-activation": (
        {"moe-adaptive-recompute-activation": True, "moe-token-dispatcher-type": "alltoall"},
        {"moe-token-dispatcher-type": "allgather"},
    ),
    "moe-allgather-overlap-dispatcher": (
        {"moe-allgather-overlap-comm": True, "moe-token-dispatcher-type": "alltoall"},
        {"moe-allgather-overlap-comm": OFF},
    ),
    "moe-overlap-async-comm": ({"moe-allgather-overlap-comm": True}, {"moe-allgather-overlap-comm": OFF}),
    "moe-overlap-grouped-gemm": (
        {"moe-allgather-overlap-comm": True, "moe-permutation-async-comm": True},
        {"moe-allgather-overlap-comm": OFF},
    ),
    "moe-alltoall-overlap-tp": (
        {
            "moe-alltoall-overlap-comm": True,
            "moe-token-dispatcher-type": "alltoall",
            "moe-permutation-async-comm": True,
            "tensor-model-parallel-size": 2,
        },
        {"moe-alltoall-overlap-comm": OFF},
    ),
    "moe-experts-pipeline-degree": ({"moe-experts-pipeline-degree": 2}, {"moe-experts-pipeline-degree": OFF}),
    "moe-tp-extend-ep-needs": (
        {**MOE, "moe-tp-extend-ep": True},
        {"moe-tp-extend-ep": OFF},
    ),
    "moe-hierarchical-alltoallv": ({"moe-hierarchical-alltoallv": True}, {"moe-hierarchical-alltoallv": OFF}),
    "moe-zero-memory-num-layers": (
        {"moe-zero-memory-num-layers": 1},
        {"moe-zero-memory": "level0"},
    ),
    "moe-zero-memory-allgather-overlap": (
        {"moe-zero-memory": "level0", "moe-allgather-overlap-comm": True},
        {"moe-allgather-overlap-comm": OFF},
    ),
    "moe-dynamic-padding": ({"moe-dynamic-padding": True}, {"moe-dynamic-padding": OFF}),
    "moe-permutation-async-comm": (
        {"moe-permutation-async-comm": True, "moe-model-type": "deepspeed_moe"},
        {"moe-model-type": "megatron_moe"},
    ),
    "moe-bmm-mc2": ({"moe-bmm-mc2": True}, {"moe-bmm-mc2": OFF}),
    "cp-alibi": (
        {"context-parallel-size": 2, "position-embedding-type": "alibi"},
        {"position-embedding-type": "rope"},
    ),
    "cp-ulysses": ({"context-parallel-size": 3}, {"context-parallel-size": 2}),
    "cp-megatron": (
        {"context-parallel-size": 2, "context-parallel-algo": "megatron_cp_algo", "seq-length": 1026},
        {"seq-length": 1024},
    ),
    "cp-hybrid": (
        {"context-parallel-size": 2, "context-parallel-algo": "hybrid_cp_algo"},
        {"context-parallel-algo": "ulysses_cp_algo"},
    ),
    "cp-adaptive": (
        {"context-parallel-size": 2, "context-parallel-algo": "adaptive_cp_algo", "seq-length": 1025},
        {"seq-length": 1024},
    ),
    "cp-hybrid-adaptive": (
        {"context-parallel-size": 2, "context-parallel-algo": "hybrid_adaptive_cp_algo"},
        {"context-parallel-algo": "adaptive_cp_algo"},
    ),
    "fp8": ({"fp8-format": "e4m3"}, {"fp8-format": OFF}),
    "recompute-uniform": (
        {
            "recompute-granularity": "full",
            "recompute-method": "uniform",
            "recompute-num-layers": 1,
            "recompute-norm": True,
        },
        {"recompute-method": "block"},
    ),
    "recompute-selective": (
        {"recompute-granularity": "selective", "recompute-activation-function": True},
        {"recompute-activation-function": OFF},
    ),
    "recompute-norm-legacy": (
        {"recompute-norm": True, "use-legacy-models": True},
        {"use-legacy-models": OFF},
    ),
    "mcore-only-legacy-features": ({"use-nanopipe": True}, {"use-nanopipe": OFF}),
    "adaptive-recompute": (
        {"adaptive-recompute-device-size": 1024, "recompute-granularity": "selective"},
        {"recompute-granularity": OFF},
    ),
    "memory-fragmentation": (
        {"memory-fragmentation": True, "use-fused-rotary-pos-emb": True, "position-embedding-type": "rope"},
        {"use-fused-rotary-pos-emb": OFF},
    ),
    "smart-swap": ({"smart-swap": True, "memory-fragmentation": True}, {"memory-fragmentation": OFF}),
    "adaptive-memory-optimization": (
        {"adaptive-memory-optimization": True, "recompute-granularity": "selective"},
        {"recompute-granularity": OFF},
    ),
    "sparse-mode": ({"use-flash-attn": True, "sparse-mode": 1}, {"sparse-mode": 0}),
    "mc2-coc": ({"use-ascend-mc2": True, "use-ascend-coc": True}, {"use-ascend-coc": OFF}),
    "nd-matmul": ({"use-nd-matmul": True, "use-fused-rmsnorm": False}, {"use-nd-matmul": OFF}),
    "recompute-in-advance": ({"recompute-in-advance": True}, {"recompute-in-advance": OFF}),
    "recompute-in-bubble": ({"recompute-in-bubble": True}, {"recompute-in-bubble": OFF}),
    "noop-layers": ({"noop-layers": "1,x"}, {"noop-layers": "1,27"}),
    "ampipe": ({"ampipe-degree": 2}, {"ampipe-degree": 1}),
    "tp-2d": ({"tp-2d": True}, {"tp-2d": OFF}),
    "expert-interval": ({"expert-interval": 0}, {"expert-interval": 1}),
    "gemm-gradient-accumulation-fusion": (
        {"gemm-gradient-accumulation-fusion": True},
        {"gemm-gradient-accumulation-fusion": OFF},
    ),
    "reset-attention-mask": ({"reset-attention-mask": True}, {"reset-attention-mask": OFF}),
    "cp-kv-cache-policy": (
        {"context-parallel-kv-cache-policy": "full"},
        {"context-parallel-size": 2},
    ),
    "cp-cache-interval": ({"context-parallel-cache-interval": 1}, {"context-parallel-cache-interval": 0}),
    "ulysses-allgather-kv": (
        {"use-ulysses-allgather-kv": True},
        {"use-ulysses-allgather-kv": OFF},
    ),
    "swap-attention-lora": (
        {"swap-attention": True, "lora-target-modules": ["linear_qkv"]},
        {"lora-target-modules": OFF},
    ),
    "split-rank": ({"pipeline-model-parallel-split-rank": 4}, {"pipeline-model-parallel-split-rank": 2}),
    "tp-comm-overlap": ({"tp-comm-overlap": True}, {"tp-comm-overlap": OFF}),
    "checkpoint-activations": ({"checkpoint-activations": True}, {"checkpoint-activations": OFF}),
    "micro-batch-size": ({"micro-batch-size": 0}, {"micro-batch-size": 1}),
    "global-batch-size": ({"global-batch-size": -2}, {"global-batch-size": 192}),
    "overlap-param-gather": ({"overlap-param-gather": True}, {"overlap-grad-reduce": True}),
    "fp16-bf16": ({"fp16": True}, {"fp16": OFF}),
    "num-dataset-builder-threads": (
        {"num-dataset-builder-threads": 0},
        {"num-dataset-builder-threads": 1},
    ),
    "lr-warmup-samples": ({"lr-warmup-samples": 8}, {"lr-warmup-samples": 0}),
    "lr-warmup-iters": ({"lr-warmup-iters": 5}, {"lr-warmup-fraction": OFF}),
    "sample-based": (
        {"train-iters": OFF, "train-samples": 1920, "lr-decay-iters": 10},
        {"lr-decay-iters": OFF, "lr-decay-samples": 1920},
    ),
    "rampup-batch-size": (
        {"train-iters": OFF, "train-samples": 19200, "rampup-batch-size": [16, 16]},
        {"rampup-batch-size": [32, 32, 1920]},
    ),
    "legacy-overlap-reuse-fp32": (
        {
            "use-legacy-models": True,
            "overlap-param-gather": True,
            "overlap-grad-reduce": True,
            "reuse-fp32-param": True,
        },
        {"reuse-fp32-param": OFF},
    ),
    "yaml-cfg-legacy": ({"yaml-cfg": "/x.yaml", "use-legacy-models": True}, {"yaml-cfg": OFF}),
    "retro-project-dir": ({"retro-project-dir": "/retro"}, {"retro-project-dir": OFF}),
    "save-interval-zero": ({"save-interval": 0}, {"save-interval": 100}),
    "log-interval-zero": ({"log-interval": 0}, {"log-interval": 1}),
    "eval-interval-zero": ({"eval-interval": 0}, {"eval-interval": 100}),
    "encoder-num-layers": ({"encoder-num-layers": 28}, {"encoder-num-layers": OFF}),
    "seq-length-required": ({"seq-length": OFF}, {"seq-length": 2048}),
    "save-interval-required": ({"save-interval": OFF}, {"save-interval": 100}),
    "encoder-seq-length": ({"encoder-seq-length": 1024}, {"encoder-seq-length": OFF}),
    "seq-length-max-position": ({"seq-length": 131072}, {"seq-length": 4096}),
    "decoder-seq-length": ({"decoder-seq-length": 131072}, {"decoder-seq-length": 1024}),
    "fp16-lm-cross-entropy": ({"fp16-lm-cross-entropy": True}, {"fp16-lm-cross-entropy": OFF}),
    "fp32-residual-connection": (
        {"fp32-residual-connection": True, "bf16": False},
        {"bf16": True},
    ),
    "moe-grouped-gemm-bf16": (
        {"moe-grouped-gemm": True, "bf16": False},
        {"moe-grouped-gemm": OFF, "bf16": True},
    ),
    "recompute-method-selective": (
        {"recompute-granularity": "selective", "recompute-method": "uniform"},
        {"recompute-method": OFF},
    ),
    "cuda-device-max-connections": (
        {ENV + "CUDA_DEVICE_MAX_CONNECTIONS": "8"},
        {ENV + "CUDA_DEVICE_MAX_CONNECTIONS": "1"},
    ),
    "retro-add-retriever": ({"retro-add-retriever": True}, {"retro-add-retriever": OFF}),
    "decoupled-lr": ({"decoupled-lr": 1e-5, "use-dist-ckpt": True}, {"use-dist-ckpt": OFF}),
    "rotary-interleaved": ({"rotary-interleaved": True}, {"no-rope-fusion": True}),
    "no-position-embedding": ({"no-position-embedding": True}, {"no-position-embedding": OFF}),
    "moe-spec": ({**MOE, "spec": ["a", "b"]}, {"spec": OFF}),
    "ep-experts-divisible": (
        {"num-experts": 6, "expert-model-parallel-size": 4},
        {"num-experts": 8},
    ),
    "dist-ckpt-legacy": ({"use-dist-ckpt": True, "use-legacy-models": True}, {"use-legacy-models": OFF}),
    "data-sources": ({"mock-data": True, "data-path": ["/d/a"]}, {"data-path": OFF}),
    "use-tp-pp-dp-mapping": (
        {**MOE, "use-tp-pp-dp-mapping": True, "expert-model-parallel-size": 2},
        {"use-tp-pp-dp-mapping": OFF},
    ),
    "deterministic-mode": ({"deterministic-mode": True}, {ENV + "NCCL_ALGO": "Ring"}),
}


def example(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    bad, fix = EXAMPLES[name]
    return bad, {**bad, **fix}


def flags_with(change: dict[str, Any]) -> dict[str, Any]:
    flags = base_flags()
    for k, v in change.items():
        if v is OFF:
            flags.pop(k, None)
        else:
            flags[k] = v
    return flags


def names(flags: dict[str, Any]) -> set[str]:
    return {r.name for r in broken_rules(flags, training_defaults("2.1.0"))}


def test_the_base_flags_break_no_rule() -> None:
    assert names(base_flags()) == set()


def test_every_rule_has_an_example() -> None:
    assert {r.name for r in RULES} == set(EXAMPLES)
    assert len({r.name for r in RULES}) == len(RULES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_rule_refuses_its_example_and_passes_the_fix(name: str) -> None:
    bad, good = example(name)
    assert name in names(flags_with(bad))
    assert names(flags_with(good)) == set(), names(flags_with(good))


def test_a_problem_names_the_flag_the_user_set_and_cites_the_source() -> None:
    flags = flags_with({"normalization": "LayerNorm"})
    found = problems(flags, {"normalization": "LayerNorm"}, training_defaults("2.1.0"))
    assert [p.key for p in found] == ["backend_config.training.normalization"]
    assert "use-fused-rmsnorm" in found[0].message and "mindspeed/arguments.py:670" in found[0].message
    env = problems(
        flags_with({ENV + "CUDA_DEVICE_MAX_CONNECTIONS": "2"}),
        {ENV + "CUDA_DEVICE_MAX_CONNECTIONS": "2"},
        training_defaults("2.1.0"),
    )
    assert [p.key for p in env] == ["env.CUDA_DEVICE_MAX_CONNECTIONS"]


def test_noop_layers_out_of_range_are_refused() -> None:
    assert "noop-layers" in names(flags_with({"noop-layers": "28"}))


def test_a_value_of_the_wrong_kind_is_left_to_argparse() -> None:
    assert "expert-interval" not in names(flags_with({"expert-interval": "many"}))


def test_a_broken_rule_stops_the_plan_naming_its_key(tmp_path: Path) -> None:
    from tests.unit.backends.mindspeed_mm.test_mindspeed_mm_checks import problems_of

    found = problems_of(tmp_path, {"backend_config": {"training": {"swiglu": False}}})
    assert any(k == "backend_config.training.swiglu" and "use-fused-swiglu" in text for k, text in found), (
        found
    )
