"""MindSpeed-LLM's and Megatron's mixture-of-experts rules: each broken by its case and kept by its fix (the
differential harness judges them against the frameworks' own code: tests/diffval, MoE bases)."""

from __future__ import annotations

import pytest

from ascendfactory.backends.mindspeed_llm.rules import broken_rules as broken_at
from ascendfactory.backends.mindspeed_llm.versions import RELEASES
from ascendfactory.parallel import LayoutInput, validate_layout

OLD, NEW = RELEASES["2.1.0"], RELEASES["26.1.0"]


def broken_rules(flags):
    """At 2.1.0, the version these cases were judged at (the differential harness's MoE bases)."""
    return broken_at(flags, OLD)


MOE = {
    "num-experts": 8,
    "num-layers": 4,
    "bf16": True,
    "moe-grouped-gemm": True,
    "micro-batch-size": 1,
    "use-mcore-models": True,  # the plan always passes it (model_flags.py); 2.1.0 has no MoE without it
}


@pytest.mark.parametrize(
    ("case", "fix", "key"),
    [
        (
            {"expert-model-parallel-size": 2, "fp16": True, "bf16": False, "moe-grouped-gemm": False},
            {"expert-model-parallel-size": 2},
            "expert-model-parallel-size",
        ),
        ({"bf16": False}, {"moe-grouped-gemm": False, "bf16": False}, "moe-grouped-gemm"),
        (
            {"moe-expert-capacity-factor": 1.5, "moe-token-dispatcher-type": "alltoall",
             "moe-router-load-balancing-type": "sinkhorn"},
            {"moe-expert-capacity-factor": 1.5, "moe-token-dispatcher-type": "alltoall"},
            "moe-expert-capacity-factor",
        ),
        (
            {"first-k-dense-replace": 1},
            {"first-k-dense-replace": 1, "moe-layer-freq": 1},
            "first-k-dense-replace",
        ),
        ({"moe-layer-freq": 1}, {"first-k-dense-replace": 1, "moe-layer-freq": 1}, "moe-layer-freq"),
        (
            {"first-k-dense-replace": 4, "moe-layer-freq": 1},
            {"first-k-dense-replace": 3, "moe-layer-freq": 1},
            "first-k-dense-replace",
        ),
        (
            {"first-k-dense-replace": 2, "moe-layer-freq": 1, "pipeline-model-parallel-size": 2},
            {"first-k-dense-replace": 1, "moe-layer-freq": 1, "pipeline-model-parallel-size": 2},
            "first-k-dense-replace",
        ),
        (
            {"moe-tp-extend-ep": True, "tensor-model-parallel-size": 4, "expert-model-parallel-size": 4,
             "moe-permutation-async-comm": True},
            {"moe-tp-extend-ep": True, "tensor-model-parallel-size": 2, "expert-model-parallel-size": 4,
             "moe-permutation-async-comm": True, "sequence-parallel": True},
            "moe-tp-extend-ep",
        ),
        (
            {"moe-tp-extend-ep": True},
            {"moe-tp-extend-ep": True, "moe-permutation-async-comm": True},
            "moe-tp-extend-ep",
        ),
        (
            {"num-experts": 6, "expert-model-parallel-size": 4},
            {"num-experts": 8, "expert-model-parallel-size": 4},
            "num-experts",
        ),
        (
            {"expert-model-parallel-size": 2, "tensor-model-parallel-size": 2},
            {"expert-model-parallel-size": 2, "tensor-model-parallel-size": 2, "sequence-parallel": True},
            "sequence-parallel",
        ),
    ],
)  # fmt: skip
def test_each_moe_rule_is_broken_by_its_case_and_kept_by_its_fix(case, fix, key):
    assert key in {r.key for r in broken_rules({**MOE, **case})}
    assert not broken_rules({**MOE, **fix})


def test_a_negative_capacity_factor_still_meets_the_balancing_rule():
    """MindSpeed 2c085cc9 core/transformer/transformer_config.py: a factor below 0 becomes None, then the
    balancing type is checked all the same."""
    case = {"moe-expert-capacity-factor": -1, "moe-token-dispatcher-type": "alltoall"}
    assert "moe-expert-capacity-factor" in {
        r.key for r in broken_rules({**MOE, **case, "moe-router-load-balancing-type": "sinkhorn"})
    }
    assert not broken_rules({**MOE, **case})


def test_dense_models_skip_the_moe_rules():
    dense = {"num-layers": 4, "bf16": True, "micro-batch-size": 1, "fp16": False}
    assert not broken_rules({**dense, "moe-grouped-gemm": False, "first-k-dense-replace": 8})[1:]
    assert [r.key for r in broken_rules({**dense, "first-k-dense-replace": 8})] == ["first-k-dense-replace"]


def _layout(**kw):
    base = dict(
        world_size=8, tp=1, pp=1, cp=1, mbs=1, gbs=8, num_layers=4, heads=4, kv_heads=2, seq_length=128,
        max_position_embeddings=128, experts=8,
    )  # fmt: skip
    return validate_layout(LayoutInput(**{**base, **kw}))


def test_layout_rules_of_expert_parallelism():
    assert not _layout(ep=8).problems and not _layout(ep=4, tp=2).problems
    divides = _layout(ep=3).problems
    assert divides and "does not divide the model's 8 routed experts" in divides[0].message
    dp = _layout(ep=8, tp=2).problems  # DP 4 cannot hold 8 expert-parallel ranks
    assert dp and "data-parallel size 4" in dp[0].message and "[1, 2, 4]" in dp[0].fix
    assert _layout(ep=0).problems[0].message.startswith("must be >= 1")
    assert not _layout(ep=1, experts=0).problems


@pytest.mark.parametrize(
    ("case", "key", "at_26"),
    [
        ({"expert-model-parallel-size": 2, "fp16": True, "bf16": False, "moe-grouped-gemm": False},
         "expert-model-parallel-size", True),
        ({"bf16": False}, "moe-grouped-gemm", True),
        ({"first-k-dense-replace": 4, "moe-layer-freq": 1}, "first-k-dense-replace", True),
        ({"moe-tp-extend-ep": True}, "moe-tp-extend-ep", True),
        ({"moe-layer-freq": 1}, "moe-layer-freq", False),  # 26.1.0's TransformerBlockFeature: no such check
    ],
)  # fmt: skip
def test_moe_rules_at_26_1_0(case, key, at_26):
    """Megatron core_v0.12.1, 26.1.0's TransformerBlockFeature and MindSpeed 26.1.0's tp_extend_ep feature
    keep these checks; only 2.1.0 sets first-k-dense-replace and moe-layer-freq together."""
    assert (key in {r.key for r in broken_at({**MOE, **case}, NEW)}) == at_26
