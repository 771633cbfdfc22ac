"""MindSpeed-MM's training lines (mindspeed_mm/training.py training_log, 2.1.0 and master) and its throughput:
samples/s = GBS / elapsed ms x 1000 over its example scripts' window, tokens/s with `tokens per sample`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ascendfactory.metrics import detect_format, parse_file, parse_lines, summarize
from ascendfactory.metrics.throughput import throughput_for, throughput_mindspeed_mm


def mm_line(i: int, n: int, elapsed: float, *, gbs: int = 192, tokens: float | None = None) -> str:
    """One line in training_log's layout: local time, iteration, consumed samples, elapsed ms, learning rate,
    global batch size, the loss_func keys (`loss`, with --log-tps `tokens per sample`), loss scale, ..."""
    tps = f" tokens per sample: {tokens:.6E} |" if tokens is not None else ""
    return (
        f" [2025-09-23 10:{i // 60 % 60:02d}:{i % 60:02d}] iteration {i:8d}/{n:8d} | consumed samples: "
        f"{i * gbs:12d} | elapsed time per iteration (ms): {elapsed:.1f} | learning rate: 1.000000E-05 | "
        f"global batch size: {gbs:5d} | loss: {2.0 / i:.6E} |{tps} loss scale: 1.0 | grad norm: 1.234 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def test_the_megatron_parser_reads_mindspeed_mm_lines():
    record = next(parse_lines([mm_line(3, 10, 1500.0, tokens=812.5)]))
    assert record.step == 3 and record.total_steps == 10
    assert record.metrics["loss"] == pytest.approx(2.0 / 3)
    assert record.metrics["elapsed time per iteration (ms)"] == 1500.0
    assert record.metrics["global batch size"] == 192
    assert record.metrics["tokens per sample"] == 812.5


def test_the_window_is_the_scripts_iterations_51_to_150():
    lines = [mm_line(i, 200, 1000.0 + i, tokens=500.0 + i) for i in range(1, 201)]
    tp = throughput_mindspeed_mm(parse_lines(lines))
    assert tp.steps_used == list(range(51, 151)) and tp.steps_skipped == list(range(1, 51))
    mean_ms = sum(1000.0 + i for i in range(51, 151)) / 100
    assert tp.value == pytest.approx(192 * 1000 / mean_ms)
    mean_tokens = sum(500.0 + i for i in range(51, 151)) / 100
    assert tp.details["tokens_per_s"] == pytest.approx(192 * 1000 / mean_ms * mean_tokens)


@pytest.mark.parametrize("n, window", [(120, (21, 120)), (150, (51, 150)), (101, (2, 101))])
def test_the_window_matches_head_150_tail_100(tmp_path: Path, n: int, window: tuple[int, int]):
    """The lines the scripts average are `grep 'elapsed time per iteration' | head -n 150 | tail -n 100`."""
    if not (shutil.which("head") and shutil.which("tail")):
        pytest.skip("coreutils not found")
    log = tmp_path / "train.log"
    log.write_text("\n".join(["noise"] + [mm_line(i, n, 900.0 + 3 * i) for i in range(1, n + 1)]) + "\n")
    grep = subprocess.run(["grep", "elapsed time per iteration", str(log)], capture_output=True, text=True)
    head = subprocess.run(["head", "-n", "150"], input=grep.stdout, capture_output=True, text=True)
    tail = subprocess.run(["tail", "-n", "100"], input=head.stdout, capture_output=True, text=True)
    picked = [r.step for r in parse_lines(tail.stdout.splitlines())]
    tp = throughput_mindspeed_mm(parse_file(log))
    assert tp.steps_used == picked and (picked[0], picked[-1]) == window


def test_short_runs_skip_the_warm_up_and_say_so():
    lines = [mm_line(i, 20, 9000.0 if i == 1 else 1000.0) for i in range(1, 21)]
    tp = throughput_mindspeed_mm(parse_lines(lines))
    assert tp.steps_skipped == [1, 2] and tp.value == pytest.approx(192.0)
    assert "MindSpeed-MM's window (iterations 51-150) needs more than 100" in tp.note


def test_the_plan_formula_and_the_logs_command_agree(tmp_path: Path):
    log = tmp_path / "run_log-N1-7.txt"
    log.write_text("\n".join(mm_line(i, 200, 2000.0) for i in range(1, 201)) + "\n")
    assert detect_format(log) == "megatron"
    planned = throughput_for("mindspeed_mm", parse_file(log), seq_length=None, devices=8)
    assert planned.value == pytest.approx(96.0) and planned.details["samples_per_s_per_device"] == 12.0
    summary = summarize(parse_file(log))
    assert summary.throughput[0].metric == "samples/s" and summary.throughput[0].value == pytest.approx(96.0)
