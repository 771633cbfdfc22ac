"""Tracker clients go into a framework's environment only when AF_TRACKERS asks (install.sh --dev: mlflow)."""

from __future__ import annotations

import pytest

from ascendfactory.backends.llamafactory import environment
from ascendfactory.errors import ConfigError


def test_no_tracker_client_unless_asked(tmp_path):
    steps = environment.install_steps({"AF_ENVS_DIR": str(tmp_path)})
    assert not any("client" in s.what for s in steps)


def test_af_trackers_installs_each_client_into_the_environment(tmp_path):
    steps = environment.install_steps({"AF_ENVS_DIR": str(tmp_path), "AF_TRACKERS": "mlflow, wandb"})
    extra = [s for s in steps if "client" in s.what]
    assert [s.argv[0] for s in extra] == [str(tmp_path / "llamafactory" / "bin" / "python")] * 2
    assert extra[0].argv[-3:] == ("mlflow-skinny>=2.9", "sqlalchemy>=2.0", "alembic>=1.12")
    assert extra[1].argv[-1] == "wandb>=0.16" and extra[0].skip_if_exists is None  # pip keeps what is there


def test_an_unknown_tracker_is_named_with_the_choices(tmp_path):
    with pytest.raises(ConfigError) as e:
        environment.install_steps({"AF_ENVS_DIR": str(tmp_path), "AF_TRACKERS": "mlflow,neptune"})
    (p,) = e.value.problems
    assert p.key == "AF_TRACKERS" and "neptune" in p.message and "mlflow, wandb, swanlab" in p.fix


def test_install_sh_dev_asks_for_mlflow():
    from tests.conftest import REPO

    text = (REPO / "install.sh").read_text()
    assert 'AF_TRACKERS="${AF_TRACKERS:-mlflow}"' in text and "export AF_TRACKERS" in text
