"""The GRPO trainer's trackers from MindSpeed-RL's switches: the specs, and a real offline W&B run."""

from __future__ import annotations

import pytest

from ascendfactory.engine.rl import trackers
from ascendfactory.engine.rl.subset import RL_HONOURED

RL = {k: default for k, (default, _) in RL_HONOURED.items()}


def test_nothing_switched_on_opens_nothing():
    assert trackers.specs(RL, save="/s", environ={"WANDB_RUN_ID": "x"}) == []


def test_wandb_names_its_folder_and_continues_the_runners_run_id():
    rl = {**RL, "use_wandb": True, "wandb_project": "p", "wandb_exp_name": "e"}
    ((spec, run_id),) = trackers.specs(rl, save="/s", environ={"WANDB_RUN_ID": "abc"})
    assert (spec.name, spec.project, spec.run_name, spec.location, run_id) == (
        "wandb",
        "p",
        "e",
        "/s/wandb",
        "abc",
    )
    rl["wandb_save_dir"] = "/w"
    ((spec, run_id),) = trackers.specs(rl, save="/s", environ={})
    assert spec.location == "/w" and run_id is None


def test_swanlab_defaults_come_from_its_own_variables():
    rl = {**RL, "use_swanlab": True, "swanlab_project": "p"}
    env = {"SWANLAB_MODE": "offline", "SWANLAB_LOG_DIR": "/l"}
    ((spec, _),) = trackers.specs(rl, save=None, environ=env)
    assert (spec.run_name, spec.mode, spec.location) == ("p", "offline", "/l")
    rl.update(swanlab_mode="local", swanlab_save_dir="/d", swanlab_exp_name="x")
    ((spec, _),) = trackers.specs(rl, save=None, environ=env)
    assert (spec.run_name, spec.mode, spec.location) == ("x", "local", "/d")


def test_a_tracker_that_cannot_open_is_warned_about_and_training_goes_on(tmp_path, monkeypatch):
    """A W&B folder that is a file: the sink is not opened, one warning, the rest works (no raise)."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    blocker = tmp_path / "file"
    blocker.write_text("")
    rl = {**RL, "use_wandb": True, "wandb_project": "p", "wandb_save_dir": str(blocker)}
    warnings: list[str] = []
    sinks = trackers.open_sinks(rl, save=None, params={"a": 1}, warn=warnings.append)
    assert not sinks and len(warnings) == 1 and "wandb tracker not opened" in warnings[0]
    sinks.log_metrics({"grpo/score/mean": 1.0}, 1)
    sinks.close()
