"""Examples of backends/mindspeed_llm/rules_26_mindspeed_moe_tp.py: rule key -> (flags that break it, the
same with the fix), on top of rule_example_bases.BASE (its `OFF` removes a flag; MOE_26 and the others are
bases to build on).
"""

from __future__ import annotations

from typing import Any

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
