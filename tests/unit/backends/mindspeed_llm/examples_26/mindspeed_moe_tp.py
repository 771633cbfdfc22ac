"""Examples of backends/mindspeed_llm/rules_26_mindspeed_moe_tp.py: rule key -> (flags that break it, the
same with the fix), on top of rule_example_bases.BASE (its `OFF` removes a flag; MOE_26 and the others are
bases to build on). The module's rules on keys that already have an example elsewhere (moe-fb-overlap,
moe-alltoall-mc2, moe-alltoall-overlap-comm) are held by test_rules_26_mindspeed_moe_tp.py.
"""

from __future__ import annotations

from typing import Any

from tests.unit.backends.mindspeed_llm.rule_example_bases import OFF

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "swap-optimizer": (
        {"swap-optimizer": True, "use-distributed-optimizer": OFF},
        {"swap-optimizer": True, "use-distributed-optimizer": True},
    ),
}
