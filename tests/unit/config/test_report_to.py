"""`report_to`: the short and long forms, credentials refused, and every tracker's offline default."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from ascendfactory.config.report_to import ReportTo, tracker_specs
from ascendfactory.trackers import tracker_names

TRACKERS = tuple(tracker_names())


def specs(value, **kw):
    return {
        s.name: s
        for s in tracker_specs(
            ReportTo.model_validate(value), output_dir="/o", model_name="m", exp_name="e", **kw
        )
    }


def test_short_form_gets_every_offline_default():
    got = specs(["swanlab", "wandb", "mlflow", "tensorboard"])
    assert list(got) == list(TRACKERS)  # report order, whatever the order written
    assert got["mlflow"].location == "sqlite:////o/trackers/mlflow/mlflow.db"
    assert got["mlflow"].artifacts == "/o/trackers/mlflow/artifacts"
    assert (got["wandb"].mode, got["wandb"].location) == ("offline", "/o/trackers")
    assert (got["swanlab"].mode, got["swanlab"].location) == ("local", "/o/trackers/swanlog")
    assert got["tensorboard"].location == "/o/tensorboard"
    assert {(s.project, s.run_name) for s in got.values()} == {("m", "e")}


def test_long_form_settings_and_shared_names():
    got = specs(
        {
            "project": "team",
            "run_name": "r1",
            "mlflow": {"tracking_uri": "http://mlflow:5000", "project": "exp"},
            "wandb": {"mode": "online", "entity": "lab"},
            "tensorboard": None,
        }
    )
    assert (got["mlflow"].location, got["mlflow"].project, got["mlflow"].run_name) == (
        "http://mlflow:5000",
        "exp",
        "r1",
    )
    assert (got["wandb"].mode, got["wandb"].entity, got["wandb"].project) == ("online", "lab", "team")
    assert "tensorboard" in got and "swanlab" not in got


def test_the_tensorboard_key_gives_its_folder():
    assert specs(["tensorboard"], tensorboard_dir="/tb")["tensorboard"].location == "/tb"


@pytest.mark.parametrize(
    "value,words",
    [
        ({"wandb": {"api_key": "x"}}, ["credentials are read from the environment", "WANDB_API_KEY"]),
        ({"mlflow": {"token": "x"}}, ["MLFLOW_TRACKING_TOKEN"]),
        ({"swanlab": {"password": "x"}}, ["SWANLAB_API_KEY"]),
        (["mlfow"], ["unknown tracker", "tensorboard, mlflow, wandb, swanlab"]),
        ({"wandb": {"mode": "cloud"}}, ["offline", "online"]),
        ({"neptune": {}}, ["neptune"]),
    ],
)
def test_bad_settings_are_refused_with_the_fix(value, words):
    with pytest.raises(ValidationError) as e:
        ReportTo.model_validate(value)
    text = str(e.value)
    assert all(w in text for w in words), text


@given(st.lists(st.sampled_from(TRACKERS)))
def test_any_list_of_tracker_names_gives_each_once_in_report_order(names):
    got = list(specs(names))
    assert got == [t for t in TRACKERS if t in names]


def test_a_credential_in_the_file_is_refused_without_echoing_it(tmp_path):
    from ascendfactory.config.load import load_experiment
    from ascendfactory.errors import ConfigError
    from tests.conftest import REPO

    with pytest.raises(ConfigError) as e:
        load_experiment(REPO / "cfgs" / "quickstart.yaml", ["--report_to={wandb: {api_key: s3cr3t-v4lue}}"])
    text = str(e.value)
    assert "report_to.wandb" in text and "WANDB_API_KEY" in text and "s3cr3t-v4lue" not in text
