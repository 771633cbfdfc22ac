"""The 26.1.0 rules of backends/mindspeed_llm/rules_26_mindspeed_pp_cp.py whose key already has a 26.1.0
example elsewhere (so not in examples_26/mindspeed_pp_cp.py), and the two grammars it reads: MindSpeed's
pipeline-model-parallel-layout and pipeline-num-transformer-layers texts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascendfactory.backends.mindspeed_llm import rules_26_mindspeed_pp_cp as shard
from ascendfactory.backends.mindspeed_llm.rule_types import Flags
from ascendfactory.backends.mindspeed_llm.rules import broken_rules
from ascendfactory.backends.mindspeed_llm.versions import RELEASES
from tests.unit.backends.mindspeed_llm.rule_example_bases import BASE

CP2 = {"tensor-model-parallel-size": 2, "context-parallel-size": 2}
VPP = {"pipeline-model-parallel-size": 2, "num-layers": 4, "num-layers-per-virtual-pipeline-stage": 1}


def _mine(flags: dict[str, Any], version: str = "26.1.0") -> list[str]:
    """The keys of this module's rules the flags (over BASE) break."""
    return [r.key for r in broken_rules({**BASE, **flags}, RELEASES[version]) if r in shard.RULES]


# (key, flags that break the module's rule of the key, the same with its fix)
SECOND_RULES = [
    (
        "num-attention-heads",
        {**CP2, "context-parallel-algo": "ulysses_cp_algo", "num-attention-heads": 2},
        {**CP2, "context-parallel-algo": "ulysses_cp_algo"},
    ),
    (
        "num-attention-heads",
        {
            **CP2,
            "context-parallel-size": 4,
            "context-parallel-algo": "hybrid_cp_algo",
            "ulysses-degree-in-cp": 2,
            "num-attention-heads": 2,
        },
        {
            **CP2,
            "context-parallel-size": 4,
            "context-parallel-algo": "hybrid_cp_algo",
            "ulysses-degree-in-cp": 2,
        },
    ),
    ("position-embedding-type", {**CP2, "position-embedding-type": "alibi"}, CP2),
    (
        "context-parallel-kv-cache-policy",
        {**CP2, "context-parallel-algo": "kvallgather_cp_algo", "context-parallel-kv-cache-policy": "full"},
        {
            **CP2,
            "context-parallel-algo": "kvallgather_cp_algo",
            "context-parallel-kv-cache-policy": "full",
            "use-flash-attn": True,
        },
    ),
    (
        "use-ulysses-allgather-kv",
        {**CP2, "context-parallel-algo": "ulysses_cp_algo", "use-ulysses-allgather-kv": True},
        {
            **CP2,
            "context-parallel-algo": "ulysses_cp_algo",
            "use-ulysses-allgather-kv": True,
            "group-query-attention": True,
        },
    ),
    ("noop-layers", {"noop-layers": "2"}, {"noop-layers": "1"}),
    ("noop-layers", {"noop-layers": "0,7"}, {"noop-layers": "0,1"}),
    (
        "recompute-in-bubble",
        {**VPP, "recompute-in-bubble": True, "swap-attention": True},
        {**VPP, "recompute-in-bubble": True},
    ),
    (
        "recompute-in-bubble",
        {**VPP, "recompute-in-bubble": True, "no-align-grad-reduce": True},
        {**VPP, "recompute-in-bubble": True},
    ),
]


@pytest.mark.parametrize(("key", "bad", "good"), SECOND_RULES)
def test_a_second_26_1_0_rule_of_a_key_refuses_its_case_and_passes_the_fix(
    key: str, bad: dict[str, Any], good: dict[str, Any]
) -> None:
    assert key in _mine(bad)
    assert key not in _mine(good)
    assert _mine(bad, "2.1.0") == []


def test_the_cp_rules_read_26_1_0_s_default_algorithm_megatron_cp_algo() -> None:
    """Without context-parallel-algo 26.1.0 runs ring attention: windows are checked, heads not split."""
    assert _mine({**CP2, "cp-window-size": 2}) == ["cp-window-size"]
    assert _mine({**CP2, "num-attention-heads": 2}) == []


def test_recompute_in_advance_past_a_virtual_stage_of_one_layer_passes_26_1_0() -> None:
    """26.1.0's ripipe feature turns recompute-in-advance off past num-layers-per-virtual-pipeline-stage 1
    (its judge accepts it); 2.1.0 refuses it."""
    flags = {
        "pipeline-model-parallel-size": 2,
        "num-layers": 8,
        "num-layers-per-virtual-pipeline-stage": 2,
        "recompute-in-advance": True,
        "recompute-num-layers": 1,
    }
    assert "recompute-in-advance" not in [r.key for r in broken_rules({**BASE, **flags}, RELEASES["26.1.0"])]
    assert "recompute-in-advance" in [r.key for r in broken_rules({**BASE, **flags}, RELEASES["2.1.0"])]


# -- pipeline-model-parallel-layout's grammar
@pytest.mark.parametrize(
    ("text", "stages"),
    [
        ("EttL", ["EttL"]),
        ("Et|tL", ["Et", "tL"]),
        ("E|(t|)*2,L", ["E", "t", "t", "L"]),
        ("E,t*3|m|L", ["Ettt", "m", "L"]),
        ("(|E)*2", ["", "E", "E"]),
        ("", [""]),
    ],
)
def test_a_layout_text_reads_as_its_stages(text: str, stages: list[str]) -> None:
    assert shard.layout_stages(text) == stages


@pytest.mark.parametrize("text", ["1", "EtxL", "E|(t|)*2|L)", "e|L", "Et(L", "E t"])
def test_a_layout_with_other_characters_is_refused(text: str) -> None:
    assert shard.layout_stages(text) is None
    assert "pipeline-model-parallel-layout" in _mine({"pipeline-model-parallel-layout": text})


STAGE = st.text(alphabet="ELtm", max_size=4)


def _render(stage: str, draw_repeat: bool) -> str:
    """A stage written with a cosmetic comma and, when it repeats a letter, `x*n`."""
    if draw_repeat and len(stage) >= 2 and len(set(stage)) == 1:
        return f"{stage[0]}*{len(stage)}"
    return ",".join(stage) if stage else stage


@given(st.lists(STAGE, min_size=1, max_size=6), st.booleans())
def test_any_layout_written_in_the_grammar_reads_back_as_its_stages(stages: list[str], repeat: bool) -> None:
    text = "|".join(_render(s, repeat) for s in stages)
    assert shard.layout_stages(text) == stages


@given(st.lists(STAGE, min_size=1, max_size=4), st.integers(min_value=1, max_value=4))
def test_a_repeated_group_reads_as_the_group_repeated(stages: list[str], times: int) -> None:
    group = "|".join(stages) + "|"
    if not any(stages):
        group = "E" + group  # `(...)` needs at least one character inside
        stages = ["E" + stages[0], *stages[1:]]
    assert shard.layout_stages(f"({group})*{times}L") == (stages * times) + ["L"]


@given(st.text(min_size=1, max_size=8), st.characters(blacklist_characters="ELtm|(),*0123456789"))
def test_a_character_outside_the_grammar_is_refused_wherever_it_stands(text: str, bad: str) -> None:
    assert shard.layout_stages(text + bad) is None


def test_the_layout_rule_counts_stages_against_pp_and_the_virtual_pipeline() -> None:
    pp2 = {"pipeline-model-parallel-size": 2}
    assert _mine({**pp2, "pipeline-model-parallel-layout": "Et|tL"}) == []
    assert _mine({**pp2, "pipeline-model-parallel-layout": "Et|t|L"}) == ["pipeline-model-parallel-layout"]
    assert _mine({**pp2, "pipeline-model-parallel-layout": "E|t|t|L"}) == []
    with_osrc = {**pp2, "pipeline-model-parallel-layout": "E|t|t|L", "optimize-send-recv-comm": True}
    assert _mine(with_osrc) == ["pipeline-model-parallel-layout"]
    no_overlap = {**pp2, "pipeline-model-parallel-layout": "E|t|t|L", "no-overlap-p2p-communication": True}
    assert _mine(no_overlap) == ["pipeline-model-parallel-layout"]
    assert _mine({"pipeline-model-parallel-layout": "E|tt|L|"}) == ["pipeline-model-parallel-layout"]
    assert _mine({"pipeline-model-parallel-layout": 1}) == ["pipeline-model-parallel-layout"]


# -- pipeline-num-transformer-layers
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("[[1],[1]]", [[1], [1]]),
        ("[[1,1]*2]", [[1, 1], [1, 1]]),
        ("[[2]*3]", [[2], [2], [2]]),
        ("[[-1],[1]]", [[1], [1]]),
        ("[1,1]", [1, 1]),
        ("", []),
    ],
)
def test_the_stage_layers_read_as_the_feature_reads_them(text: str, value: Any) -> None:
    assert shard.stage_layers(text) == value


@pytest.mark.parametrize(
    ("flags", "broken"),
    [
        ({"pipeline-model-parallel-size": 2, "pipeline-num-transformer-layers": "[[1],[1]]"}, False),
        ({"pipeline-num-transformer-layers": "[[1],[1]]"}, True),
        ({"pipeline-model-parallel-size": 2, "pipeline-num-transformer-layers": "[[1,0],[1]]"}, True),
        ({"pipeline-model-parallel-size": 2, "pipeline-num-transformer-layers": "[1,1]"}, True),
        ({"pipeline-model-parallel-size": 2, "pipeline-num-transformer-layers": "[[2],[1]]"}, True),
        ({**VPP, "pipeline-num-transformer-layers": "[[1],[1]]"}, True),
        ({**VPP, "pipeline-num-transformer-layers": "[[1,1],[1,1]]"}, False),
        ({"pipeline-num-transformer-layers": "[[2]]", "noop-layers": "1"}, True),
        ({"pipeline-num-transformer-layers": "[[*]]"}, True),
    ],
)
def test_the_stage_layers_rule(flags: dict[str, Any], broken: bool) -> None:
    assert ("pipeline-num-transformer-layers" in _mine(flags)) is broken


@pytest.mark.parametrize(
    "flags",
    [
        {"pipeline-model-parallel-size": 0, "pipeline-model-parallel-layout": "EttL"},
        {**VPP, "num-layers-per-virtual-pipeline-stage": 0, "pipeline-num-transformer-layers": "[[1],[1]]"},
        {**CP2, "tensor-model-parallel-size": 0, "context-parallel-algo": "ulysses_cp_algo"},
        {**CP2, "context-parallel-algo": "hybrid_cp_algo", "ulysses-degree-in-cp": 0},
        {**CP2, "cp-window-size": 0},
    ],
)
def test_a_zero_divisor_is_no_crash(flags: dict[str, Any]) -> None:
    """A ZeroDivisionError would escape broken_rules, which skips only TypeError / ValueError."""
    view = Flags({**BASE, **flags})
    for rule in shard.RULES:
        rule.broken(view)
