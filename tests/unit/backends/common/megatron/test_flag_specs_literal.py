"""The shipped flag lists' defaults read without `ast` give exactly what `ast.literal_eval` gives
(`flag_specs._literal`, for MindSpeed-LLM's and MindSpeed-MM's argument lists)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ascendfactory.backends.common.megatron import flag_specs
from ascendfactory.backends.mindspeed_llm import keys as llm_keys
from ascendfactory.backends.mindspeed_mm import keys as mm_keys

LISTS = sorted(Path(llm_keys.__file__).parent.glob("*.txt")) + sorted(
    Path(mm_keys.__file__).parent.glob("training_*.txt")
)


@pytest.mark.parametrize("path", LISTS, ids=lambda p: p.name)
def test_every_default_reads_as_literal_eval_reads_it(path: Path) -> None:
    texts = [
        (line.split("\t") + ["", "", "", "None"])[4]
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert texts
    for text in texts:
        want = ast.literal_eval(text) if text.strip() else flag_specs.COMPUTED
        got = flag_specs._literal(text)
        assert type(got) is type(want) and got == want, text


@pytest.mark.parametrize(
    "text", ["None", "True", "False", "0", "-1", "42", "-0", "01", " 1", "1.0", "1e-5", "[]", "'x'"]
)
def test_edge_texts(text: str) -> None:
    try:
        want = ast.literal_eval(text)
    except SyntaxError:
        with pytest.raises(SyntaxError):
            flag_specs._literal(text)
        return
    got = flag_specs._literal(text)
    assert type(got) is type(want) and got == want
