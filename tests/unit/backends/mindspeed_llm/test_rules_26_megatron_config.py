"""The rules of rules_26_megatron_config.py (and the rules.py rules its coverage-map rows widened to 26.1.0)
whose key already has a 26.1.0 example elsewhere: each refused at 26.1.0 as the 26.1.0 judge refuses it
(TransformerConfig.__post_init__ of Megatron-LM core_v0.12.1, tests/diffval/maps/drafts/), its fix passing.
"""

from __future__ import annotations

from typing import Any

import pytest

from ascendfactory.backends.mindspeed_llm.rules import broken_rules
from ascendfactory.backends.mindspeed_llm.versions import RELEASES
from tests.unit.backends.mindspeed_llm.rule_example_bases import MLA, MOE_26, OFF, TP2_SP, flags_with

MLA_UP = {"recompute-granularity": "selective", "recompute-modules": ["mla_up_proj"]}
MOE_ACT = {"recompute-granularity": "selective", "recompute-modules": ["moe_act"]}
RECOMPUTE_DISTRIBUTED = {
    "recompute-granularity": "full",
    "recompute-method": "uniform",
    "recompute-num-layers": 1,
    "distribute-saved-activations": True,
}
QWEN3_MOE_PP2 = {**MOE_26, "num-layers": 4, "pipeline-model-parallel-size": 2}

# (key, words of its message, flags that break it, the same fixed)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("recompute-modules", "mla_up_proj", MLA_UP, {**MLA_UP, **MLA}),
    ("recompute-modules", "moe_act", MOE_ACT, {**MOE_ACT, "moe-grouped-gemm": True}),
    (
        "num-virtual-stages-per-pipeline-rank",
        "must divide",
        {**QWEN3_MOE_PP2, "decoder-first-pipeline-num-layers": 1, "num-virtual-stages-per-pipeline-rank": 2},
        {**QWEN3_MOE_PP2, "decoder-first-pipeline-num-layers": 2, "num-virtual-stages-per-pipeline-rank": 2},
    ),
    (
        "num-virtual-stages-per-pipeline-rank",
        "must divide",
        {
            **QWEN3_MOE_PP2,
            "num-layers": 7,
            "decoder-first-pipeline-num-layers": 2,
            "num-virtual-stages-per-pipeline-rank": 2,
        },
        {
            **QWEN3_MOE_PP2,
            "num-layers": 7,
            "decoder-first-pipeline-num-layers": 3,
            "num-virtual-stages-per-pipeline-rank": 1,
        },
    ),
    ("rotary-interleaved", "multi-latent", {**MLA, "rotary-interleaved": True}, MLA),
    ("use-checkpoint-args", "needs a checkpoint", {"use-checkpoint-args": True}, {"load": "/ckpt/saved"}),
    ("rotary-interleaved", "multi-latent", {"multi-latent-attention": True, "rotary-interleaved": True}, {}),
    ("num-experts", "negative", {"num-experts": -1}, {"num-experts": 8}),
    (
        "distribute-saved-activations",
        "sequence-parallel",
        {**TP2_SP, **RECOMPUTE_DISTRIBUTED},
        {**TP2_SP, **RECOMPUTE_DISTRIBUTED, "sequence-parallel": OFF},
    ),
    (
        "overlap-p2p-communication-warmup-flush",
        "interleaved",
        {
            "pipeline-model-parallel-size": 2,
            "num-virtual-stages-per-pipeline-rank": 1,
            "overlap-p2p-communication-warmup-flush": True,
        },
        {
            "pipeline-model-parallel-size": 2,
            "num-virtual-stages-per-pipeline-rank": 2,
            "overlap-p2p-communication-warmup-flush": True,
        },
    ),
]


def _messages(flags: dict[str, Any], key: str) -> list[str]:
    return [r.message for r in broken_rules(flags_with(flags), RELEASES["26.1.0"]) if r.key == key]


@pytest.mark.parametrize(("key", "words", "bad", "good"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_26_1_0_refuses_the_case_and_passes_the_fix(
    key: str, words: str, bad: dict[str, Any], good: dict[str, Any]
) -> None:
    assert any(words in m for m in _messages(bad, key)), _messages(bad, key)
    assert not any(words in m for m in _messages(good, key)), _messages(good, key)


def test_a_virtual_pipeline_of_one_is_no_interleaved_schedule() -> None:
    """MindSpeed drops a virtual pipeline of 1 (and overlap-p2p-communication with it), so the warmup-flush
    overlap is refused; num-layers-per-virtual-pipeline-stage giving 2 virtual stages keeps it."""
    flush = {
        "overlap-p2p-communication-warmup-flush": True,
        "pipeline-model-parallel-size": 2,
        "num-layers": 4,
    }
    assert _messages(
        {**flush, "num-layers-per-virtual-pipeline-stage": 2}, "overlap-p2p-communication-warmup-flush"
    )
    assert not _messages(
        {**flush, "num-layers-per-virtual-pipeline-stage": 1}, "overlap-p2p-communication-warmup-flush"
    )
