"""`Plan.to_dict` (what `train --dry-run --format json` prints) shows everything the runner acts on: the
policy, the log names and loss keys, the checkpoint marker; it survives json and rebuilds the records."""

from __future__ import annotations

import json

from ascendfactory.plan import (
    CheckpointSpec,
    LogNaming,
    LogSpec,
    Plan,
    RunPolicy,
    ThroughputSpec,
)


def test_to_dict_shows_the_policy_the_log_naming_and_the_checkpoint_marker():
    policy = RunPolicy(
        node_rank=1,
        nnodes=2,
        node_wait_timeout_s=90.5,
        auto_resume=True,
        max_attempts=4,
        backoff_s=2.0,
        unretryable=("bad flag",),
    )
    naming = LogNaming(prefix="m-e", run_log="run_log-R{rank}_WS{world_size}")
    plan = Plan(
        backend="torch",
        exp_name="e",
        model_name="m",
        output_dir="/out",
        logs=LogSpec(
            format="llamafactory",
            naming=naming,
            loss_rank="first",
            throughput=ThroughputSpec("llamafactory"),
            loss_keys=("loss",),
            console_format="hf_console",
        ),
        checkpoints=CheckpointSpec(root="/out/saved", scheme="megatron", retain=2, saved_marker="saved it"),
        policy=policy,
    )
    shown = json.loads(json.dumps(plan.to_dict()))
    got_policy = dict(shown["policy"])
    assert got_policy.pop("collective_timeout_s") == 90
    assert RunPolicy(**{**got_policy, "unretryable": tuple(got_policy["unretryable"])}) == policy
    assert LogNaming(**shown["logs"]["naming"]) == naming
    assert shown["logs"]["loss_keys"] == ["loss"] and shown["logs"]["console_format"] == "hf_console"
    assert shown["checkpoints"]["saved_marker"] == "saved it"


def test_to_dict_leaves_out_an_unset_console_format():
    plan = Plan(
        backend="torch",
        exp_name="e",
        model_name="m",
        output_dir="/out",
        logs=LogSpec(
            format="megatron",
            naming=LogNaming(prefix="p"),
            loss_rank="last",
            throughput=ThroughputSpec("megatron"),
        ),
    )
    shown = plan.to_dict()
    assert "console_format" not in shown["logs"] and shown["logs"]["loss_keys"] == ["lm loss", "loss"]
    assert shown["policy"]["node_wait_timeout_s"] == 1800.0 and shown["checkpoints"] is None
