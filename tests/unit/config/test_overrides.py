import pytest

from ascendfactory.config.overrides import parse_overrides, parse_value
from ascendfactory.config.tree import set_dotted
from ascendfactory.errors import ConfigError


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8", 8),
        ("1e-5", 1e-5),
        ("2.5e-6", 2.5e-6),
        ("true", True),
        ("false", False),
        ("null", None),
        ("hello", "hello"),
        ("[1, 2]", [1, 2]),
        ("[linear_qkv, linear_proj]", ["linear_qkv", "linear_proj"]),
        ("3,5", "3,5"),
        ("'8'", "8"),
    ],
)
def test_values_are_typed_as_yaml_scalars(text, expected):
    assert parse_value(text) == expected


def test_equals_and_space_forms_and_dash_keys():
    got = parse_overrides(["--a.b=1", "--env.NODE_RANK", "2", "--backend_config.training.no-load-optim=true"])
    assert got == [("a.b", 1), ("env.NODE_RANK", 2), ("backend_config.training.no-load-optim", True)]


def test_value_may_contain_equals_sign():
    assert parse_overrides(["--x.y=a=b"]) == [("x.y", "a=b")]


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["lr=1"], "unexpected argument"),
        (["--a.b"], "override has no value"),
        (["--a..b=1"], "malformed key"),
    ],
)
def test_bad_overrides_are_reported(args, fragment):
    with pytest.raises(ConfigError) as e:
        parse_overrides(args)
    assert fragment in str(e.value)


def test_set_dotted_creates_sections_and_refuses_to_descend_into_values():
    tree = {"a": 1}
    set_dotted(tree, "b.c.d", 2)
    assert tree == {"a": 1, "b": {"c": {"d": 2}}}
    with pytest.raises(ConfigError, match="holds a value"):
        set_dotted(tree, "a.x", 3)
