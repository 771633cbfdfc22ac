"""Megatron's check_for_nan_in_loss_and_grad: the flag, its fp16 rule, the message, the log interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ascendfactory.engine.train import nan_check
from ascendfactory.engine.train.flags import parse_args

BASE = ["--seq-length", "64", "--train-iters", "2", "--lr", "1e-4", "--tokenizer-name-or-path", "m"]
BASE += ["--data-path", "d"]


@pytest.mark.parametrize(
    ("extra", "on"),
    [
        ([], True),
        (["--no-check-for-nan-in-loss-and-grad"], False),
        (["--fp16"], False),  # dynamic loss scaling: NaN gradients are the scaler's signal
        (["--fp16", "--loss-scale", "1024"], True),
        (["--bf16"], True),
    ],
)
def test_the_flag_is_honoured_with_megatrons_defaults(extra, on):
    args, ignored = parse_args(BASE + extra)
    assert nan_check.enabled(args) is on and ignored == []


def test_empty_microbatches_are_named():
    labels = np.full((4, 8), nan_check.IGNORE_INDEX)
    labels[1, 3] = 7  # micro-batch 2 of 4 (MBS 1) has one label token
    assert nan_check.empty_microbatches(labels, 4) == [1, 3, 4]
    assert nan_check.empty_microbatches(labels, 2) == [2]  # MBS 2: rows 3-4 are micro-batch 2


def test_the_loss_error_names_the_iteration_and_the_fix():
    e = nan_check.loss_error(iteration=7, rank=1, loss=math.nan, empty=[2], num_microbatches=4)
    text = str(e)
    assert text.startswith("iteration 7: found NaN in the loss") and "micro-batch 2 of 4" in text
    assert "--no-check-for-nan-in-loss-and-grad" in text and nan_check.MARKER in text
    assert e.exit_code == 1


def test_the_interval_loss_is_nan_only_when_no_iteration_was_finite():
    from ascendfactory.engine.train.trainer import Interval

    iv = Interval(loss_sum=3.0, loss_count=2)
    assert iv.mean_loss() == 1.5
    iv.nan = 1
    assert iv.mean_loss() == 1.5  # the finite ones; `number of nan iterations` counts the other
    assert math.isnan(Interval(nan=5).mean_loss())  # every iteration NaN: `lm loss: nan`, not dropped
    assert Interval().mean_loss() is None  # nothing computed here: no field (not a made-up 0.0)


def test_a_rank_with_a_finite_loss_names_the_other_rank_as_the_cause():
    e = nan_check.loss_error(iteration=3, rank=0, loss=math.nan, empty=[], num_microbatches=2, elsewhere=True)
    assert "iteration 3: found NaN in the loss" in str(e) and "another rank's loss is" in str(e)


def test_the_fix_follows_the_cause():
    """Empty micro-batches are fixed by a longer sequence; a diverged loss by the learning rate."""
    empty = nan_check.loss_error(iteration=3, rank=0, loss=float("nan"), empty=[2], num_microbatches=4)
    diverged = nan_check.loss_error(iteration=3, rank=0, loss=float("nan"), empty=[], num_microbatches=4)
    assert "raise --seq-length" in str(empty) and "learning rate" not in str(empty).split("fix:")[1]
    assert "lower the learning rate" in str(diverged) and "--seq-length" not in str(diverged)
