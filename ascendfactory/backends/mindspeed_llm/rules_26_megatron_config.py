"""MindSpeed-LLM 26.1.0 rules read from Megatron-LM core_v0.12.1's TransformerConfig / ModelParallelConfig
__post_init__ and initialize_megatron (megatron/core/transformer/transformer_config.py,
megatron/core/model_parallel_config.py, megatron/training/initialize.py), as data: each a statement of the
26.1.0 coverage map (tests/diffval/maps/) that refuses a job our other rules accepted. `rules.py` adds
them to its table; the record and the source texts are `rule_types.py`'s.
"""

from __future__ import annotations

from ascendfactory.backends.mindspeed_llm.rule_types import Rule

RULES: tuple[Rule, ...] = ()
