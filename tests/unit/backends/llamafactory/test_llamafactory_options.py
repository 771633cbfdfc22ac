"""The llamafactory backend's own options (`backends/llamafactory/config.py`): typed, refused in the house
style, and read by the plan."""

from __future__ import annotations

import pytest

from ascendfactory.errors import ConfigError
from tests.unit.backends.llamafactory.test_llamafactory_plan import plan_for


@pytest.mark.parametrize(
    "override, message, fix",
    [
        (
            "--backend_config.merge_lora=maybe",
            "Input should be a valid boolean (got 'maybe')",
            "write true or false",
        ),
        ("--backend_config.merge_lora=1", "Input should be a valid boolean (got 1)", "write true or false"),
        (
            "--backend_config.merge=5",
            "Input should be a valid dictionary (got 5)",
            "write a mapping of key: value",
        ),
        (
            "--backend_config.env_dir=5",
            "Input should be a valid string (got 5)",
            "write a text (quote it if it looks like a number)",
        ),
    ],
)
def test_a_bad_option_value_is_named_with_a_fix(tmp_path, override, message, fix):
    key = override.split("=")[0].removeprefix("--")
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, override)
    assert [(p.message, p.fix, p.source) for p in e.value.problems if p.key == key] == [
        (message, fix, "command line")
    ]


def test_the_options_reach_the_plan(tmp_path):
    assert "merge" not in [s.name for s in plan_for(tmp_path, "--backend_config.merge_lora=false").steps]
    plan = plan_for(tmp_path, "--backend_config.merge.export_size=2")
    merge_yaml = next(
        text for path, text in plan.files.items() if path.endswith(".yaml") and "export_dir" in text
    )
    assert "export_size: 2" in merge_yaml


def test_an_unknown_option_keeps_its_message(tmp_path):
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, "--backend_config.merj=1")
    (p,) = [p for p in e.value.problems if p.key == "backend_config.merj"]
    assert p.message == "not an option of the llamafactory backend"
    assert p.fix == "use: training, merge_lora, merge, env_dir"
