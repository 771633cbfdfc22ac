"""MindSpeed-LLM / Megatron-LM rules across training flags (backends/mindspeed_llm/rules.py): each rule
refuses its own example and passes the same flags with the fix applied; a broken rule stops the plan naming
its key. Each rule was a case the differential harness found (we accepted, MindSpeed-LLM refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ascendfactory.backends.mindspeed_llm.rules import RULES, broken_rules
from ascendfactory.backends.mindspeed_llm.versions import RELEASES, VERSIONS
from ascendfactory.errors import ConfigError
from tests.unit.backends.mindspeed_llm.examples_26 import (
    llm_features,
    megatron_args,
    megatron_config,
    mindspeed_moe_tp,
    mindspeed_pp_cp,
)
from tests.unit.backends.mindspeed_llm.rule_example_bases import (
    ALLTOALL_OVERLAP_21,
    ALLTOALL_OVERLAP_26,
    BASE,
    CAPACITY,
    CP2_RING,
    MLA,
    MOE,
    MOE_26,
    OFF,
    PP2_FUSION,
    RECOMPUTE_FULL,
    SAMPLES,
    TP2_SP,
    TP2D,
    flags_with,
)

# rule key -> (flags that break it, the same with the fix)
EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "batch-size": ({"batch-size": 4}, {}),
    "warmup": ({"warmup": 0.01}, {"lr-warmup-fraction": 0.01}),
    "model-parallel-size": ({"model-parallel-size": 2}, {"tensor-model-parallel-size": 2}),
    "train-samples": ({"train-samples": 0}, {"train-samples": 8, "train-iters": OFF}),  # 0 is not None
    "lr-decay-samples": ({"lr-decay-samples": 8}, {"lr-decay-iters": 8}),
    "lr-warmup-samples": ({"lr-warmup-samples": 8}, {"lr-warmup-samples": 0}),
    "rampup-batch-size": ({"rampup-batch-size": [1, 1, 8]}, {}),
    "lr-warmup-iters": ({"lr-warmup-fraction": 0.01, "lr-warmup-iters": 5}, {"lr-warmup-iters": 5}),
    "encoder-num-layers": ({"encoder-num-layers": 2}, {}),
    "encoder-seq-length": ({"encoder-seq-length": 512}, {}),
    "min-lr": ({"min-lr": 0.1}, {"min-lr": 1e-7}),
    "weight-decay-incr-style": (
        {"weight-decay-incr-style": "cosine"},
        {"weight-decay-incr-style": "cosine", "start-weight-decay": 0.0, "end-weight-decay": 0.1},
    ),
    "start-weight-decay": ({"start-weight-decay": 0.1}, {"weight-decay": 0.1}),
    "end-weight-decay": ({"end-weight-decay": 0.1}, {"weight-decay": 0.1}),
    "expert-model-parallel-size": (
        {"expert-model-parallel-size": 2},
        {"expert-model-parallel-size": 2, **MOE},
    ),
    "train-data-path": ({"train-data-path": ["/d/train"]}, {}),
    "valid-data-path": ({"valid-data-path": ["/d/valid"]}, {}),
    "test-data-path": ({"test-data-path": ["/d/test"]}, {"test-data-path": []}),  # [] is no data source
    "num-layers-per-virtual-pipeline-stage": (
        {"num-layers-per-virtual-pipeline-stage": 1},
        {"num-layers-per-virtual-pipeline-stage": 1, "pipeline-model-parallel-size": 2, "num-layers": 4},
    ),
    "defer-embedding-wgrad-compute": (
        {"defer-embedding-wgrad-compute": True, "pipeline-model-parallel-size": 2},
        {
            "defer-embedding-wgrad-compute": True,
            "pipeline-model-parallel-size": 2,
            "no-gradient-accumulation-fusion": OFF,
        },
    ),
    "output-layer-slice-num": (
        {"output-layer-slice-num": 0},
        {"output-layer-slice-num": 2, "padded-vocab-size": 960},
    ),
    "neat-pack": ({"neat-pack": True}, {"neat-pack": True, "reset-position-ids": True}),
    "moe-alltoall-overlap-comm": (
        {"moe-alltoall-overlap-comm": True},
        {
            "moe-alltoall-overlap-comm": True,
            "moe-permutation-async-comm": True,
            "moe-grouped-gemm": True,
            **MOE,
        },
    ),
    "moe-allgather-overlap-comm": (
        {"moe-allgather-overlap-comm": True},
        {
            "moe-allgather-overlap-comm": True,
            "moe-permutation-async-comm": True,
            "moe-grouped-gemm": True,
            **MOE,
            "moe-token-dispatcher-type": "allgather",
            "expert-model-parallel-size": 2,
        },
    ),
    "moe-zero-memory-num-layers": (
        {"moe-zero-memory-num-layers": 1},
        {"moe-zero-memory-num-layers": 1, "moe-zero-memory": "level0"},
    ),
    "first-k-dense-replace": (
        {"first-k-dense-replace": 1},
        {"first-k-dense-replace": 1, "moe-layer-freq": 1, **MOE},
    ),
    "moe-layer-freq": ({"moe-layer-freq": 1}, {"moe-layer-freq": 1, "first-k-dense-replace": 1, **MOE}),
    "schedules-method": (
        {"schedules-method": "dualpipev"},
        {
            "schedules-method": "dualpipev",
            "moe-fb-overlap": True,
            **MOE,
            "overlap-grad-reduce": OFF,
            "n-shared-experts": 1,
            "moe-permutation-async-comm": True,
            "pipeline-model-parallel-size": 2,
            "num-layers": 4,
            "global-batch-size": 16,
        },
    ),
    "swiglu": ({"swiglu": False}, {"swiglu": False, "use-fused-swiglu": OFF}),
    "tp-2d": ({"tp-2d": True}, {"tp-2d": True, "use-fused-rmsnorm": OFF}),
    "use-fused-ring-attention-update": (
        {"use-fused-ring-attention-update": True},
        {"use-fused-ring-attention-update": True, "context-parallel-size": 2},
    ),
    "moe-router-load-balancing-type": (
        {"moe-router-load-balancing-type": "group_limited_greedy"},
        {
            "moe-router-load-balancing-type": "group_limited_greedy",
            "topk-group": 1,
            "routed-scaling-factor": 1.0,
            "expert-model-parallel-size": 2,
            **MOE,
        },
    ),
    "dist-ckpt-strictness": ({"dist-ckpt-strictness": "1"}, {"dist-ckpt-strictness": "log_all"}),
    "micro-batch-size": ({"micro-batch-size": OFF}, {}),
    "save-interval": ({"save-interval": OFF}, {}),
    "hidden-size": ({"hidden-size": 66}, {"hidden-size": 66, "kv-channels": 16}),
    "tp-comm-overlap": ({"tp-comm-overlap": True}, {"tp-comm-overlap": True, "sequence-parallel": True}),
    "overlap-param-gather": (
        {"overlap-param-gather": True, "use-distributed-optimizer": True, "overlap-grad-reduce": OFF},
        {"overlap-param-gather": True, "use-distributed-optimizer": True},
    ),
    "reuse-fp32-param": (
        {"reuse-fp32-param": True, "bf16": True, "swap-optimizer": True},
        {"reuse-fp32-param": True, "bf16": True},
    ),
    # bf16 removed: the shipped templates set it (the judged examples start from them)
    "o2-gradient": ({"o2-gradient": True, "bf16": OFF}, {"o2-gradient": True, "bf16": True}),
    "recompute-method": (
        {"recompute-granularity": "selective", "recompute-method": "uniform"},
        {"recompute-granularity": "full", "recompute-method": "uniform"},
    ),
    "recompute-norm": (
        {"recompute-norm": True, "recompute-method": "uniform"},
        {"recompute-norm": True, "recompute-method": "block"},
    ),
    "recompute-activation-function": (
        {"recompute-activation-function": True, "recompute-granularity": "selective"},
        {"recompute-activation-function": True},
    ),
    # the fix is the rule's (remove squared-relu): a user's swiglu removed from `training` is put back by the
    # plan (model_flags.py: the model's gated MLP), so the flags would still hold both
    "squared-relu": ({"squared-relu": True}, {}),
    "mtp-num-layers": ({"mtp-num-layers": 1, "context-parallel-size": 2}, {"mtp-num-layers": 1}),
    "use-legacy-models": ({"use-legacy-models": True, "use-dist-ckpt": True}, {"use-legacy-models": True}),
    "decoupled-lr": ({"decoupled-lr": 1e-5, "use-dist-ckpt": True}, {"decoupled-lr": 1e-5}),
    "o2-optimizer": ({"o2-optimizer": True, "bf16": OFF}, {"o2-optimizer": True, "bf16": True}),
    "fp32-residual-connection": (
        {"fp32-residual-connection": True, "bf16": OFF},
        {"fp32-residual-connection": True, "bf16": True},
    ),
    "yaml-cfg": ({"yaml-cfg": "/nonexistent/megatron.yaml"}, {}),
    "retro-project-dir": ({"retro-project-dir": "/nonexistent/retro"}, {}),
    "retro-add-retriever": ({"retro-add-retriever": True}, {}),
    "normalization": (
        {"normalization": "LayerNorm"},
        {"normalization": "LayerNorm", "use-fused-rmsnorm": OFF},
    ),
    "position-embedding-type": (
        {"position-embedding-type": "none"},
        {"position-embedding-type": "none", "use-fused-rotary-pos-emb": OFF},
    ),
    "use-glm-rope": ({"use-glm-rope": True}, {"use-glm-rope": True, "use-fused-rotary-pos-emb": OFF}),
    "use-fused-mlp": ({"use-fused-mlp": True}, {"use-fused-mlp": True, "lora-fusion": True}),
    "multi-head-latent-attention": (
        {"multi-head-latent-attention": True},
        {
            "multi-head-latent-attention": True,
            "kv-lora-rank": 8,
            "v-head-dim": 16,
            "qk-rope-head-dim": 8,
            "qk-nope-head-dim": 8,
        },
    ),
    "mla-fa-divide-qk": ({"mla-fa-divide-qk": True}, {"mla-fa-divide-qk": True, "reset-position-ids": True}),
    "rope-scaling-type": (
        {"rope-scaling-type": "yarn"},
        {
            "rope-scaling-type": "yarn",
            "max-position-embeddings": 4096,
            "rope-scaling-original-max-position-embeddings": 2048,
            "rope-scaling-factor": 2.0,
        },
    ),
    "num-experts": (
        {**MOE, "moe-token-dispatcher-type": "allgather"},
        {**MOE, "moe-token-dispatcher-type": "allgather", "num-experts": 0},
    ),
    "recompute-granularity": (
        {"recompute-granularity": "full", "recompute-method": "uniform"},
        {"recompute-granularity": "full", "recompute-method": "uniform", "recompute-num-layers": 1},
    ),
    "num-dataset-builder-threads": ({"num-dataset-builder-threads": 0}, {"num-dataset-builder-threads": 2}),
    "moe-expert-capacity-factor": (
        {"moe-expert-capacity-factor": 1.0},
        {"moe-expert-capacity-factor": 1.0, **MOE},
    ),
    "num-layers": ({"num-layers": -1}, {"num-layers": 4}),
    "moe-fb-overlap": (
        {"moe-fb-overlap": True, **MOE},
        {
            "moe-fb-overlap": True,
            **MOE,
            "overlap-grad-reduce": OFF,
            "n-shared-experts": 1,
            "moe-permutation-async-comm": True,
        },
    ),
    "rotary-interleaved": (
        {"rotary-interleaved": True},
        {"rotary-interleaved": True, "no-rope-fusion": True},
    ),
    "deterministic-mode": (
        {"deterministic-mode": True, "use-flash-attn": True},
        {"deterministic-mode": True},
    ),
    "num-attention-heads": ({"num-attention-heads": 0}, {"num-attention-heads": 2}),
    "init-method-xavier-uniform": ({"init-method-xavier-uniform": True}, {}),
    "enable-recompute-layers-per-pp-rank": (
        {"enable-recompute-layers-per-pp-rank": True},
        {
            "enable-recompute-layers-per-pp-rank": True,
            "pipeline-model-parallel-size": 2,
            "num-layers-per-virtual-pipeline-stage": 1,
            "recompute-granularity": "full",
            "recompute-method": "block",
        },
    ),
    "fp16-lm-cross-entropy": ({"fp16-lm-cross-entropy": True}, {"fp16-lm-cross-entropy": True, "fp16": True}),
    "fp16": ({"fp16": True, "bf16": True}, {"fp16": True}),
    "timing-log-level": ({"timing-log-level": 8}, {"timing-log-level": 2}),
    "enable-share-memory": (
        {"enable-share-memory": True},
        {"enable-share-memory": True, "reset-position-ids": True},
    ),
    "moe-pad-expert-input-to-capacity": (
        {"moe-pad-expert-input-to-capacity": True},
        {"moe-pad-expert-input-to-capacity": True, "moe-expert-capacity-factor": 1.0},
    ),
    "recompute-in-advance": (
        {"recompute-in-advance": True},
        {
            "recompute-in-advance": True,
            "recompute-num-layers": 1,
            "pipeline-model-parallel-size": 2,
            "num-layers-per-virtual-pipeline-stage": 1,
        },
    ),
    "moe-zero-memory": (
        {"moe-zero-memory": "level1"},
        {"moe-zero-memory": "level1", "moe-alltoall-overlap-comm": True},
    ),
    "checkpoint-activations": ({"checkpoint-activations": True}, {"recompute-activations": True}),
    "history-turns": ({"history-turns": -1}, {"history-turns": 0}),
    "hf-chat-template": ({"hf-chat-template": True, "prompt-type": "qwen"}, {"hf-chat-template": True}),
    "decoder-seq-length": ({"decoder-seq-length": 1024}, {"decoder-seq-length": 512}),
    "distribute-saved-activations": (
        {"distribute-saved-activations": True},
        {
            "distribute-saved-activations": True,
            "tensor-model-parallel-size": 2,
            "recompute-granularity": "full",
            "recompute-method": "uniform",
            "recompute-num-layers": 1,
        },
    ),
    # found by the 2.1.0 coverage map (tests/diffval/maps/mindspeed-llm-2.1.0.yaml)
    "num-query-groups": (
        {"tensor-model-parallel-size": 2, "group-query-attention": True, "num-query-groups": 1},
        {"tensor-model-parallel-size": 2, "group-query-attention": True, "num-query-groups": 2},
    ),
    "pipeline-model-parallel-split-rank": (
        {"pipeline-model-parallel-size": 2, "pipeline-model-parallel-split-rank": 2},
        {"pipeline-model-parallel-size": 2, "pipeline-model-parallel-split-rank": 1},
    ),
    "use-tp-pp-dp-mapping": (
        {"use-tp-pp-dp-mapping": True, "context-parallel-size": 2},
        {"use-tp-pp-dp-mapping": True},
    ),
    "moe-extended-tp": (
        {"moe-extended-tp": True, "moe-token-dispatcher-type": "alltoall"},
        {"moe-extended-tp": True, "moe-token-dispatcher-type": "allgather"},
    ),
    "moe-router-enable-expert-bias": (
        {"moe-router-enable-expert-bias": True},
        {"moe-router-enable-expert-bias": True, "moe-router-score-function": "sigmoid"},
    ),
    "ulysses-degree-in-cp": (
        {"context-parallel-size": 2, "context-parallel-algo": "hybrid_cp_algo"},
        {"context-parallel-size": 2, "context-parallel-algo": "megatron_cp_algo"},
    ),
    "cp-window-size": (
        {"context-parallel-size": 2, "context-parallel-algo": "megatron_cp_algo", "cp-window-size": 2},
        {"context-parallel-size": 2, "context-parallel-algo": "megatron_cp_algo", "cp-window-size": 1},
    ),
    "cp-attention-mask-type": (
        {**CP2_RING, "cp-attention-mask-type": "general", "micro-batch-size": 2},
        {**CP2_RING, "cp-attention-mask-type": "general", "micro-batch-size": 1},
    ),
    "sliding-window": ({"context-parallel-size": 2, "sliding-window": 4}, {"sliding-window": 4}),
    "reset-attention-mask": (
        {"context-parallel-size": 2, "reset-attention-mask": True},
        {**CP2_RING, "reset-attention-mask": True},
    ),
    "pad-to-multiple-of": (
        {"context-parallel-size": 2, "pad-to-multiple-of": 3},
        {"context-parallel-size": 2, "pad-to-multiple-of": 4},
    ),
    "noop-layers": ({"noop-layers": "2"}, {"noop-layers": "1"}),
    "wgrad-deferral-limit": (
        {"defer-embedding-wgrad-compute": True, "wgrad-deferral-limit": -1, **PP2_FUSION},
        {"defer-embedding-wgrad-compute": True, "wgrad-deferral-limit": 0, **PP2_FUSION},
    ),
    "lr-decay-iters": ({**SAMPLES, "lr-decay-iters": 4}, {**SAMPLES, "lr-decay-samples": 4}),
    "num-layer-list": (
        {
            "pipeline-model-parallel-size": 2,
            "num-layer-list": "1,1",
            "num-layers-per-virtual-pipeline-stage": 1,
        },
        {"pipeline-model-parallel-size": 2, "num-layer-list": "1,1"},
    ),
    "no-position-embedding": (
        {"no-position-embedding": True, "position-embedding-type": "learned_absolute"},
        {"position-embedding-type": "learned_absolute"},
    ),
    "shared-expert-gate-output-dimension": (
        {**MOE, "moe-expert-capacity-factor": 1.0, "shared-expert-gate-output-dimension": 3},
        {**MOE, "moe-expert-capacity-factor": 1.0, "shared-expert-gate-output-dimension": 64},
    ),
    "use-fused-moe-token-permute-and-unpermute": (
        {**CAPACITY, "use-fused-moe-token-permute-and-unpermute": True},
        CAPACITY,
    ),
    "use-mcore-models": (  # a user's false unsets the plan's flag (OFF would give it back)
        {"use-mcore-models": False, "context-parallel-size": 2},
        {"use-mcore-models": False},
    ),
    "tokenizer-padding-side": (
        {"tokenizer-padding-side": "left", "position-embedding-type": "alibi"},
        {"tokenizer-padding-side": "right", "position-embedding-type": "alibi"},
    ),
    "shared-expert-gate": (
        {**MOE, "shared-expert-gate": True, "no-gradient-accumulation-fusion": OFF},
        {**MOE, "shared-expert-gate": True},
    ),
    "mla-up-proj-tp-overlap": (
        {**MLA, "mla-up-proj-tp-overlap": True},
        {**MLA, "mla-up-proj-tp-overlap": True, "mla-mm-split": True, **TP2_SP},
    ),
    "recompute-mla-up-proj": (
        {**MLA, "recompute-mla-up-proj": True},
        {**MLA, "recompute-mla-up-proj": True, "mla-up-proj-tp-overlap": True},
    ),
    "mla-swap-core-attn-out": (
        {**MLA, "mla-swap-core-attn-out": True},
        {**MLA, "mla-swap-core-attn-out": True, "schedules-method": "dualpipev", "moe-fb-overlap": True},
    ),
    "swap-attention": (
        {
            "swap-attention": True,
            "lora-target-modules": ["linear_qkv"],
            "lora-r": 8,
            "use-fused-rmsnorm": OFF,
        },
        {"swap-attention": True, "lora-target-modules": ["linear_qkv"], "lora-r": 8},
    ),
}


# MindSpeed-LLM 26.1.0's examples where its rule differs from 2.1.0's (or is new): key -> (bad, good)
EXAMPLES_26: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # found by the 26.1.0 judge on the MoE bases (rules.py: "Found by the 26.1.0 judge on the MoE bases")
    "moe-shared-expert-intermediate-size": (
        {"moe-shared-expert-intermediate-size": 0},
        {"moe-shared-expert-intermediate-size": 128},
    ),
    "n-shared-experts": ({"n-shared-experts": -1}, {"n-shared-experts": 1}),
    "moe-ffn-hidden-size": ({"n-shared-experts": 1, "moe-ffn-hidden-size": 0}, {"n-shared-experts": 1}),
    "drop-thinking": ({"drop-thinking": 1}, {"drop-thinking": "false"}),
    "heterogeneous-layers-config-encoded-json": ({"heterogeneous-layers-config-encoded-json": "1"}, {}),
    # (the fixes remove the flag: with it, core_v0.12.1's import of fused_permute needs MindSpeed's NPU patch)
    "moe-permute-fusion": ({"moe-permute-fusion": True}, {}),
    "use-fused-moe-token-permute-and-unpermute": (
        {"use-fused-moe-token-permute-and-unpermute": True, **MOE, "moe-expert-capacity-factor": 1.0},
        {**MOE, "moe-expert-capacity-factor": 1.0},
    ),
    "expert-tensor-parallel-size": (
        {"expert-tensor-parallel-size": 2, "moe-token-dispatcher-type": "alltoall_seq"},
        {"moe-token-dispatcher-type": "alltoall_seq"},
    ),
    "pipeline-model-parallel-split-rank": ({"pipeline-model-parallel-split-rank": 1}, {}),
    "context-parallel-cache-interval": ({"context-parallel-cache-interval": 1}, {}),
    "overlap-p2p-communication-warmup-flush": ({"overlap-p2p-communication-warmup-flush": True}, {}),
    "recompute-norm-num-layers": ({"recompute-norm-num-layers": 3}, {"recompute-norm-num-layers": 1}),
    "recompute-activation-function-num-layers": (
        {"recompute-activation-function-num-layers": -1},
        {"recompute-activation-function-num-layers": 1},
    ),
    "fp8-reuse-quantized-weight": ({"fp8-reuse-quantized-weight": True}, {}),
    "fp8-format": ({"fp8-format": "e4m3", "transformer-impl": "local"}, {"transformer-impl": "local"}),
    "ckpt-convert-format": ({"ckpt-convert-format": "torch"}, {}),
    "first-k-dense-replace": ({"first-k-dense-replace": 2}, {"first-k-dense-replace": 1}),  # dense too
    # found by the 26.1.0 coverage map's proposer (rules.py: "Found by the 26.1.0 coverage map's proposer")
    "use-legacy-models": ({"use-legacy-models": True, "decoupled-lr": 1e-5}, {"decoupled-lr": 1e-5}),
    "enable-hf2mg-convert": ({"enable-hf2mg-convert": True}, {}),  # the random harness, seed 7
    "num-attention-heads": (
        {"num-attention-heads": 3, "tensor-model-parallel-size": 2},
        {"tensor-model-parallel-size": 2},
    ),
    "moe-shared-expert-overlap": (
        {"moe-shared-expert-overlap": True, "n-shared-experts": 1},
        {"moe-shared-expert-overlap": True, "n-shared-experts": 1, "moe-token-dispatcher-type": "alltoall"},
    ),
    "recompute-modules": (
        {"recompute-granularity": "selective", "recompute-modules": ["1"]},
        {"recompute-granularity": "selective", "recompute-modules": ["core_attn"]},
    ),
    "enable-cuda-graph": ({"enable-cuda-graph": True, "recompute-granularity": "selective"}, {}),
    "non-persistent-ckpt-type": (
        {"non-persistent-ckpt-type": "in_memory"},
        {"non-persistent-ckpt-type": "global"},
    ),
    "hierarchical-context-parallel-sizes": ({"hierarchical-context-parallel-sizes": [1, 2]}, {}),
    "use-torch-fsdp2": ({"use-torch-fsdp2": True}, {}),
    "fp8-param-gather": ({"fp8-param-gather": True, "use-distributed-optimizer": True}, {}),
    "use-custom-fsdp": ({"use-custom-fsdp": True}, {}),
    "accumulate-allreduce-grads-in-fp32": (
        {"accumulate-allreduce-grads-in-fp32": True, "bf16": True, "main-grads-dtype": "bf16"},
        {"accumulate-allreduce-grads-in-fp32": True, "bf16": True},
    ),
    "position-embedding-type": (
        {"position-embedding-type": "relative", "transformer-impl": "local"},
        {"position-embedding-type": "rope", "transformer-impl": "local"},
    ),
    "replication": ({"replication": True}, {}),
    "use-ulysses-allgather-kv": ({"use-ulysses-allgather-kv": True}, {}),
    "reuse-fp32-param": (
        {"reuse-fp32-param": True, "bf16": True, "optimizer-selection": "fused_ema_adamw"},
        {},
    ),
    "gemm-gradient-accumulation-fusion": ({"gemm-gradient-accumulation-fusion": True}, {}),
    "moe-alltoall-mc2": ({"moe-alltoall-mc2": True}, {}),
    # (" 1" is a layer to 2.1.0, which reads int(x); 26.1.0 wants x.isdigit())
    "noop-layers": ({"noop-layers": "0, 1"}, {"noop-layers": "1"}),
    "recompute-in-bubble": ({"recompute-in-bubble": True}, {}),
    "profile-step-start": ({"profile-step-start": 0}, {"profile-step-start": 1}),
    "use-ascend-coc": (
        {"use-ascend-coc": True, "lora-target-modules": ["linear_qkv"]},
        {"lora-target-modules": ["linear_qkv"]},
    ),
    "enable-mhc": ({"enable-mhc": True}, {}),
    "enable-dsa-indexer": ({"enable-dsa-indexer": True}, {}),
    "padded-base-length": (
        {"multi-latent-attention": True, "padded-base-length": 0},
        {"multi-latent-attention": True},
    ),
    "swap-attention": (
        {"swap-attention": True, "lora-target-modules": ["linear_qkv"], "lora-r": 8},
        {"swap-attention": True},
    ),
    "moe-unperm2-mem-optim-swap": ({"moe-unperm2-mem-optim-swap": True}, {}),
    "fsdp2-config-path": ({"fsdp2-config-path": "/x/fsdp2.yaml"}, {}),
    "context-parallel-kv-cache-policy": ({"context-parallel-kv-cache-policy": "half"}, {}),
    "moe-enable-deepep": ({"moe-enable-deepep": True, **MOE}, {**MOE}),
    "virtual-optimizer": ({"virtual-optimizer": ["abc"]}, {"virtual-optimizer": ["all"]}),
    "wandb-exp-name": ({"wandb-exp-name": "run"}, {}),
    "overlap-param-gather-with-optimizer-step": ({"overlap-param-gather-with-optimizer-step": True}, {}),
    "optimizer-cpu-offload": ({"optimizer-cpu-offload": True}, {}),
    "num-virtual-stages-per-pipeline-rank": ({"num-virtual-stages-per-pipeline-rank": 1}, {}),
    "enable-thinking": ({"enable-thinking": 1}, {"enable-thinking": "true"}),
    "ema-decay": ({"ema-decay": 1e30}, {"ema-decay": 0.5}),
    "mock-data": ({"mock-data": True}, {}),
    "enable-hbmfault-repair": (
        {"enable-hbmfault-repair": True},
        {"enable-hbmfault-repair": True, "enable-high-availability": True},
    ),
    "sparse-mode": ({"use-flash-attn": True, "sparse-mode": 1}, {"use-flash-attn": True, "sparse-mode": 2}),
    "defer-embedding-wgrad-compute": ({"defer-embedding-wgrad-compute": True}, {}),
    "neat-pack": ({"neat-pack": True}, {"neat-pack": True, "reset-attention-mask": True}),
    "recompute-granularity": (
        {"recompute-granularity": "full", "recompute-method": "uniform"},
        {"recompute-granularity": "full", "recompute-method": "uniform", "recompute-num-layers": 1},
    ),
    "tp-comm-overlap": (
        {"tp-comm-overlap": True, "sequence-parallel": True},
        {"tp-comm-overlap": True, "sequence-parallel": True, "tensor-model-parallel-size": 2},
    ),
    "num-layers-per-virtual-pipeline-stage": (
        {"num-layers-per-virtual-pipeline-stage": 1, "pipeline-model-parallel-size": 2},
        {"num-layers-per-virtual-pipeline-stage": 1, "pipeline-model-parallel-size": 2, "num-layers": 4},
    ),
    "num-experts": ({"num-experts": 0}, {}),
    "moe-alltoall-overlap-comm": ({"moe-alltoall-overlap-comm": True, **MOE}, ALLTOALL_OVERLAP_26),
    "moe-allgather-overlap-comm": (
        {"moe-allgather-overlap-comm": True, **MOE_26},
        {
            "moe-allgather-overlap-comm": True,
            **MOE_26,
            "moe-token-dispatcher-type": "allgather",
            "moe-permutation-async-comm": True,
        },
    ),
    "moe-fb-overlap": (
        {"moe-fb-overlap": True, **MOE_26},
        {"moe-fb-overlap": True, **MOE_26, "overlap-grad-reduce": OFF},
    ),
    "moe-zero-memory": (
        {"moe-zero-memory": "level1", **MOE_26},
        {"moe-zero-memory": "level1", **ALLTOALL_OVERLAP_26},
    ),
    "moe-router-load-balancing-type": (
        {"moe-router-load-balancing-type": "group_limited_greedy", "topk-group": 2, **MOE_26},
        {
            "moe-router-load-balancing-type": "group_limited_greedy",
            "moe-router-group-topk": 1,
            "moe-router-num-groups": 2,
            "moe-router-topk-scaling-factor": 1.0,
            **MOE_26,
        },
    ),
    "encoder-pipeline-model-parallel-size": (
        {"encoder-pipeline-model-parallel-size": 3},  # 1 or 2 devices: 3 encoder + 1 decoder ranks do not fit
        {"encoder-pipeline-model-parallel-size": OFF},
    ),
    "encoder-tensor-model-parallel-size": (
        {"encoder-tensor-model-parallel-size": 2},
        {"encoder-tensor-model-parallel-size": 2, "tensor-model-parallel-size": 2},
    ),
    "attention-backend": (
        {"attention-backend": "local"},
        {"attention-backend": "flash"},
    ),
    "heterogeneous-layers-config-path": (
        {"heterogeneous-layers-config-path": "/nonexistent/layers.json"},
        {},
    ),
    "use-ascend-mc2": (
        {"use-ascend-mc2": True},
        {"use-ascend-mc2": True, "tensor-model-parallel-size": 2, "sequence-parallel": True},
    ),
    "use-mc2": (
        {"use-mc2": True, "tensor-model-parallel-size": 2},
        {"use-mc2": True, "tensor-model-parallel-size": 2, "sequence-parallel": True},
    ),
    "decoder-first-pipeline-num-layers": (
        {"decoder-first-pipeline-num-layers": 0, "pipeline-model-parallel-size": 2},
        {"decoder-first-pipeline-num-layers": 1, "pipeline-model-parallel-size": 2},
    ),
    "decoder-last-pipeline-num-layers": (
        {"decoder-last-pipeline-num-layers": 0, "pipeline-model-parallel-size": 2, "num-layers": 4},
        {"decoder-last-pipeline-num-layers": 2, "pipeline-model-parallel-size": 2, "num-layers": 4},
    ),
    "enable-high-availability": (
        {"enable-high-availability": True, "disable-gloo-group": True},
        {"enable-high-availability": True},
    ),
    "enable-elastic-training": (
        {"enable-elastic-training": True},
        {
            "enable-elastic-training": True,
            "enable-high-availability": True,
            "use-distributed-optimizer": True,
        },
    ),
    "data-args-path": ({"data-args-path": "/data/args.txt"}, {}),
    "inference-batch-times-seqlen-threshold": (
        {"inference-batch-times-seqlen-threshold": 0},
        {"inference-batch-times-seqlen-threshold": 0, "pipeline-model-parallel-size": 2},
    ),
    "moe-router-group-topk": (
        {"moe-router-group-topk": 1, **MOE_26},
        {"moe-router-group-topk": 1, "moe-router-num-groups": 2, **MOE_26},
    ),
    "schedules-method": (
        {"schedules-method": "dualpipev"},
        {
            "schedules-method": "dualpipev",
            "overlap-grad-reduce": OFF,
            "untie-embeddings-and-output-weights": True,
            "pipeline-model-parallel-size": 2,
            "num-layers": 4,
            "global-batch-size": 16,
        },
    ),
}
# the rule modules of the 26.1.0 coverage map (backends/mindspeed_llm/rules_26_*.py), one example module each
for _shard in (megatron_config, megatron_args, mindspeed_moe_tp, mindspeed_pp_cp, llm_features):
    _clash = EXAMPLES_26.keys() & _shard.EXAMPLES.keys()
    assert not _clash, f"{_shard.__name__} repeats the examples of {sorted(_clash)}"
    EXAMPLES_26.update(_shard.EXAMPLES)


def example(key: str, version: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The example of `key`'s rule in `version` (None: no rule of that key there)."""
    if not any(r.key == key and version in r.versions for r in RULES):
        return None
    return EXAMPLES_26[key] if version == "26.1.0" and key in EXAMPLES_26 else EXAMPLES[key]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_base_flags_break_no_rule(version: str) -> None:
    assert broken_rules(BASE, RELEASES[version]) == []


def test_every_rule_has_an_example() -> None:
    for version in VERSIONS:
        for rule in RULES:
            if version in rule.versions:
                assert example(rule.key, version), (rule.key, version)


@pytest.mark.parametrize("key", sorted({r.key for r in RULES}))
@pytest.mark.parametrize("version", VERSIONS)
def test_rule_refuses_its_example_and_passes_the_fix(key: str, version: str) -> None:
    """In the versions a rule names, its example is refused and the fix passes; a 2.1.0 example of a rule
    26.1.0 does not have passes 26.1.0's rules (its judge accepts it: tests/integration)."""
    release = RELEASES[version]
    found = example(key, version)
    if found is None:
        bad, _ = EXAMPLES.get(key) or EXAMPLES_26[key]
        assert key not in [r.key for r in broken_rules(flags_with(bad), release)]
        return
    bad, good = found
    assert key in [r.key for r in broken_rules(flags_with(bad), release)]
    assert key not in [r.key for r in broken_rules(flags_with(good), release)]


def test_a_rule_cites_its_version_s_megatron() -> None:
    rule = next(r for r in RULES if r.key == "min-lr")
    assert "core_r0.8.0" in rule.source_for(RELEASES["2.1.0"])
    assert "core_v0.12.1" in rule.source_for(RELEASES["26.1.0"])


def test_a_rule_on_a_key_already_refused_is_skipped_and_a_wrong_kind_does_not_crash() -> None:
    release = RELEASES["2.1.0"]
    skipped = broken_rules(
        flags_with({"output-layer-slice-num": 0}), release, skip={"output-layer-slice-num"}
    )
    assert skipped == []
    assert broken_rules(flags_with({"num-layers": "many"}), release) == []


def test_a_broken_rule_stops_the_plan_naming_its_key(tmp_path: Path) -> None:
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.config.load import load_experiment
    from tests.diffval.backends import ADAPTERS

    tree = ADAPTERS["mindspeed-llm"].bases(tmp_path)[0].tree
    tree.pop("scripts_dir", None)
    tree["backend_config"]["training"]["neat-pack"] = True
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError) as err:
        make_plan(load_experiment(path), dry_run=True)
    problem = next(p for p in err.value.problems if p.key == "backend_config.training.neat-pack")
    assert (
        "reset-position-ids" in problem.message and "mindspeed_llm/training/arguments.py" in problem.message
    )


def test_high_availability_with_a_distributed_checkpoint_is_refused_by_26_1_0_only() -> None:
    """The second rule of the key (the example above is the first's): 26.1.0's HighAvailabilityFeature
    refuses a distributed checkpoint (args.use_dist_ckpt: core_v0.12.1 derives it from ckpt-format, see
    test_rules_26_llm_features.py); 2.1.0 never runs that feature's validate_args."""
    flags = flags_with({"enable-high-availability": True, "ckpt-format": "torch_dist"})
    messages = [r.message for r in broken_rules(flags, RELEASES["26.1.0"])]
    assert "needs ckpt-format torch (a distributed checkpoint format is not supported)" in messages
    assert broken_rules(flags, RELEASES["2.1.0"]) == []


def test_lora_on_experts_needs_the_alltoall_seq_dispatcher_at_26_1_0() -> None:
    """A second rule of `num-experts` (the example above is the first's): 26.1.0's LoRA feature refuses
    LoRA on a MoE model unless the dispatcher is alltoall_seq, what 26.1.0's MoE plans fill."""
    lora = {"lora-target-modules": ["linear_qkv"], "num-experts": 8}
    messages = [r.message for r in broken_rules(flags_with(lora), RELEASES["26.1.0"])]
    assert any("alltoall_seq" in m for m in messages)
    fixed = flags_with({**lora, "moe-token-dispatcher-type": "alltoall_seq"})
    assert not any("alltoall_seq" in r.message for r in broken_rules(fixed, RELEASES["26.1.0"]))
    assert not any("alltoall_seq" in r.message for r in broken_rules(flags_with(lora), RELEASES["2.1.0"]))


@pytest.mark.parametrize(
    ("bad", "good"),
    [
        # TransformerConfig: the heads split by TP (the key's example above is heads below 1)
        ({"tensor-model-parallel-size": 2, "num-attention-heads": 1}, {"tensor-model-parallel-size": 2}),
        # _validate_cp_args: ulysses_cp_algo splits the heads by TP x CP, the hybrid algorithms by TP x the
        # ulysses degree (not CP: 4 heads over a ulysses degree of 2 in CP 4 pass)
        (
            {"context-parallel-size": 4, "num-attention-heads": 2},
            {"context-parallel-size": 2, "num-attention-heads": 2},
        ),
        (
            {
                "context-parallel-size": 4,
                "context-parallel-algo": "hybrid_adaptive_cp_algo",
                "ulysses-degree-in-cp": 2,
                "num-attention-heads": 1,
            },
            {
                "context-parallel-size": 8,
                "context-parallel-algo": "hybrid_adaptive_cp_algo",
                "ulysses-degree-in-cp": 2,
                "num-attention-heads": 2,
            },
        ),
    ],
)
def test_the_heads_are_split_by_tp_and_the_ulysses_degree(bad: dict[str, Any], good: dict[str, Any]) -> None:
    release = RELEASES["2.1.0"]
    assert "num-attention-heads" in [r.key for r in broken_rules(flags_with(bad), release)]
    assert "num-attention-heads" not in [r.key for r in broken_rules(flags_with(good), release)]


@pytest.mark.parametrize(
    ("flags", "key"),
    [
        # hybrid_cp_algo: the ring (CP / ulysses degree) must be 2 or more and hold the window
        (
            {
                "context-parallel-size": 4,
                "context-parallel-algo": "hybrid_cp_algo",
                "ulysses-degree-in-cp": 4,
            },
            "ulysses-degree-in-cp",
        ),
        (
            {
                "context-parallel-size": 4,
                "context-parallel-algo": "hybrid_cp_algo",
                "ulysses-degree-in-cp": 2,
                "cp-window-size": 2,
            },
            "cp-window-size",
        ),
        # megatron_cp_algo: the window divides CP
        (
            {"context-parallel-size": 4, "context-parallel-algo": "megatron_cp_algo", "cp-window-size": 3},
            "cp-window-size",
        ),
        # alibi with a sliding window, without CP
        ({"sliding-window": 4, "position-embedding-type": "alibi"}, "sliding-window"),
        # noop-layers that are not numbers
        ({"noop-layers": "a"}, "noop-layers"),
    ],
)
def test_more_shapes_of_the_2_1_0_map_rules(flags: dict[str, Any], key: str) -> None:
    assert key in [r.key for r in broken_rules(flags_with(flags), RELEASES["2.1.0"])]


def test_the_ulysses_degree_does_not_split_the_query_groups() -> None:
    """kv-head-repeat-before-uly-alltoall defaults to True (a store_true): 2.1.0 never checks the query
    groups against the ulysses degree, only against TP."""
    flags = flags_with({"context-parallel-size": 4, "group-query-attention": True, "num-query-groups": 2})
    assert broken_rules(flags, RELEASES["2.1.0"]) == []


@pytest.mark.parametrize(
    ("key", "bad", "good"),
    [
        # a second rule of a key whose example above is its first rule's
        (
            "rampup-batch-size",
            {**SAMPLES, "rampup-batch-size": [2, 2]},
            {**SAMPLES, "rampup-batch-size": [2, 2, 8]},
        ),
        (
            "rampup-batch-size",
            {**SAMPLES, "rampup-batch-size": [8, 2, 8]},
            {**SAMPLES, "rampup-batch-size": [2, 2, 8]},
        ),
        (
            "rampup-batch-size",
            {**SAMPLES, "rampup-batch-size": [2, 4, 8]},
            {**SAMPLES, "rampup-batch-size": [2, 3, 8]},
        ),
        ("lr-warmup-iters", {**SAMPLES, "lr-warmup-iters": 1}, SAMPLES),
        ("lr-warmup-samples", {**SAMPLES, "lr-warmup-fraction": 0.1, "lr-warmup-samples": 1}, SAMPLES),
        (
            "distribute-saved-activations",
            {
                **RECOMPUTE_FULL,
                "distribute-saved-activations": True,
                "tensor-model-parallel-size": 2,
                "sequence-parallel": True,
            },
            {**RECOMPUTE_FULL, "distribute-saved-activations": True, "tensor-model-parallel-size": 2},
        ),
        (
            "moe-alltoall-overlap-comm",
            {**ALLTOALL_OVERLAP_21, "tensor-model-parallel-size": 2},
            {**ALLTOALL_OVERLAP_21, "tensor-model-parallel-size": 2, "moe-tp-extend-ep": True},
        ),
        (
            "output-layer-slice-num",
            {"output-layer-slice-num": 3, "padded-vocab-size": 960, "vocab-size": 7},
            {"output-layer-slice-num": 3, "padded-vocab-size": 960, "vocab-size": 9},
        ),
        ("tp-2d", {**TP2D, "context-parallel-algo": "hybrid_cp_algo"}, TP2D),
        (
            "tp-2d",
            {**TP2D, "tensor-model-parallel-size": 2, "tp-x": 2, "tp-y": 2},
            {**TP2D, "tensor-model-parallel-size": 2, "tp-x": 2},
        ),
        (
            "o2-gradient",
            {"o2-gradient": True, "bf16": True, "no-gradient-accumulation-fusion": OFF},
            {"o2-gradient": True, "bf16": True},
        ),
        (
            "num-layer-list",
            {
                "pipeline-model-parallel-size": 2,
                "num-layer-list": "1,1",
                "num-layers-per-virtual-pipeline-stage": 1,
            },
            {"pipeline-model-parallel-size": 2, "num-layer-list": "1,1"},
        ),
        (
            "num-layers-per-virtual-pipeline-stage",
            {"pipeline-model-parallel-size": 4, "num-layers": 8, "num-layers-per-virtual-pipeline-stage": 3},
            {"pipeline-model-parallel-size": 4, "num-layers": 8, "num-layers-per-virtual-pipeline-stage": 1},
        ),
        (
            "enable-share-memory",
            {"enable-share-memory": True, "reset-position-ids": True, "position-embedding-type": "alibi"},
            {"enable-share-memory": True, "reset-position-ids": True},
        ),
        (
            "squared-relu",
            {"squared-relu": True, "swiglu": OFF},
            {"squared-relu": True, "swiglu": OFF, "no-bias-gelu-fusion": True},
        ),
        ("num-experts", {"num-experts": -1}, {"num-experts": 0}),
        (
            "rotary-interleaved",
            {"rotary-interleaved": True, "no-rope-fusion": True, "use-legacy-models": True},
            {"rotary-interleaved": True, "no-rope-fusion": True},
        ),
        (
            "moe-extended-tp",
            {"moe-extended-tp": True, "tensor-model-parallel-size": 2, "ffn-hidden-size": 175},
            {"moe-extended-tp": True, "tensor-model-parallel-size": 2, "ffn-hidden-size": 176},
        ),
        ("use-mcore-models", {"use-mcore-models": False, **MOE}, {**MOE}),
    ],
)
def test_a_second_rule_of_a_key_refuses_its_case_at_2_1_0(
    key: str, bad: dict[str, Any], good: dict[str, Any]
) -> None:
    """Rules the 2.1.0 coverage map added beside a key's first rule (each case was refused by the 2.1.0
    judge at its statement: tests/diffval/maps/mindspeed-llm-2.1.0.yaml)."""
    release = RELEASES["2.1.0"]
    assert key in [r.key for r in broken_rules(flags_with(bad), release)]
    assert key not in [r.key for r in broken_rules(flags_with(good), release)]


def test_reset_attention_mask_reads_the_cp_mask_type() -> None:
    """2.1.0's _add_dummy_args sets attention_mask_type to cp_attention_mask_type before the check: a general
    CP mask passes reset-attention-mask under ulysses_cp_algo; a causal one needs ring attention."""
    release = RELEASES["2.1.0"]
    causal = flags_with({"context-parallel-size": 2, "reset-attention-mask": True})
    general = flags_with({**causal, "cp-attention-mask-type": "general"})
    assert "reset-attention-mask" in [r.key for r in broken_rules(causal, release)]
    assert "reset-attention-mask" not in [r.key for r in broken_rules(general, release)]


def test_mtp_with_use_legacy_models_beside_mcore_passes_2_1_0_only() -> None:
    """2.1.0 sets use_legacy_models = not use_mcore_models before _validate_mtp_args (its judge accepts
    mtp-num-layers with use-legacy-models when the plan passes use-mcore-models); 26.1.0 reads the flag."""
    flags = flags_with({"mtp-num-layers": 1, "use-legacy-models": True})
    assert "mtp-num-layers" not in [r.key for r in broken_rules(flags, RELEASES["2.1.0"])]
    assert "mtp-num-layers" in [r.key for r in broken_rules(flags, RELEASES["26.1.0"])]
