"""Examples of backends/mindspeed_llm/rules_26_llm_features.py: rule key -> (flags that break it, the same
with the fix), on top of rule_example_bases.BASE (its `OFF` removes a flag; MOE_26 and the others are
bases to build on).

The keys whose 26.1.0 example lives elsewhere (fp8-recipe, moe-fb-overlap, enable-mhc,
enable-dsa-indexer, moe-expert-capacity-factor) have their extra rule here tested by
test_mindspeed_llm_rules.py's `test_llm_features_rules_of_keys_with_another_example`.
"""

from __future__ import annotations

from typing import Any

from tests.unit.backends.mindspeed_llm.rule_example_bases import MOE_26, OFF, TP2_SP

LONGROPE = {
    "rope-scaling-type": "longrope",
    "rope-scaling-original-max-position-embeddings": 512,
    "long-factor": "1.0,1.0",
    "short-factor": "1.0,1.0",
}
FP8_TE = {"fp8-format": "e4m3", "transformer-impl": "transformer_engine"}
LORA = {"lora-target-modules": ["linear_qkv"], "lora-r": 8, "lora-alpha": 16}
MUON = {"optimizer": "muon", "fp16": True, "bf16": OFF}

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "rope-scaling-type": ({"rope-scaling-type": "longrope"}, LONGROPE),
    "use-kv-cache": ({"context-parallel-size": 2, "use-kv-cache": True}, {"use-kv-cache": True}),
    "sliding-window": (
        {"context-parallel-size": 2, "sliding-window": 256},
        {"context-parallel-size": 2, "sliding-window": 512},
    ),
    "spec": (
        {
            "context-parallel-size": 2,
            "spec": ["mindspeed_llm.tasks.models.spec.deepseek4_spec", "layer_spec"],
        },
        {
            "context-parallel-size": 2,
            "spec": ["mindspeed_llm.tasks.models.spec.deepseek4_spec", "layer_spec"],
            "context-parallel-algo": "kvallgather_cp_algo",
        },
    ),
    "context-parallel-algo": (
        {
            "context-parallel-size": 4,
            "tensor-model-parallel-size": 2,
            "context-parallel-algo": "mamba_cp_algo",
        },
        {
            "context-parallel-size": 2,
            "tensor-model-parallel-size": 2,
            "context-parallel-algo": "mamba_cp_algo",
        },
    ),
    "enable-mg2hf-convert": ({**LORA, "enable-mg2hf-convert": True}, LORA),
    "moe-tp-extend-ep": (
        {
            **MOE_26,
            **LORA,
            "moe-permutation-async-comm": True,
            "moe-token-dispatcher-type": "alltoall_seq",
            "moe-tp-extend-ep": True,
        },
        {**MOE_26, **LORA, "moe-permutation-async-comm": True, "moe-token-dispatcher-type": "alltoall_seq"},
    ),
    "quant-grads": ({"swap-optimizer": True, "quant-grads": True}, {"swap-optimizer": True}),
    "transformer-impl": (
        {"transformer-impl": "transformer_engine", "use-legacy-models": True},
        {"transformer-impl": "transformer_engine"},
    ),
    "optimizer": (MUON, {**MUON, "fp16": OFF, "bf16": True}),
    "num-layer-list": (
        {"pipeline-model-parallel-size": 2, "num-layer-list": "1,1", "schedules-method": "dualpipev"},
        {"pipeline-model-parallel-size": 2, "schedules-method": "dualpipev"},
    ),
    "use-fused-mhc": (
        {
            "multi-latent-attention": True,
            "enable-mhc": True,
            "use-flash-attn": True,
            "use-fused-mhc": True,
            "hc-mult": 2,
        },
        {"multi-latent-attention": True, "enable-mhc": True, "use-flash-attn": True, "use-fused-mhc": True},
    ),
    "mtp-num-layers": (
        {"mtp-num-layers": 1, "context-parallel-size": 2, "reset-attention-mask": True},
        {"mtp-num-layers": 1, "context-parallel-size": 2},
    ),
    "moe-grouped-gemm": (
        {**MOE_26, **TP2_SP, "use-ascend-mc2": True},
        {**MOE_26, **TP2_SP, "use-ascend-mc2": True, "moe-grouped-gemm": OFF},
    ),
}

# the extra 26.1.0 rules of keys whose example is another rule's: key -> (flags that break it, the fix)
EXTRA: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
    "fp8-recipe": [
        ({**FP8_TE, "fp8-format": "hif8"}, {**FP8_TE, "fp8-format": "hif8", "fp8-recipe": "tensorwise"}),
        (
            {**FP8_TE, **TP2_SP, "use-ascend-mc2": True},
            {**FP8_TE, **TP2_SP, "use-ascend-mc2": True, "fp8-recipe": "mxfp8"},
        ),
    ],
    "moe-fb-overlap": [
        (
            {**MOE_26, "moe-fb-overlap": True, "quant-grads": True, "no-gradient-accumulation-fusion": OFF},
            {**MOE_26, "moe-fb-overlap": True, "quant-grads": True},
        )
    ],
    "enable-mhc": [
        (
            {"multi-latent-attention": True, "enable-mhc": True},
            {"multi-latent-attention": True, "enable-mhc": True, "use-flash-attn": True},
        ),
        (
            {
                "multi-latent-attention": True,
                "enable-mhc": True,
                "use-flash-attn": True,
                "context-parallel-size": 2,
            },
            {
                "multi-latent-attention": True,
                "enable-mhc": True,
                "use-flash-attn": True,
                "context-parallel-size": 2,
                "context-parallel-algo": "ulysses_cp_algo",
            },
        ),
    ],
    "enable-dsa-indexer": [
        (
            {"multi-latent-attention": True, "enable-dsa-indexer": True},
            {"multi-latent-attention": True, "enable-dsa-indexer": True, "use-flash-attn": True},
        ),
        (
            {
                "multi-latent-attention": True,
                "enable-dsa-indexer": True,
                "use-flash-attn": True,
                "reset-attention-mask": True,
                "use-fused-lightning-indexer": True,
            },
            {
                "multi-latent-attention": True,
                "enable-dsa-indexer": True,
                "use-flash-attn": True,
                "reset-attention-mask": True,
                "use-fused-lightning-indexer": True,
                "use-sparse-flash-attn": True,
            },
        ),
    ],
    "moe-expert-capacity-factor": [
        (
            {**MOE_26, "moe-token-dispatcher-type": "allgather", "moe-expert-capacity-factor": 1.0},
            {**MOE_26, "moe-token-dispatcher-type": "alltoall_seq", "moe-expert-capacity-factor": 1.0},
        ),
        ({**MOE_26, "moe-expert-capacity-factor": -1.0}, MOE_26),
    ],
}
