"""Examples of backends/mindspeed_llm/rules_26_mindspeed_pp_cp.py: rule key -> (flags that break it, the same
with the fix), on top of rule_example_bases.BASE (its `OFF` removes a flag; MOE_26 and the others are
bases to build on). Context parallelism with tensor-model-parallel-size 2: with TP 1 Megatron core_v0.12.1's
validate_args asks the device for its architecture (get_device_arch_version), which the judge cannot answer.
"""

from __future__ import annotations

from typing import Any

CP2 = {"tensor-model-parallel-size": 2, "context-parallel-size": 2}
CP4 = {"tensor-model-parallel-size": 2, "context-parallel-size": 4}
VPP = {"pipeline-model-parallel-size": 2, "num-layers": 4, "num-layers-per-virtual-pipeline-stage": 1}

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cp-window-size": ({**CP2, "cp-window-size": 2}, {**CP2, "cp-window-size": 1}),
    "ulysses-degree-in-cp": (
        {**CP2, "context-parallel-algo": "hybrid_cp_algo"},
        {**CP4, "context-parallel-algo": "hybrid_cp_algo", "ulysses-degree-in-cp": 2},
    ),
    "attention-mask-type": (
        {**CP2, "context-parallel-algo": "kvallgather_cp_algo", "attention-mask-type": "general"},
        {**CP2, "context-parallel-algo": "kvallgather_cp_algo", "attention-mask-type": "causal"},
    ),
    "recompute-in-advance": (
        {**VPP, "recompute-in-advance": True},
        {**VPP, "recompute-in-advance": True, "recompute-num-layers": 1},
    ),
    "pipeline-model-parallel-layout": (
        {"pipeline-model-parallel-layout": "1"},
        {"pipeline-model-parallel-layout": "EttL"},
    ),
    "pipeline-num-transformer-layers": (
        {"pipeline-model-parallel-size": 2, "pipeline-num-transformer-layers": "[[2],[1]]"},
        {"pipeline-model-parallel-size": 2, "pipeline-num-transformer-layers": "[[1],[1]]"},
    ),
}
