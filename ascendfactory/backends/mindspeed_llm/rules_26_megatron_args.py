"""MindSpeed-LLM 26.1.0 rules read from Megatron-LM core_v0.12.1's validate_args and the micro-batch
calculator, and MindSpeed-LLM 26.1.0's own arguments.py (megatron/training/arguments.py,
megatron/core/num_microbatches_calculator.py, mindspeed_llm/training/arguments.py), as data: each a
statement of the 26.1.0 coverage map (tests/diffval/maps/) that refuses a job our other rules accepted.
`rules.py` adds them to its table; the record and the source texts are `rule_types.py`'s.
"""

from __future__ import annotations

from typing import Any

from ascendfactory.backends.mindspeed_llm.rule_types import MEGATRON, V26, Rule


def _words(value: Any) -> list[str]:
    """A flag of nargs='+' as the words argparse collects (one text given: one word)."""
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


RULES: tuple[Rule, ...] = (
    # megatron/training/arguments.py:355 (core_v0.12.1): the a2a+p2p CP communication splits CP into the
    # hierarchical sizes it needs
    Rule(
        "cp-comm-type",
        lambda f: (
            f.given("cp-comm-type")
            and "a2a+p2p" in _words(f["cp-comm-type"])
            and not f.given("hierarchical-context-parallel-sizes")
        ),
        "a2a+p2p needs hierarchical-context-parallel-sizes (the a2a and p2p parts of context-parallel-size)",
        "set hierarchical-context-parallel-sizes (e.g. [2, 2] for context-parallel-size 4), or use another "
        "cp-comm-type (p2p, all_gather, a2a)",
        MEGATRON,
        versions=V26,
    ),
    # megatron/training/arguments.py:899-903: without Gloo process groups the distributed optimizer saves
    # through distributed checkpointing only, and the plan's checkpoints are ckpt-format torch (the HF
    # conversion back reads that layout; MindSpeedLLMBackend refuses the others)
    Rule(
        "disable-gloo-process-groups",
        lambda f: f.given("disable-gloo-process-groups") and f.given("use-distributed-optimizer"),
        "cannot be used with use-distributed-optimizer: without Gloo groups the distributed optimizer needs "
        "a distributed checkpoint format, and the plan saves ckpt-format torch",
        "remove disable-gloo-process-groups (or use-distributed-optimizer)",
        MEGATRON,
        versions=V26,
    ),
    # megatron/training/arguments.py:878: deterministic mode refuses the fused cross-entropy
    Rule(
        "cross-entropy-loss-fusion",
        lambda f: f.given("cross-entropy-loss-fusion") and f.given("deterministic-mode"),
        "is not deterministic: it cannot be used with deterministic-mode",
        "remove cross-entropy-loss-fusion, or deterministic-mode",
        MEGATRON,
        versions=V26,
    ),
)
