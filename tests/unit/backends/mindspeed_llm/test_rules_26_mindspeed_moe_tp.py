"""The rules of backends/mindspeed_llm/rules_26_mindspeed_moe_tp.py on keys whose example is another rule's
(test_mindspeed_llm_rules.py holds one example per key), and the fb-overlap pipeline check's reading of
--pipeline-model-parallel-layout. Each case is a targeted case of the 26.1.0 coverage map
(tests/diffval/maps/mindspeed-llm-26.1.0.yaml), where 26.1.0's judge refused it at the statement
the rule cites and accepted the fix.
"""

from __future__ import annotations

from typing import Any

import pytest

from ascendfactory.backends.mindspeed_llm.rules import RULES, broken_rules
from ascendfactory.backends.mindspeed_llm.rules_26_mindspeed_moe_tp import RULES as MOE_TP
from ascendfactory.backends.mindspeed_llm.rules_26_mindspeed_moe_tp import layout_stages
from ascendfactory.backends.mindspeed_llm.versions import RELEASES
from tests.unit.backends.mindspeed_llm.rule_example_bases import MOE_26, OFF, flags_with

V26 = RELEASES["26.1.0"]
FB = {**MOE_26, "moe-fb-overlap": True, "overlap-grad-reduce": OFF}  # alltoall, EP 2, grouped GEMM
VPP = {"pipeline-model-parallel-size": 2, "num-layers": 4, "num-layers-per-virtual-pipeline-stage": 1}
WORLD = 8  # the MoE bases' devices: DP 4 with PP 2


def rule(key: str, words: str) -> Any:
    return next(r for r in MOE_TP if r.key == key and words in r.message)


@pytest.mark.parametrize(
    ("key", "words", "bad", "good"),
    [
        ("moe-fb-overlap", "use-legacy-models", {**FB, "use-legacy-models": True}, FB),
        (
            "moe-fb-overlap",
            "global-batch-size",
            {**FB, **VPP, "global-batch-size": 8},  # 8 // (1 x 2 x 4) = 1
            {**FB, **VPP, "global-batch-size": 16},
        ),
        (
            "moe-fb-overlap",
            "noop-layers",
            {**FB, **VPP, "global-batch-size": 64, "noop-layers": "0"},
            {**FB, **VPP, "global-batch-size": 64, "noop-layers": "3"},
        ),
        (
            "moe-fb-overlap",
            "noop-layers",
            {
                **FB,
                "pipeline-model-parallel-size": 2,
                "pipeline-model-parallel-layout": "Et|t|t|tL",
                "noop-layers": "1",
            },
            {**FB, "pipeline-model-parallel-size": 2, "pipeline-model-parallel-layout": "Et|t|t|tL"},
        ),
        (
            "moe-fb-overlap",
            "decoder layer",
            {**FB, "pipeline-model-parallel-size": 2, "pipeline-model-parallel-layout": "E|tt|tt|L"},
            {**FB, "pipeline-model-parallel-size": 2, "pipeline-model-parallel-layout": "Et|t|t|tL"},
        ),
        (
            "moe-alltoall-mc2",
            "use-ascend-mc2",
            {**MOE_26, "moe-alltoall-mc2": True, "moe-fb-overlap": True},
            {**MOE_26, "moe-alltoall-mc2": True},
        ),
        (
            "moe-alltoall-mc2",
            "use-ascend-mc2",
            {
                **MOE_26,
                "moe-alltoall-mc2": True,
                "moe-token-dispatcher-type": "alltoall_seq",
                "tensor-model-parallel-size": 2,
            },
            {**MOE_26, "moe-alltoall-mc2": True, "moe-token-dispatcher-type": "alltoall_seq"},
        ),
        (
            "moe-alltoall-mc2",
            "use-ascend-mc2",
            {**MOE_26, "moe-alltoall-mc2": True, "moe-expert-capacity-factor": 1.0},
            {**MOE_26, "moe-alltoall-mc2": True},
        ),
        (
            "moe-alltoall-overlap-comm",
            "moe-tp-extend-ep",
            {
                **MOE_26,
                "moe-alltoall-overlap-comm": True,
                "moe-token-dispatcher-type": "alltoall_seq",
                "tensor-model-parallel-size": 2,
            },
            {
                **MOE_26,
                "moe-alltoall-overlap-comm": True,
                "moe-token-dispatcher-type": "alltoall_seq",
                "tensor-model-parallel-size": 2,
                "moe-tp-extend-ep": True,
            },
        ),
    ],
)
def test_a_second_rule_of_a_key_refuses_its_case_at_26_1_0(
    key: str, words: str, bad: dict[str, Any], good: dict[str, Any]
) -> None:
    wanted = rule(key, words)
    assert wanted in broken_rules(flags_with(bad), V26, world_size=WORLD)
    assert wanted not in broken_rules(flags_with(good), V26, world_size=WORLD)
    assert wanted not in broken_rules(flags_with(bad), RELEASES["2.1.0"], world_size=WORLD)


def test_fb_overlap_takes_a_layout_of_several_chunks_per_rank_as_a_virtual_pipeline() -> None:
    """_has_virtual_pipeline: 4 layout chunks over PP 2 are 2 virtual stages per rank (accepted by 26.1.0's
    judge); 2 chunks over PP 2 are a plain pipeline, which fb overlap refuses."""
    first = next(r for r in RULES if r.key == "moe-fb-overlap" and "26.1.0" in r.versions)
    layout = {**FB, "pipeline-model-parallel-size": 2, "global-batch-size": 64}
    assert first not in broken_rules(
        flags_with({**layout, "pipeline-model-parallel-layout": "Et|t|t|tL"}), V26
    )
    assert first in broken_rules(flags_with({**layout, "pipeline-model-parallel-layout": "Ett|ttL"}), V26)
    assert layout_stages("E(tt)*2|t*2L") == ["Etttt", "ttL"]


@pytest.mark.parametrize(
    ("bad", "good"),
    [
        (
            {"tp-2d": True, "use-fused-rmsnorm": OFF, "use-ascend-coc": True},
            {"tp-2d": True, "use-fused-rmsnorm": OFF},
        ),
        (
            {"tp-2d": True, "use-fused-rmsnorm": OFF, "context-parallel-algo": "hybrid_cp_algo"},
            {"tp-2d": True, "use-fused-rmsnorm": OFF},
        ),
        (
            {"tp-2d": True, "use-fused-rmsnorm": OFF, "tensor-model-parallel-size": 2},
            {"tp-2d": True, "use-fused-rmsnorm": OFF, "tensor-model-parallel-size": 2, "tp-x": 2},
        ),
    ],
)
def test_tp_2d_needs_its_cp_algorithm_no_coc_and_tp_x_times_tp_y_at_26_1_0_too(
    bad: dict[str, Any], good: dict[str, Any]
) -> None:
    """MindSpeed 26.1.0 tensor_parallel/tp_2d.py refuses what 2.1.0's _valid_tp_2d_args refused."""
    assert "tp-2d" in [r.key for r in broken_rules(flags_with(bad), V26)]
    assert "tp-2d" not in [r.key for r in broken_rules(flags_with(good), V26)]


def test_fb_overlap_reads_the_first_noop_layer_of_the_set_as_26_1_0_does() -> None:
    """fb_overlap.py post_validate_args compares list(noop_layers)[0], the set NoopLayersFeature built:
    {40, 39} iterates 40 first (CPython puts 40 in slot 0), which lies in the last virtual stage of 48
    layers by 8; 39 alone does not."""
    wanted = rule("moe-fb-overlap", "noop-layers")
    vpp = {
        **FB,
        "pipeline-model-parallel-size": 2,
        "num-layers": 48,
        "num-layers-per-virtual-pipeline-stage": 8,
    }
    assert wanted not in broken_rules(flags_with({**vpp, "noop-layers": "40,39"}), V26, world_size=WORLD)
    assert wanted in broken_rules(flags_with({**vpp, "noop-layers": "39"}), V26, world_size=WORLD)
