import pytest

from ascendfactory.config.interpolate import resolve
from ascendfactory.errors import ConfigError


def test_dash_keys_and_types():
    tree = {
        "backend_config": {"training": {"tensor-model-parallel-size": 4, "pipeline-model-parallel-size": 2}},
        "out": "converted_weight_TP${backend_config.training.tensor-model-parallel-size}"
        "PP${backend_config.training.pipeline-model-parallel-size}",
        "tp": "${backend_config.training.tensor-model-parallel-size}",
    }
    got = resolve(tree)
    assert got["out"] == "converted_weight_TP4PP2"
    assert got["tp"] == 4 and isinstance(got["tp"], int)


def test_chained_references_resolve_recursively():
    got = resolve({"a": "${b}/x", "b": "${c}/y", "c": "root"})
    assert got["a"] == "root/y/x"


def test_env_references(monkeypatch):
    monkeypatch.setenv("AF_TEST_HOME", "/h")
    got = resolve({"a": "${env:AF_TEST_HOME}/w", "b": "${env:AF_UNSET_VAR_X,dflt}"})
    assert got == {"a": "/h/w", "b": "dflt"}


def test_every_bad_reference_is_reported_at_once():
    with pytest.raises(ConfigError) as e:
        resolve({"a": "${nope.x}", "b": "${c}", "c": "${b}", "d": "${env:AF_UNSET_VAR_Y}"})
    text = str(e.value)
    assert "${nope.x} refers to a key that does not exist" in text
    assert "circular interpolation" in text
    assert "AF_UNSET_VAR_Y is not set" in text


def test_list_items_and_literal_text_are_kept():
    assert resolve({"a": [1, "${b}"], "b": "z", "c": "plain $HOME"}) == {
        "a": [1, "z"],
        "b": "z",
        "c": "plain $HOME",
    }
