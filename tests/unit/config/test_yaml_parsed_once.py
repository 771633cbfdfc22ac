"""`yamlio.loads` parses a text once per process and hands out copies: each call's tree is the one a fresh
parse gives, and changing it changes no later call's."""

from __future__ import annotations

import pytest
import yaml

from ascendfactory.config import yamlio
from ascendfactory.errors import ConfigError

TEXT = """
base: &b {lr: 1e-5, layers: [1, 2]}
one: *b
two: {<<: *b, lr: 2}
when: 2024-01-02
"""


def test_each_call_gets_its_own_copy_of_the_same_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    parses = []
    real = yaml.load
    monkeypatch.setattr(yamlio.yaml, "load", lambda *a, **k: parses.append(1) or real(*a, **k))
    monkeypatch.setattr(yamlio, "_PARSED", {})
    first = yamlio.loads(TEXT)
    first["base"]["layers"].append(3)
    first["two"]["lr"] = 9
    second = yamlio.loads(TEXT)
    assert len(parses) == 1
    assert second == real(TEXT, Loader=yamlio._Loader)  # noqa: S506 - derives from SafeLoader
    assert second["base"] == {"lr": 1e-5, "layers": [1, 2]} and second["two"]["lr"] == 2
    assert second["one"] is second["base"]  # an alias stays the same object within one tree, as parsed


def test_a_text_that_fails_fails_each_time_naming_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlio, "_PARSED", {})
    for source in ("a.yaml", "b.yaml"):
        with pytest.raises(ConfigError) as e:
            yamlio.loads("x: 1\nx: 2\n", source=source)
        assert e.value.problems[0].source == source
    assert yamlio._PARSED == {}


def test_the_store_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlio, "_PARSED", {})
    monkeypatch.setattr(yamlio, "_PARSED_MAX", 3)
    for i in range(7):
        assert yamlio.loads(f"k: {i}\n") == {"k": i}
        assert len(yamlio._PARSED) <= 3
