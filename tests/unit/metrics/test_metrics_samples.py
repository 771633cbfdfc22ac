"""Every real log sample in tests/data/logs parses to the numbers it contains."""

from __future__ import annotations

import pytest

from ascendfactory.metrics import (
    detect_format,
    parse_file,
    summarize,
    throughput_llamafactory,
    throughput_mindspeed,
    throughput_mindspeed_mm,
)
from tests.conftest import LOGS


def _records(name: str, fmt: str | None = None):
    return list(parse_file(LOGS / name, fmt))


def test_fsdp2_backend_lines():
    recs = _records("mindspeed_llm_fsdp2_backend_docs.txt")
    assert detect_format(LOGS / "mindspeed_llm_fsdp2_backend_docs.txt") == "megatron"
    assert [r.step for r in recs] == [1, 2, 3, 1, 2, 3]
    first = recs[0]
    assert first.total_steps == 2000
    assert first.metrics == {
        "consumed samples": 8,
        "consumed tokens": 32768,
        "elapsed time per iteration (ms)": 10520.60,
        "learning rate": 9.999994e-06,
        "global batch size": 8,
        "lm loss": 1.304194,
        "grad norm": 8.515,
        "max_memory_allocated(GB)": 19.07,
        "max_memory_reserved(GB)": 20.87,
    }
    assert recs[1].wall_time - first.wall_time == 1.0  # 19:28:40 -> 19:28:41
    assert recs[5].metrics["lm loss"] == pytest.approx(2.669216)
    assert recs[5].metrics["elapsed time per iteration (ms)"] == pytest.approx(981.08)


def test_fsdp2_second_block_wins_as_resumed_segment():
    s = summarize(parse_file(LOGS / "mindspeed_llm_fsdp2_backend_docs.txt"))
    assert s.num_steps == 3
    assert s.stats["consumed tokens"].last == 2113  # the finetune block (later) replaced the pretrain one


def test_fsdp2_throughput_from_consumed_tokens_without_seq_length():
    recs = _records("mindspeed_llm_fsdp2_backend_docs.txt")[:3]
    tp = throughput_mindspeed(recs, seq_length=None, devices=8, skip_first=1)
    assert tp.steps_used == [2, 3] and tp.steps_skipped == [1]
    expected = (98304 - 32768) / (1879.90 + 1769.99) * 1000 / 8
    assert tp.value == pytest.approx(expected)


def test_legacy_modellink_wrapped_line():
    recs = _records("mindspeed_llm_modellink_1.0.RC1_legacy_readme.txt")
    assert len(recs) == 1
    m = recs[0].metrics
    assert recs[0].step == 11 and recs[0].total_steps == 50000
    assert m["global batch size"] == 512  # 'gloabl' typo normalised
    assert m["lm loss"] == pytest.approx(13.76514)
    assert m["consumed tokens"] == 11534336
    assert m["elapsed time per iteration (ms)"] == pytest.approx(52728.1)
    assert m["learning rate"] == pytest.approx(1.499e-05)
    assert m["loss scale"] == 65536.0 and m["grad norm"] == pytest.approx(459.628)
    assert m["actual seqlen"] == 2048
    # the two fields after the line break
    assert m["number of skipped iterations"] == 0 and m["number of nan iterations"] == 0
    assert m["samples per second"] == pytest.approx(9.710)
    tp = throughput_mindspeed(recs, seq_length=None, devices=8)  # seq_length from 'actual seqlen'
    assert tp.value == pytest.approx(512 * 2048 / (8 * 52728.1) * 1000)
    assert tp.details["samples_per_s"] == pytest.approx(9.710, rel=1e-3)  # matches the logged value


def test_mindspeed_mm_fsdp2():
    recs = _records("mindspeed_mm_fsdp2_qwen3vl_docs.txt")
    assert [(r.step, r.total_steps) for r in recs] == [(1, 10000), (2, 10000)]
    assert recs[0].metrics["loss"] == pytest.approx(10.1657)
    assert recs[1].metrics["loss"] == pytest.approx(10.09848)
    assert recs[1].metrics["learning rate"] == pytest.approx(1e-08)
    tp = throughput_mindspeed_mm(recs, skip_first=1)
    assert tp.value == pytest.approx(8 / 2.2316)


def test_llamafactory_eval_sample():
    recs = _records("llamafactory_sft_lora_eval.jsonl")
    assert detect_format(LOGS / "llamafactory_sft_lora_eval.jsonl") == "llamafactory"
    train = [r for r in recs if r.kind == "train"]
    evals = [r for r in recs if r.kind == "eval"]
    assert [r.step for r in train] == [10, 20, 30, 40, 50, 480, 490, 500, 510, 520, 530]
    assert train[0].metrics["loss"] == 2.219 and train[0].metrics["lr"] == pytest.approx(
        1.3333333333333334e-06
    )
    assert train[0].wall_time == 32 and train[0].metrics["remaining_time"] == 6 * 3600 + 73
    assert train[-1].metrics["loss"] == 1.764 and train[-1].wall_time == 31 * 60 + 2
    assert len(evals) == 1 and evals[0].step == 500
    assert evals[0].metrics["eval_loss"] == pytest.approx(1.6410622596740723)
    assert "loss" not in evals[0].metrics and "lr" not in evals[0].metrics
    s = summarize(recs)
    assert s.stats["loss"].count == 11 and s.stats["loss"].min == 1.764 and s.stats["loss"].max == 2.3657
    assert s.eval_stats["eval_loss"].last == pytest.approx(1.6410622596740723)


def test_llamafactory_final_record():
    recs = _records("llamafactory_final_record_throughput.jsonl")
    assert len(recs) == 1 and recs[0].kind == "progress"
    r = recs[0]
    assert r.step == 768 and r.total_steps == 768 and r.metrics["elapsed_time"] == 3600 + 39 * 60 + 39
    assert r.metrics["throughput"] == 4129.18 and r.metrics["total_tokens"] == 24689312
    # the exact session time: total_tokens / throughput (elapsed_time is rounded down to the second)
    assert r.wall_time == pytest.approx(24689312 / 4129.18) and 0 <= r.wall_time - 5979 < 1
    tp = throughput_llamafactory(recs, devices=1)
    assert tp.value == pytest.approx(r.metrics["throughput"], rel=1e-9)  # LF's own figure, exactly


def test_verl_console_sample():
    recs = _records("verl_grpo_console_ray.txt")
    assert detect_format(LOGS / "verl_grpo_console_ray.txt") == "verl"
    assert [(r.step, r.kind) for r in recs] == [(0, "eval"), (1, "train")]
    assert recs[0].metrics["val-aux/char_count/reward/mean@1"] == pytest.approx(0.121524201853759)
    assert len(recs[0].metrics) == 13
    m = recs[1].metrics
    assert m["global_seqlen/min"] == 159906
    assert m["actor/pg_loss"] == pytest.approx(-0.0036091046008680547)
    assert m["actor/lr"] == 1e-06
    assert m["critic/score/mean"] == 0.0888671875
    assert m["response_length/mean"] == 93.126953125
    assert m["perf/throughput"] == pytest.approx(3283.320414789452)
    assert m["timing_s/step"] == pytest.approx(48.7025266494602)
    assert m["perf/throughput"] == pytest.approx(m["perf/total_num_tokens"] / m["perf/time_per_step"])
    s = summarize(recs)
    assert s.throughput[0].value == pytest.approx(3283.320414789452)
    assert s.convergence.metric == "critic/score/mean" and s.convergence.direction == "up"
