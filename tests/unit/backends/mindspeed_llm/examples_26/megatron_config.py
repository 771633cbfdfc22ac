"""Examples of backends/mindspeed_llm/rules_26_megatron_config.py: rule key -> (flags that break it, the same
with the fix), on top of rule_example_bases.BASE (its `OFF` removes a flag; MOE_26 and the others are
bases to build on). The rules of keys that have a 26.1.0 example elsewhere are tested in
test_rules_26_megatron_config.py.
"""

from __future__ import annotations

from typing import Any

from tests.unit.backends.mindspeed_llm.rule_example_bases import CP2_RING, MOE_26, RECOMPUTE_FULL

FP8 = {"transformer-impl": "transformer_engine", "fp8-format": "e4m3"}
BF16_EDGES = {**FP8, "fp8-recipe": "tensorwise", "first-last-layers-bf16": True}

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "first-last-layers-bf16": (
        {**FP8, "first-last-layers-bf16": True},
        {**FP8, "first-last-layers-bf16": True, "fp8-recipe": "tensorwise"},
    ),
    "num-layers-at-start-in-bf16": (
        {**BF16_EDGES, "num-layers-at-start-in-bf16": 3},
        {**BF16_EDGES, "num-layers-at-start-in-bf16": 2},
    ),
    "num-layers-at-end-in-bf16": (
        {**BF16_EDGES, "num-layers-at-end-in-bf16": 3},
        {**BF16_EDGES, "num-layers-at-end-in-bf16": 0},
    ),
    "fp8-recipe": (
        {**FP8, "fp8-recipe": "mxfp8", "fp8-param-gather": True, "use-distributed-optimizer": True},
        {**FP8, "fp8-recipe": "tensorwise", "fp8-param-gather": True, "use-distributed-optimizer": True},
    ),
    "moe-layer-recompute": (
        {**MOE_26, **RECOMPUTE_FULL, "moe-layer-recompute": True},
        {**MOE_26, "moe-layer-recompute": True},
    ),
    "account-for-embedding-in-pipeline-split": (
        {"pipeline-model-parallel-size": 2, "account-for-embedding-in-pipeline-split": True},
        {
            "pipeline-model-parallel-size": 2,
            "account-for-embedding-in-pipeline-split": True,
            "account-for-loss-in-pipeline-split": True,
        },
    ),
    "account-for-loss-in-pipeline-split": (
        {"pipeline-model-parallel-size": 2, "account-for-loss-in-pipeline-split": True},
        {
            "pipeline-model-parallel-size": 2,
            "account-for-loss-in-pipeline-split": True,
            "account-for-embedding-in-pipeline-split": True,
        },
    ),
    "cp-comm-type": (
        {**CP2_RING, "cp-comm-type": ["p2p", "p2p", "p2p"]},
        {**CP2_RING, "cp-comm-type": ["p2p", "p2p"]},
    ),
    "use-checkpoint-args": (  # the plan always passes load here (BASE has none)
        {"use-checkpoint-args": True, "non-persistent-ckpt-type": "local", "load": "/ckpt/saved"},
        {"use-checkpoint-args": True, "load": "/ckpt/saved"},
    ),
}
