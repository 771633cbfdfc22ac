"""training_log line format (spec 4a), memory line, FLOPs formula, and parsing the line back."""

from datetime import datetime

from ascendfactory.engine.train.logline import (
    FlopsDims,
    IterationStats,
    format_memory_line,
    format_training_log,
    num_floating_point_operations,
    parse_log_line,
)

SKELETON = (
    " [2025-01-01 00:00:00] iteration       10/    5000 | consumed samples:           80 | elapsed time per "
    "iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | learning rate: 1.250000E-06 | "
    "global batch size:     8 | lm loss: 1.234567E+00 | loss scale: 1.0 | grad norm: 1.234 | number of "
    "skipped iterations:   0 | number of nan iterations:   0 |"
)


def _stats(**kw):
    base = dict(
        iteration=10,
        train_iters=5000,
        consumed_samples=80,
        elapsed_ms=1234.5,
        learning_rate=1.25e-6,
        global_batch_size=8,
        losses={"lm loss": 1.234567},
        loss_scale=1.0,
        grad_norm=1.2344,
        skipped_iterations=0,
        nan_iterations=0,
        tflops_per_gpu=123.4,
    )
    return IterationStats(**{**base, **kw})


def test_line_is_exactly_the_skeleton():
    assert format_training_log(_stats(), now=datetime(2025, 1, 1)) == SKELETON


def test_throughput_only_with_log_throughput_and_zero_loss_omitted():
    line = format_training_log(_stats(tflops_per_gpu=None, losses={"lm loss": 0.0}), now=datetime(2025, 1, 1))
    assert "throughput" not in line and "lm loss" not in line


def test_parse_back():
    f = parse_log_line(SKELETON)
    assert f["iteration"] == "10/    5000" and f["lm loss"] == "1.234567E+00"
    assert f["elapsed time per iteration (ms)"] == "1234.5" and f["grad norm"] == "1.234"
    assert f["throughput per GPU (TFLOP/s/GPU)"] == "123.4"


def test_memory_line():
    line = format_memory_line(
        3, 1, {"allocated": 1.5, "max_allocated": 2.0, "reserved": 4.0, "max_reserved": 4.0}
    )
    assert line == (
        "[Rank 3] (after 1 iterations) memory (MB) | allocated: 1.5 | max allocated: 2.0 | "
        "reserved: 4.0 | max reserved: 4.0"
    )


def test_flops_formula_llama_like():
    d = FlopsDims(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_query_groups=32,
        kv_channels=128,
        padded_vocab_size=32000,
    )
    f = num_floating_point_operations(d, seq_length=4096, batch_size=1)
    # 12 B s L h^2 (1 + 1 + s/h + 1.5 ffn/h + V/(2 L h))
    expected = 12 * 4096 * 32 * 4096**2 * (2 + 1 + 1.5 * 11008 / 4096 + 32000 / (2 * 32 * 4096))
    assert abs(f - expected) / expected < 1e-12


def test_a_nan_interval_prints_lm_loss_nan():
    """Megatron's `avg > 0.0` would drop a NaN average; the field stays, as `nan`."""
    line = format_training_log(_stats(losses={"lm loss": float("nan")}, nan_iterations=5))
    assert "| lm loss: nan |" in line and "number of nan iterations:   5 |" in line
    assert parse_log_line(line)["lm loss"] == "nan"
