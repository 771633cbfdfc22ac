"""Examples of backends/mindspeed_llm/rules_26_megatron_args.py: rule key -> (flags that break it, the same
with the fix), on top of rule_example_bases.BASE (its `OFF` removes a flag; MOE_26 and the others are
bases to build on).
"""

from __future__ import annotations

from typing import Any

from tests.unit.backends.mindspeed_llm.rule_example_bases import OFF

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cp-comm-type": ({"cp-comm-type": ["a2a+p2p"]}, {"cp-comm-type": ["p2p"]}),
    "disable-gloo-process-groups": (
        {"disable-gloo-process-groups": True, "use-distributed-optimizer": True},
        {"use-distributed-optimizer": True},
    ),
    "cross-entropy-loss-fusion": (
        {"cross-entropy-loss-fusion": True, "deterministic-mode": True, "use-flash-attn": OFF},
        {"cross-entropy-loss-fusion": True, "use-flash-attn": OFF},
    ),
    # rules.py's rule of the key at 26.1.0 (its CP clause is 2.1.0's only: 26.1.0's MTPFeature hides
    # mtp-num-layers from validate_args with CP and runs it)
    "mtp-num-layers": (
        {"mtp-num-layers": 1, "position-embedding-type": "learned_absolute", "use-fused-rotary-pos-emb": OFF},
        {"mtp-num-layers": 1},
    ),
}
