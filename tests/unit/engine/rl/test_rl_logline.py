"""MindSpeed-RL's per-iteration line: shape, key order, number formats, TPS and the parser round trip."""

from __future__ import annotations

import re

import pytest

from ascendfactory.engine.rl import logline as L
from ascendfactory.metrics.mindspeed_rl import MindSpeedRLParser

TRAINER = {
    "actor/pg_loss": 0.25,
    "timing/update": 0.5,
    "timing/all": 1.5,
    "timing/rule_reward": 0.01,
    "base_acc_rewards/mean": 0.5,
    "actor/lr": 1e-3,
    "timing/rollout": 0.75,
    "timing/non_overlap_adv": 0.0,
}
DATA = {
    "grpo/score/mean": 0.5,
    "response_length/mean": 20.0,
    "response_length/max": 40.0,
    "prompt_length/mean": 50.0,
    "prompt_length/max": 60.0,
}


def test_order_timings_first_then_special_then_alphabetical_then_data():
    keys = list(L.order_metrics(TRAINER, {**DATA, "e2e_tps": 1.0}))
    assert keys[:3] == ["timing/all", "timing/update", "timing/rollout"]
    assert keys[3:5] == ["timing/non_overlap_adv", "timing/rule_reward"]
    assert keys[5:8] == ["actor/lr", "actor/pg_loss", "base_acc_rewards/mean"]
    assert keys[8:] == [*DATA, "e2e_tps"]


def test_line_shape_and_formats_parse_back():
    metrics = L.order_metrics(TRAINER, DATA)
    line = L.format_line(metrics, 3, 40, now=1_700_000_000.25)
    assert re.match(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,250 - INFO - \[2023-11-14 22:13:20\] iteration: 3 / 40 \| "
        r"timing/all : 1\.5000 \| ",
        line,
    )
    assert "actor/lr : 1.000000e-03 | " in line and line.endswith("prompt_length/max : 60.0000 ")
    [record] = MindSpeedRLParser().feed(line)
    assert record.step == 3 and record.total_steps == 40
    assert record.metrics == pytest.approx(metrics)


def test_tps_is_mindspeed_rls_formula():
    kw = dict(gbs=16, n=8, world_size=2, seconds=2.0)
    assert L.tps(DATA, use_max=False, **kw) == pytest.approx((20 + 50) * 16 * 8 / 2 / 2)
    assert L.tps(DATA, use_max=True, **kw) == pytest.approx((40 + 60) * 16 * 8 / 2 / 2)


def test_non_overlap_timings_of_sequential_phases():
    spans = {"rule_reward": (1.0, 2.0), "adv": (2.0, 2.5), "reference_model": (2.5, 3.0)}
    out = L.non_overlap_timings(spans)
    # no old-log-prob pass: the reference's end is the mark; the reference itself ends there
    assert out == {
        "timing/non_overlap_reference_model": 0.0,
        "timing/non_overlap_adv": 0.0,
        "timing/non_overlap_rule_reward": 0.0,
    }
    spans["old_log_p"] = (3.0, 4.0)
    assert L.non_overlap_timings(spans)["timing/non_overlap_reference_model"] == 0.0
