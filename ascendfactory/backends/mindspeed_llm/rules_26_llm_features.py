"""MindSpeed-LLM 26.1.0 rules read from MindSpeed-LLM 26.1.0's own features (features_manager/)
(mindspeed_llm/features_manager/), as data: each a statement of the 26.1.0 coverage map
(tests/diffval/maps/) that refuses a job our other rules accepted. `rules.py` adds them to its table; the
record and the source texts are `rule_types.py`'s.
"""

from __future__ import annotations

from ascendfactory.backends.mindspeed_llm.rule_types import Rule

RULES: tuple[Rule, ...] = ()
