"""pydantic errors -> house-style Problems (`config/problems.py`)."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from ascendfactory.config.problems import from_validation_error, known_keys, validate_with_defaults
from ascendfactory.config.schema import ExperimentConfig
from ascendfactory.errors import Problem


def _even(value: object) -> object:
    if isinstance(value, int) and value % 2:
        raise PydanticCustomError("even", "must be even (got {got})", {"got": value, "fix": "set {key}: 2"})
    return value


class Leaf(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    learning_rate: float = Field(1.0, alias="learning-rate", gt=0)
    steps: Annotated[int, BeforeValidator(_even)] = 2


class Branch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    mode: Literal["a", "b"] = "a"
    leaf: Leaf | None = None
    leaves: dict[str, Leaf] = Field(default_factory=dict)
    items: list[Leaf] = Field(default_factory=list)
    count: int = Field(0, ge=0)


def problems(data: dict, **kw) -> list[Problem]:
    with pytest.raises(ValidationError) as e:
        Branch.model_validate(data)
    return from_validation_error(e.value, source_of=lambda key: "exp.yaml", model=Branch, **kw)


def test_unknown_key_in_a_nested_model_suggests_the_alias_and_lists_the_model_keys():
    (p,) = problems({"name": "x", "leaf": {"learning_rat": 2}})
    assert p == Problem(
        key="leaf.learning_rat",
        message="unknown key (did you mean: learning-rate?)",
        fix="remove it, or use one of: learning-rate, steps",
        source="exp.yaml",
    )


@pytest.mark.parametrize(
    "data, key",
    [
        ({"name": "x", "leaves": {"one": {"stepz": 2}}}, "leaves.one.stepz"),  # dict[str, Model]
        ({"name": "x", "items": [{"stepz": 2}]}, "items.0.stepz"),  # list[Model]
    ],
)
def test_unknown_key_below_a_container_of_models(data, key):
    (p,) = problems(data)
    assert (p.key, p.message, p.fix) == (
        key,
        "unknown key (did you mean: steps?)",
        "remove it, or use one of: learning-rate, steps",
    )


def test_top_level_unknown_key_with_its_own_message_and_prefix():
    found = problems(
        {"name": "x", "seed": 1, "nam": 2}, prefix="top.", elsewhere={"seed": ("elsewhere", "move")}
    )
    assert [(p.key, p.message, p.fix) for p in found] == [
        ("top.seed", "elsewhere", "move"),
        (
            "top.nam",
            "unknown key (did you mean: name?)",
            "remove it, or use one of: count, items, leaf, leaves, mode, name",
        ),
    ]


def test_missing_choice_bound_and_validator_fix():
    found = problems(
        {"mode": "c", "count": -1, "leaf": {"steps": 3, "learning-rate": 0}},
        bound_notes={"count": " (0 = none)"},
    )
    assert [(p.key, p.message, p.fix) for p in found] == [
        (
            "name",
            "required key is missing",
            "add `name: ...` (see `ascendfactory-cli config` for a commented template)",
        ),
        ("mode", "Input should be 'a' or 'b' (got 'c')", "use one of 'a' or 'b'"),
        (
            "leaf.learning-rate",
            "Input should be greater than 0 (got 0)",
            "set leaf.learning-rate above 0.0",
        ),
        ("leaf.steps", "must be even (got 3)", "set leaf.steps: 2"),
        ("count", "Input should be greater than or equal to 0 (got -1)", "set count: 0 or more (0 = none)"),
    ]


def test_source_of_names_each_key():
    (p,) = problems({"name": "x", "count": -1})
    assert p.source == "exp.yaml"
    with pytest.raises(ValidationError) as e:
        Branch.model_validate({"name": "x", "count": -1})
    (p,) = from_validation_error(e.value, source_of=lambda key: f"<{key}>", prefix="a.")
    assert p.source == "<a.count>"


def test_known_keys_walks_the_experiment_schema():
    assert known_keys(ExperimentConfig, []) == list(ExperimentConfig.model_fields)
    assert "NNODES" in known_keys(ExperimentConfig, ["env"])
    assert "on_exceed" in known_keys(ExperimentConfig, ["memory_check"])
    assert "mode" in known_keys(ExperimentConfig, ["report_to", "swanlab"])
    assert known_keys(ExperimentConfig, ["report_to", "nothing"]) == []
    assert known_keys(ExperimentConfig, ["af_model_name"]) == []


def test_validate_with_defaults_reports_and_falls_back():
    found: list[Problem] = []
    leaf = validate_with_defaults(
        Leaf, {"steps": 5, "learning-rate": 0.5}, source_of=lambda key: "f", prefix="s.", problems=found
    )
    assert (leaf.steps, leaf.learning_rate) == (2, 0.5)
    assert [(p.key, p.fix) for p in found] == [("s.steps", "set s.steps: 2")]


def test_validate_with_defaults_without_a_field_given_still_refuses_what_a_strict_model_refuses():
    class Open(BaseModel):
        model_config = ConfigDict(extra="allow")
        steps: Annotated[int, BeforeValidator(_even)] = 2

    found: list[Problem] = []
    typed = validate_with_defaults(Open, {"other": 3}, source_of=lambda key: "f", prefix="", problems=found)
    assert (typed.steps, typed.model_extra, found) == (2, {"other": 3}, [])
    validate_with_defaults(Leaf, {"other": 3}, source_of=lambda key: "f", prefix="s.", problems=found)
    assert [(p.key, p.message) for p in found] == [("s.other", "unknown key")]
