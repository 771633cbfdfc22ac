"""Our reading of `pipeline-model-parallel-layout` (backends/mindspeed_llm/rules_26_mindspeed_pp_cp.py
layout_stages) against MindSpeed 26.1.0's own parser, on generated layout texts (opt-in: the 26.1.0
checkout of tests/diffval/backends.py, `AF_MINDSPEED_26_DIR`).

The parser is MindSpeed 26.1.0_core_r0.12.1
mindspeed/core/pipeline_parallel/pipeline_model_parallel_layout/layout.py
PipelineParallelLayerLayout.parse_str_to_list, which the layout feature's pre_validate_args runs on the
flag: it refuses a text (AssertionError) exactly when we read None, and otherwise yields the stages we read.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.backends.mindspeed_llm.rules_26_mindspeed_pp_cp import layout_stages

pytestmark = pytest.mark.integration

LAYOUT = "mindspeed/core/pipeline_parallel/pipeline_model_parallel_layout/layout.py"
LETTER = {"embedding": "E", "loss": "L", "decoder": "t", "mtp": "m"}


def _parser() -> Any:
    mindspeed = os.environ.get("AF_MINDSPEED_26_DIR")
    if not mindspeed or not Path(mindspeed, LAYOUT).is_file():
        pytest.skip("set AF_MINDSPEED_26_DIR to the MindSpeed 26.1.0_core_r0.12.1 checkout")
    # layout.py imports megatron.core's parallel_state, which the parser never uses: an empty module stands in
    # while it loads, so no megatron package stays imported in this process
    names = ("megatron", "megatron.core", "megatron.core.parallel_state")
    saved = {n: sys.modules.get(n) for n in names}
    stand_in = {n: types.ModuleType(n) for n in names}
    stand_in["megatron.core"].parallel_state = stand_in["megatron.core.parallel_state"]  # type: ignore[attr-defined]
    sys.modules.update(stand_in)
    try:
        spec = importlib.util.spec_from_file_location("mindspeed_26_layout", Path(mindspeed, LAYOUT))
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return module.PipelineParallelLayerLayout.parse_str_to_list


PARSE: list[Any] = []


def theirs(text: str) -> list[str] | None:
    if not PARSE:
        PARSE.append(_parser())
    try:
        stages = PARSE[0](text)
    except AssertionError:
        return None
    return ["".join(LETTER[layer.name] for layer in stage) for stage in stages]


# the grammar's characters, a few others, and small repeat counts (a count of 3 digits is a big layout)
TEXT = st.text(alphabet="ELtm|(),*0123xe L", max_size=14)


@settings(max_examples=400, deadline=None)
@given(TEXT)
def test_our_layout_reading_agrees_with_mindspeed_s_parser(text: str) -> None:
    assert layout_stages(text) == theirs(text)


@pytest.mark.parametrize("text", ["1", "EttL", "Et|tL", "E|(t|)*2,L", "(|E)*2", "E,t*3|m|L", "Et(L", ""])
def test_the_named_layouts_agree(text: str) -> None:
    assert layout_stages(text) == theirs(text)
