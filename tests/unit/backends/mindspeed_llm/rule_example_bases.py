"""The flags the MindSpeed-LLM rule examples start from (BASE: what a plan of the shipped full-4k template
hands posttrain_gpt.py for the tiny demo model) and the bases examples add to; shared by
test_mindspeed_llm_rules.py and the examples_26 modules.
"""

from __future__ import annotations

from typing import Any

# The flags a plan of the shipped full-4k template hands posttrain_gpt.py (the tiny demo model).
BASE: dict[str, Any] = {
    "use-mcore-models": True,
    "tensor-model-parallel-size": 1,
    "pipeline-model-parallel-size": 1,
    "num-layers": 2,
    "hidden-size": 64,
    "num-attention-heads": 4,
    "seq-length": 512,
    "max-position-embeddings": 512,
    "swiglu": True,
    "normalization": "RMSNorm",
    "position-embedding-type": "rope",
    "micro-batch-size": 1,
    "global-batch-size": 8,
    "train-iters": 10,
    "lr": 1.25e-6,
    "min-lr": 1.25e-7,
    "use-fused-rmsnorm": True,
    "use-fused-swiglu": True,
    "use-fused-rotary-pos-emb": True,
    "overlap-grad-reduce": True,
    "no-gradient-accumulation-fusion": True,
    "variable-seq-lengths": True,
    "save-interval": 10,
    "data-path": "/data/alpaca",
    "save": "/out/saved_checkpoints",
}
OFF = None  # in an example: the flag removed
MOE = {"num-experts": 8, "moe-token-dispatcher-type": "alltoall"}
CP2_RING = {"context-parallel-size": 2, "context-parallel-algo": "megatron_cp_algo"}
SAMPLES = {"train-samples": 80, "train-iters": OFF}  # sample-based training
CAPACITY = {**MOE, "moe-expert-capacity-factor": 1.0, "moe-pad-expert-input-to-capacity": True}
MLA = {"multi-head-latent-attention": True}
RECOMPUTE_FULL = {"recompute-granularity": "full", "recompute-method": "uniform", "recompute-num-layers": 1}
ALLTOALL_OVERLAP_21 = {
    **MOE,
    "moe-alltoall-overlap-comm": True,
    "moe-permutation-async-comm": True,
    "moe-grouped-gemm": True,
}
TP2D = {"tp-2d": True, "use-fused-rmsnorm": OFF}
TP2_SP = {"tensor-model-parallel-size": 2, "sequence-parallel": True}
PP2_FUSION = {"pipeline-model-parallel-size": 2, "no-gradient-accumulation-fusion": OFF}

MOE_26 = {**MOE, "moe-grouped-gemm": True, "expert-model-parallel-size": 2, "bf16": True}
ALLTOALL_OVERLAP_26 = {"moe-alltoall-overlap-comm": True, **MOE_26}


def flags_with(change: dict[str, Any]) -> dict[str, Any]:
    """BASE with an example's change applied (`OFF` removes a flag)."""
    out = dict(BASE)
    for key, value in change.items():
        if value is OFF:
            out.pop(key, None)
        else:
            out[key] = value
    return out
