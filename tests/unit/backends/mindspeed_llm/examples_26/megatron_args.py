"""Examples of backends/mindspeed_llm/rules_26_megatron_args.py: rule key -> (flags that break it, the same
with the fix), on top of rule_example_bases.BASE (its `OFF` removes a flag; MOE_26 and the others are
bases to build on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# the demo model's heterogeneous layer config (what validate_args compares with the model flags)
HETEROGENEOUS = str(
    Path(__file__).resolve().parents[4] / "diffval" / "data" / "heterogeneous_tiny_qwen2.json"
)
# the flags that config asks for beyond the demo model's own
HETEROGENEOUS_FLAGS = {"use-rope-scaling": True, "use-rotary-position-embeddings": True}
MLA_26 = {"multi-latent-attention": True, "kv-lora-rank": 8, "v-head-dim": 16, "qk-rope-head-dim": 8}
MLA_26 |= {"qk-nope-head-dim": 8}

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "disable-gloo-process-groups": (
        {"disable-gloo-process-groups": True, "use-distributed-optimizer": True},
        {"use-distributed-optimizer": True},
    ),
    # on the shipped template (use-flash-attn) deterministic-mode is also refused for flash attention, and
    # without it for NCCL_ALGO (read from the node's environment): the map's row shows this check alone
    "cross-entropy-loss-fusion": (
        {"cross-entropy-loss-fusion": True, "deterministic-mode": True},
        {"cross-entropy-loss-fusion": True},
    ),
    "multi-latent-attention": (
        {**MLA_26, **HETEROGENEOUS_FLAGS, "heterogeneous-layers-config-path": HETEROGENEOUS},
        {**MLA_26, **HETEROGENEOUS_FLAGS},
    ),
}
