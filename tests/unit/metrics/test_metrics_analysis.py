"""Throughput, convergence, compare, summary, step table, EMA, peaks."""

from __future__ import annotations

import math

import pytest

from ascendfactory.metrics import (
    Record,
    StepTable,
    check_convergence,
    compare,
    ema,
    flops_per_token,
    peak_for,
    summarize,
    throughput_llamafactory,
    throughput_mindspeed,
    throughput_mindspeed_rl,
    throughput_verl,
)
from ascendfactory.metrics.summary import parse_steps


def mega(step: int, *, ms: float = 1000.0, gbs: float = 8, loss: float = 2.0, **extra: float) -> Record:
    return Record(
        step=step,
        metrics={"elapsed time per iteration (ms)": ms, "global batch size": gbs, "lm loss": loss, **extra},
    )


def test_mindspeed_formula_and_warmup_window():
    recs = [mega(1, ms=9000.0)] + [mega(i, ms=1000.0) for i in range(2, 21)]
    tp = throughput_mindspeed(recs, seq_length=4096, devices=8)
    assert tp.steps_skipped == [1, 2] and tp.steps_used == list(range(3, 21))  # 10% of 20 = 2 skipped
    assert tp.value == pytest.approx(8 * 4096 / (8 * 1000.0) * 1000)
    assert throughput_mindspeed(recs, seq_length=4096, devices=8, skip_first=0).value < tp.value


def test_mindspeed_tflops_and_mfu():
    recs = [mega(i, **{"throughput per GPU (TFLOP/s/GPU)": 150.0}) for i in range(1, 5)]
    tp = throughput_mindspeed(recs, seq_length=4096, devices=8, peak_tflops=300.0)
    assert tp.details["tflops_per_device"] == 150.0 and tp.details["mfu"] == 0.5
    est = throughput_mindspeed(
        [mega(i) for i in range(1, 5)], seq_length=4096, devices=8, flops_per_token=6e9, peak_tflops=313.0
    )
    assert est.details["tflops_per_device"] == pytest.approx(4096 * 6e9 / 1e12)
    assert est.details["mfu"] == pytest.approx(4096 * 6e9 / 1e12 / 313.0)


def test_mindspeed_without_seq_length_or_devices_says_so():
    tp = throughput_mindspeed([mega(1), mega(2)], seq_length=None, devices=8)
    assert tp.value is None and "--seq-length" in tp.note
    job = throughput_mindspeed([mega(1), mega(2)], seq_length=1024, devices=None)
    assert job.unit == "tokens/s (job)" and job.value == pytest.approx(8 * 1024)


def test_llamafactory_middle_window_and_resume():
    recs = [
        Record(step=s, metrics={"loss": 1.0, "total_tokens": 1000.0 * s}, wall_time=2.0 * s)
        for s in range(1, 21)
    ]
    tp = throughput_llamafactory(recs, devices=2)
    assert tp.value == pytest.approx(1000.0 / 2.0 / 2)
    assert tp.steps_used[0] == 3 and tp.steps_used[-1] == 18  # 10% trimmed from both ends
    resumed = recs[:10] + [
        Record(step=s, metrics={"loss": 1.0, "total_tokens": 500.0 * s}, wall_time=1.0 * (s - 5))
        for s in range(6, 16)
    ]
    tp2 = throughput_llamafactory(resumed, devices=1, skip_first=0)
    assert tp2.value == pytest.approx(500.0)


def test_llamafactory_one_step_after_a_resume_gives_no_throughput():
    """Rerunning a finished run trained one step: total_tokens counts from the start, elapsed from the
    resume, which made a 15x figure."""
    first = [
        Record(step=s, metrics={"loss": 1.0, "total_tokens": 384.0 * s}, wall_time=0.3 * s)
        for s in range(1, 21)
    ]
    again = [Record(step=21, metrics={"loss": 1.0, "total_tokens": 384.0 * 21}, wall_time=0.4)]
    tp = throughput_llamafactory(first + again, devices=1)
    assert tp.value is None and "too few steps" in tp.note


def test_rl_throughputs():
    verl = [
        Record(step=i, metrics={"perf/throughput": float(v)}) for i, v in enumerate([10, 100, 100, 100], 1)
    ]
    assert throughput_verl(verl, skip_first=1).value == 100.0
    rl = [
        Record(step=i, metrics={"e2e_tps": 10.0 * i, "update_tps": 5.0, "vllm_tps": 7.0}) for i in range(1, 4)
    ]
    got = {t.metric: t.value for t in throughput_mindspeed_rl(rl, skip_first=0)}
    assert got == {"e2e_tps": 20.0, "update_tps": 5.0, "vllm_tps": 7.0}


def test_convergence_verdicts_spikes_and_nan():
    falling = [mega(i, loss=3.0 * math.exp(-i / 20)) for i in range(1, 61)]
    assert check_convergence(falling).verdict == "converging"
    rising = [mega(i, loss=1.0 + 0.05 * i) for i in range(1, 41)]
    rep = check_convergence(rising)
    assert rep.verdict == "diverging" and not rep.ok
    flat = [mega(i, loss=2.0 + (0.001 if i % 2 else -0.001)) for i in range(1, 41)]
    assert check_convergence(flat).verdict == "flat"
    spiky = [mega(i, loss=2.0 - 0.01 * i) for i in range(1, 41)]
    spiky[25] = mega(26, loss=9.0)
    spiky[30] = mega(
        31, loss=float("nan"), **{"number of nan iterations": 1, "number of skipped iterations": 2}
    )
    rep = check_convergence(spiky)
    assert [int(s["step"]) for s in rep.spikes] == [26]
    assert rep.nan_steps == [31] and rep.nan_iterations == 1 and rep.skipped_iterations == 2 and not rep.ok
    reward = [
        Record(step=i, metrics={"critic/score/mean": 0.1 + 0.01 * i, "actor/pg_loss": 0.0})
        for i in range(1, 30)
    ]
    rep = check_convergence(reward)
    assert rep.metric == "critic/score/mean" and rep.direction == "up" and rep.verdict == "converging"
    assert check_convergence([mega(1)]).verdict == "insufficient data"


def test_compare_alignment_and_errors():
    a = [mega(i, loss=2.0) for i in range(1, 11)]
    b = [mega(i, loss=2.0 * (1.01 if i <= 8 else 1.05)) for i in range(2, 13)]
    cmp = compare(a, b)
    st = cmp.stats()
    assert cmp.metric == "lm loss" and cmp.steps == list(range(2, 11))
    assert st["only_in_a"] == 1 and st["only_in_b"] == 2
    assert st["max_abs_error"] == pytest.approx(0.1) and st["max_rel_error"] == pytest.approx(0.05)
    assert st["within_tolerance"] == pytest.approx(7 / 9)
    assert cmp.diff[0] == pytest.approx(-0.02) and cmp.relative[0] == pytest.approx(-0.01)


def test_summary_stats_step_range_and_checkpoints():
    recs = [mega(i, loss=float(10 - i)) for i in range(1, 10)]
    recs.append(Record(step=5, kind="checkpoint", note="/ckpt"))
    s = summarize(recs, steps=(3, 6), seq_length=1024, devices=1)
    assert s.steps == [3, 6] and s.num_steps == 4
    st = s.stats["lm loss"]
    assert (st.count, st.min, st.max, st.mean, st.first, st.last) == (4, 4.0, 7.0, 5.5, 7.0, 4.0)
    assert s.checkpoints == [5] and s.throughput[0].metric == "tokens/s/p"
    assert parse_steps("10:20") == (10, 20) and parse_steps(":5") == (None, 5) and parse_steps("7") == (7, 7)
    assert parse_steps(None) is None


def test_step_table_resume_truncates_later_wins_and_padding_vs_logged_nan():
    t = StepTable()
    for s in (1, 2, 3, 4):
        t.add(Record(step=s, metrics={"loss": float(s)}))
    t.add(Record(step=3, metrics={"loss": 30.0, "new": float("nan")}))
    t.add(Record(step=4, metrics={"loss": 40.0}))
    assert list(t.steps) == [1, 2, 3, 4] and t.series("loss")[1] == [1.0, 2.0, 30.0, 40.0]
    steps, values = t.series("new")
    assert steps == [3] and math.isnan(values[0])  # a logged NaN is kept, padding is not


def test_ema_debiased_and_peaks():
    assert ema([1.0, 1.0, 1.0], 0.6) == pytest.approx([1.0, 1.0, 1.0])  # debiased: no ramp from 0
    assert ema([0.0, 10.0], 0.5)[1] == pytest.approx((0.5 * 0 * 0.5 + 0.5 * 10) / 0.75)
    assert ema([1.0, 2.0], 0.0) == [1.0, 2.0]
    with pytest.raises(ValueError):
        ema([1.0], 1.0)
    assert peak_for("Ascend910B3").bf16_tflops == 313.0 and peak_for("910b").name == "ascend910b3"
    assert peak_for("H100").bf16_tflops == 989.0 and peak_for("A100").bf16_tflops == 312.0
    assert peak_for("tpu-v9") is None
    assert flops_per_token(7e9) == 4.2e10
    assert flops_per_token(1e9, num_layers=2, hidden_size=64, seq_length=128) == 6e9 + 12 * 2 * 64 * 128
