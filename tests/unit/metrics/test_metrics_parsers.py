"""Synthetic logs for every parser quirk (formats, prefixes, ANSI, wrapping, resumes, detection)."""

from __future__ import annotations

import json
import math

import pytest

from ascendfactory.errors import ConfigError
from ascendfactory.metrics import dedupe, detect_format, parse_file, parse_lines
from ascendfactory.metrics.lines import iter_lines
from ascendfactory.metrics.record import parse_clock, to_float

MCORE = (
    " [2025-01-01 00:00:{s:02d}] iteration {i:8d}/    5000 | consumed samples: {c:12d} | "
    "elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | "
    "learning rate: 1.250000E-06 | global batch size:     8 | lm loss: {loss:.6E} | loss scale: 1.0 | "
    "grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def mcore(i: int, loss: float = 2.5) -> str:
    return MCORE.format(s=i % 60, i=i, c=8 * i, loss=loss)


def one(lines, fmt=None):
    recs = list(parse_lines(lines, fmt))
    assert len(recs) == 1, recs
    return recs[0]


def test_mcore_line_with_timestamp_all_fields():
    r = one([mcore(10, 1.234567)])
    assert r.step == 10 and r.total_steps == 5000
    assert r.metrics["lm loss"] == pytest.approx(1.234567)
    assert r.metrics["throughput per GPU (TFLOP/s/GPU)"] == 123.4
    assert r.metrics["learning rate"] == 1.25e-06
    assert r.wall_time is not None


def test_mcore_without_timestamp_subset_and_order_free():
    r = one(["iteration 7/100 | lm loss: 3.0E+00 | elapsed time per iteration (ms): 10.0 |"])
    assert r.wall_time is None and r.metrics == {"lm loss": 3.0, "elapsed time per iteration (ms)": 10.0}


def test_megatron_deepspeed_extras_and_mm_tokens_per_sample():
    r = one(
        [
            " iteration 3/ 10 | elapsed time per iteration (ms): 500.0 | tokens per gpu per second (tgs): "
            "2048.5 | TFLOPs: 150.25 | tokens per sample: 1.536000E+03 | loss: 9.9E-01 |"
        ]
    )
    assert r.metrics["tokens per gpu per second (tgs)"] == 2048.5
    assert r.metrics["TFLOPs"] == 150.25 and r.metrics["tokens per sample"] == 1536.0


@pytest.mark.parametrize(
    "prefix",
    ["3: ", "[default7]: ", "[rank7]: ", "(TaskRunner pid=1234) ", "\x1b[32m", "2025-01-01 10:00:00 INFO "],
)
def test_launcher_prefixes_and_ansi(prefix):
    r = one([prefix + mcore(5, 2.0) + "\x1b[0m"])
    assert r.step == 5 and r.metrics["lm loss"] == 2.0


def test_interleaved_stderr_and_noise_lines():
    lines = [
        "WARNING: something on stderr",
        mcore(1, 3.0),
        "Traceback? no, just a warning | with a pipe",
        "  warnings.warn(",
        mcore(2, 2.9),
        "time (ms) | forward-backward: 100.0",
    ]
    recs = list(parse_lines(lines, "megatron"))
    assert [r.step for r in recs] == [1, 2]


def test_wrapped_line_joined_and_unwrapped_pending_flushed():
    wrapped = [
        " iteration  11/50000 | lm loss:  1.376514E+01 | number of skipped",
        "iterations: 0 | number of nan iterations:   0 | samples per second: 9.710 |",
    ]
    r = one(wrapped)
    assert r.metrics["number of skipped iterations"] == 0 and r.metrics["samples per second"] == 9.71
    # a line without the trailing '|' followed by a new head line: both are kept
    recs = list(parse_lines(["iteration 1/9 | lm loss: 2.0", "iteration 2/9 | lm loss: 1.9 |"], "megatron"))
    assert [(r.step, r.metrics["lm loss"]) for r in recs] == [(1, 2.0), (2, 1.9)]
    # at the end of the stream a pending line is flushed
    assert one(["iteration 3/9 | lm loss: 1.5"], "megatron").metrics["lm loss"] == 1.5


def test_memory_checkpoint_and_validation_lines():
    lines = [
        mcore(10),
        "[Rank 7] (after 10 iterations) memory (MB) | allocated: 1024.5 | max allocated: 2048.0 | "
        "reserved: 3000.0 | max reserved: 3072.0",
        "saving checkpoint at iteration      20 to /ckpt in torch format",
        "  successfully saved checkpoint from iteration      20 to /ckpt",
        " validation loss at iteration 20 | lm loss value: 2.100000E+00 | lm loss PPL: 8.166170E+00 | ",
    ]
    recs = list(parse_lines(lines))
    kinds = [(r.kind, r.step) for r in recs]
    assert kinds == [
        ("train", 10),
        ("memory", 10),
        ("checkpoint_start", 20),
        ("checkpoint", 20),
        ("eval", 20),
    ]
    mem = recs[1].metrics
    assert mem["memory/allocated_mb"] == 1024.5 and mem["memory/max_reserved_mb"] == 3072.0
    assert mem["memory/rank"] == 7
    assert recs[3].note == "/ckpt"
    assert recs[4].metrics["lm loss value"] == 2.1


def test_validation_lines_as_the_trainer_prints_them():
    """The embedded trainer's `logline.format_validation` (Megatron's evaluate_and_print_results): periodic,
    after training on the validation set (kind eval) and on the test set (kind test)."""
    from ascendfactory.engine.train.logline import format_validation

    lines = [mcore(10)]
    for prefix in ("iteration 10", "iteration 12 on validation set", "iteration 12 on test set"):
        framed = format_validation(prefix, {"lm loss": 2.25})
        assert framed[0] == framed[2] == "-" * (len(framed[1]) + 1)
        assert framed[1].endswith("| lm loss value: 2.250000E+00 | lm loss PPL: 9.487736E+00 | ")
        lines += framed
    recs = list(parse_lines(lines))
    assert [(r.kind, r.step) for r in recs] == [("train", 10), ("eval", 10), ("eval", 12), ("test", 12)]
    assert recs[2].metrics == {"lm loss value": 2.25, "lm loss PPL": pytest.approx(9.487736)}
    assert format_validation("iteration 1", {"lm loss": 30.0})[1].endswith("PPL: 4.851652E+08 | ")  # exp(20)


def test_mindspeed_rl_line():
    line = (
        "2025-01-01 00:00:00,000 - INFO - [2025-01-01 00:00:00] iteration: 3 / 100 | timing/all : 12.3456 | "
        "timing/update : 4.0000 | actor/pg_loss : -0.0123 | actor/lr : 1.000000e-06 | grad_norm : 0.5000 | "
        "math_17k_acc_rewards/mean : 0.4200 | grpo/score/mean : 0.4200 | response_length/mean : 512.0000 | "
        "e2e_tps : 321.5000 | update_tps : 900.1000 | vllm_tps : 450.0000 "
    )
    assert detect_format([line]) == "mindspeed_rl"
    r = one([line])
    assert r.step == 3 and r.total_steps == 100
    assert r.metrics["timing/all"] == 12.3456 and r.metrics["actor/lr"] == 1e-06
    assert r.metrics["math_17k_acc_rewards/mean"] == 0.42 and r.metrics["vllm_tps"] == 450.0


def test_verl_value_styles():
    lines = [
        "(TaskRunner pid=9) step:0 - val-core/openai/gsm8k/acc/mean@1:0.25",
        "step:1 - global_seqlen/min:538646.000 - actor/lr:0.000 - critic/score/mean:0.100",
        "(TaskRunner pid=9) step:2 - actor/pg_loss:np.float64(-0.0070) - actor/lr:1e-06 - "
        "critic/score/mean:np.float64(0.2) - actor/kl_loss:np.float64(nan) - note:text",
    ]
    recs = list(parse_lines(lines))
    assert [(r.step, r.kind) for r in recs] == [(0, "eval"), (1, "train"), (2, "train")]
    assert recs[1].metrics["global_seqlen/min"] == 538646.0
    assert recs[2].metrics["actor/pg_loss"] == -0.007 and recs[2].metrics["critic/score/mean"] == 0.2
    assert math.isnan(recs[2].metrics["actor/kl_loss"]) and "note" not in recs[2].metrics


def test_verl_file_logger_jsonl():
    lines = [json.dumps({"step": s, "data": {"critic/score/mean": s / 10, "actor/lr": 1e-6}}) for s in (1, 2)]
    assert detect_format(lines) == "verl_jsonl"
    recs = list(parse_lines(lines))
    assert [(r.step, r.metrics["critic/score/mean"]) for r in recs] == [(1, 0.1), (2, 0.2)]


def test_roll_metrics_tag():
    payload = {
        "step": 4,
        "metrics": {
            "critic/score/mean": 0.5,
            "tokens/response_length/mean": 300,
            "system/tps": 1500.5,
            "actor/pg_loss": float("nan"),
            "name": "x",
        },
    }
    line = (
        "[2025-01-01 00:00:00] [rlvr_pipeline.py (350)] [INFO] [pipeline 0 / 1][PID 42] metrics_tag: "
        + json.dumps(payload)
    )
    assert detect_format([line]) == "roll"
    r = one([line])
    assert (
        r.step == 4 and r.metrics["system/tps"] == 1500.5 and r.metrics["tokens/response_length/mean"] == 300
    )
    assert math.isnan(r.metrics["actor/pg_loss"]) and "name" not in r.metrics


def test_llamafactory_days_elapsed_and_resume_dedupe(tmp_path):
    rows = [
        {"current_steps": 10, "total_steps": 30, "loss": 2.0, "lr": 1e-5, "elapsed_time": "1 day, 0:00:10"},
        {"current_steps": 20, "total_steps": 30, "loss": 1.8, "lr": 1e-5, "elapsed_time": "2 days, 1:00:00"},
        # resumed from checkpoint-10: step 20 logged again, timer restarted
        {"current_steps": 20, "total_steps": 30, "loss": 1.7, "lr": 1e-5, "elapsed_time": "0:00:30"},
        {"current_steps": 30, "total_steps": 30, "loss": 1.6, "lr": 1e-5, "elapsed_time": "0:01:00"},
    ]
    path = tmp_path / "trainer_log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    recs = list(parse_file(path))
    assert recs[0].wall_time == 86410 and recs[1].wall_time == 2 * 86400 + 3600
    joined = dedupe(recs)
    assert [(r.step, r.metrics["loss"]) for r in joined] == [(10, 2.0), (20, 1.7), (30, 1.6)]


def test_hf_console_dicts_step_from_tqdm():
    lines = [
        " 10%|█         | 10/100 [00:10<01:30,  1.00it/s]",
        "{'loss': 1.23, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.12}",
        " 20%|██        | 20/100 [00:20<01:20,  1.00it/s]{'loss': 1.1, 'grad_norm': np.float64(0.4), "
        "'learning_rate': 9e-06, 'epoch': 0.24}",
        "{'train_runtime': 100.5, 'train_samples_per_second': 8.0, 'train_loss': 1.15, 'epoch': 1.0}",
    ]
    assert detect_format(lines) == "hf_console"
    recs = list(parse_lines(lines))
    assert [(r.step, r.kind) for r in recs] == [(10, "train"), (20, "train"), (20, "summary")]
    assert recs[1].metrics == {"loss": 1.1, "grad_norm": 0.4, "learning_rate": 9e-06, "epoch": 0.24}
    assert recs[0].total_steps == 100
    no_bar = list(
        parse_lines(["{'loss': 2.0, 'learning_rate': 1e-05}", "{'loss': 1.9, 'learning_rate': 1e-05}"])
    )
    assert [r.step for r in no_bar] == [1, 2]


def test_detection_skips_long_preamble_and_format_override(tmp_path):
    path = tmp_path / "run_log.txt"
    path.write_text("\n".join([f"  arg_{i} ........ {i}" for i in range(3000)] + [mcore(1), mcore(2)]) + "\n")
    assert [r.step for r in parse_file(path)] == [1, 2]
    assert list(parse_file(path, "verl")) == []
    with pytest.raises(ConfigError, match="unknown log format"):
        parse_file(path, "nonsense")
    with pytest.raises(ConfigError, match="not found"):
        parse_file(tmp_path / "missing.log")


def test_fields_projection_fast_path():
    recs = list(
        parse_lines(
            [mcore(1, 2.0), "iteration 2/9 | gloabl batch size: 4 | lm loss: 1.0 |"],
            "megatron",
            fields=["lm loss", "global batch size"],
        )
    )
    assert recs[0].metrics == {"lm loss": 2.0, "global batch size": 8.0}
    assert recs[1].metrics == {"lm loss": 1.0, "global batch size": 4.0}


def test_iter_lines_streams_small_chunks_crlf_and_partial_last_line(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"a\r\nb\rc\n\x1b[31mred\x1b[0m\nbad \xff byte\npartial")
    assert list(iter_lines(path, chunk_size=3)) == ["a", "b", "c", "red", "bad \ufffd byte", "partial"]
    assert list(iter_lines(path, chunk_size=3, complete_only=True))[-1] == "bad \ufffd byte"


def test_value_helpers():
    assert to_float("np.float64(0.5)") == 0.5 and to_float("tensor(1.5, device='npu:0')") == 1.5
    assert to_float(True) is None and to_float("abc") is None and math.isinf(to_float("inf"))
    assert parse_clock("0:25:47") == 1547 and parse_clock("3 days, 17:51:32") == 3 * 86400 + 64292
    assert parse_clock("garbage") is None


def test_hf_console_dicts_of_transformers_5_quote_their_values():
    # verbatim stdout of a LLaMA-Factory 0.9.5 / transformers 5.6.0 run (spec llamafactory_cpu_run.md 4.4)
    lines = [
        "{'loss': '6.854', 'grad_norm': '0.5982', 'learning_rate': '0', 'epoch': '0.02'}",
        "{'loss': '6.845', 'grad_norm': '0.6113', 'learning_rate': '0', 'epoch': '0.04', "
        "'num_input_tokens_seen': 768, 'train_runtime': '0.1417', 'train_tokens_per_second': '5420'}",
        "{'train_runtime': '46.31', 'train_samples_per_second': '1.728', 'train_steps_per_second': '0.432', "
        "'train_loss': '6.724', 'epoch': '0.4'}",
    ]
    assert detect_format(lines) == "hf_console"
    recs = list(parse_lines(lines))
    assert [(r.step, r.kind, r.metrics.get("loss")) for r in recs] == [
        (1, "train", 6.854),
        (2, "train", 6.845),
        (3, "summary", None),
    ]
    assert recs[1].metrics["num_input_tokens_seen"] == 768 and recs[2].metrics["train_loss"] == 6.724


def test_llamafactory_wall_time_from_tokens_and_throughput():
    # `elapsed_time` has whole seconds; total_tokens / throughput is the session's exact time
    line = (
        '{"current_steps": 20, "total_steps": 20, "loss": 6.6449, "lr": 7.6e-06, "epoch": 0.8, '
        '"percentage": 100.0, "elapsed_time": "0:00:03", "remaining_time": "0:00:00", '
        '"throughput": 4831.42, "total_tokens": 15072}'
    )
    (r,) = parse_lines([line])
    assert r.metrics["elapsed_time"] == 3 and abs(r.wall_time - 3.11958) < 1e-4


def test_hf_console_steps_count_as_trainer_log_does_when_the_bar_lags():
    """tqdm redraws at most every 0.1 s: a fast step's loss dict can follow the previous step's bar."""
    from ascendfactory.metrics.llamafactory import ConsoleDictParser

    def line(bars: str, loss: float) -> str:
        return bars + "{'loss': '%s', 'grad_norm': '0.5', 'learning_rate': '0.001', 'epoch': '0.02'}" % loss

    parser = ConsoleDictParser()
    lines = [
        line("  0%|          | 0/30 [00:00<?, ?it/s]", 6.85),  # step 1, bar not redrawn yet
        line("  3%|▎         | 1/30 [00:00<00:12,  2.36it/s]", 6.83),  # step 2, bar one behind
        line("  7%|▋         | 2/30 [00:00<00:09] 10%|█         | 3/30 [00:01<00:08]", 6.80),  # step 3
    ]
    steps = [r.step for text in lines for r in parser.feed(text) if r.kind == "train"]
    assert steps == [1, 2, 3]


def test_a_nan_validation_loss_has_no_perplexity():
    line = (
        " validation loss at iteration 60 on validation set | lm loss value: nan | "
        "lm loss PPL: 4.851652E+08 | "
    )
    [rec] = list(parse_lines([line], "megatron"))
    assert math.isnan(rec.metrics["lm loss value"]) and math.isnan(rec.metrics["lm loss PPL"])
    line = " validation loss at iteration 60 | lm loss value: 1.371027E+00 | lm loss PPL: 3.939393E+00 | "
    assert next(iter(parse_lines([line], "megatron"))).metrics["lm loss PPL"] == 3.939393
