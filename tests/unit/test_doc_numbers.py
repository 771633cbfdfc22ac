"""The numbers the shipped yaml headers and the docs (README.md, docs/) both state agree (times, R1 share)."""

from __future__ import annotations

import re

from ascendfactory.engine.data.demo_data import GRPO_FORMAT_SHARE
from tests.conftest import REPO

WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
README = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))])


def _header(name: str) -> str:
    lines = (REPO / "cfgs" / name).read_text().splitlines()
    return "\n".join(line for line in lines if line.startswith("#"))


def _minutes(text: str, pattern: str) -> str:
    found = re.search(pattern + r"[^\n]*?(~[\d-]+ (?:min|s)|about a minute)", text)
    assert found, pattern
    return found.group(1).replace("about a minute", "~1 min")


def test_the_r1_share_is_the_one_the_data_is_made_with():
    share = round(1 / GRPO_FORMAT_SHARE)
    header = re.search(r"one response in (\w+)", _header("quickstart_grpo_sft.yaml")).group(1)
    readme = re.search(r"one time in (\w+) in the R1 format", README).group(1)
    assert WORDS[header] == WORDS[readme] == share


def test_step_times_agree_between_the_headers_and_the_readme():
    warmup = _minutes(README, r"quickstart_grpo_sft\.yaml +#")
    assert _minutes(_header("quickstart_grpo_sft.yaml"), "warm-up SFT") == warmup
    assert _minutes(_header("quickstart_grpo.yaml"), "step 1: the warm-up SFT") == warmup
    grpo = _minutes(README, r"quickstart_grpo\.yaml +#")
    assert _minutes(_header("quickstart_grpo.yaml"), "step 2 of 2") == grpo
    install = _minutes(README, r"sh install\.sh llamafactory +#")
    assert _minutes(_header("quickstart_llamafactory.yaml"), r"sh install\.sh llamafactory") == install
