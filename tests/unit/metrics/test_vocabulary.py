"""One vocabulary across backends: a Megatron (torch) log and an LLaMA-Factory trainer_log.jsonl compared by
step and by tokens seen, in one table, through the real parsers and `logs compare`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ascendfactory.cli._output import out
from ascendfactory.metrics import parse_file
from ascendfactory.metrics.vocabulary import align, common_records

SEQ = 128
MEGATRON = (
    " [2026-01-01 00:00:00] iteration {i:8d}/      12 | consumed samples: {c:12d} | "
    "elapsed time per iteration (ms): 500.0 | learning rate: {lr:.6E} | global batch size:    16 | "
    "lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.500 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |"
)


def megatron_log(path, losses):
    path.write_text(
        "\n".join(MEGATRON.format(i=i, c=16 * i, lr=1e-3, loss=v) for i, v in losses.items()) + "\n"
    )
    return path


def lf_log(path, losses, tokens_per_step):
    rows = [
        {
            "current_steps": i,
            "total_steps": len(losses),
            "loss": v,
            "lr": 1e-3,
            "epoch": 0.1 * i,
            "throughput": 900.0,
            "total_tokens": tokens_per_step * i,
        }
        for i, v in losses.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_common_names_from_each_backends_own(tmp_path):
    mg = common_records(parse_file(megatron_log(tmp_path / "a.txt", {1: 3.0, 2: 2.0})), seq_length=SEQ)
    lf = common_records(parse_file(lf_log(tmp_path / "trainer_log.jsonl", {1: 3.1}, 1000)))
    m, f = mg[1].metrics, lf[0].metrics
    assert (m["loss"], m["learning_rate"], m["grad_norm"]) == (2.0, 1e-3, 0.5)
    assert m["tokens_per_s"] == pytest.approx(16 * SEQ / 0.5) and m["tokens_seen"] == 32 * SEQ
    assert m["lm loss"] == 2.0  # its own names kept
    assert (f["loss"], f["learning_rate"], f["tokens_per_s"], f["tokens_seen"]) == (3.1, 1e-3, 900.0, 1000)
    no_seq = common_records(parse_file(tmp_path / "a.txt"))
    assert "tokens_seen" not in no_seq[0].metrics and no_seq[0].metrics["loss"] == 3.0


def test_align_by_tokens_interpolates_run_b_at_run_a_token_counts(tmp_path):
    a = common_records(parse_file(megatron_log(tmp_path / "a.txt", {1: 4.0, 2: 3.0, 3: 2.0})), seq_length=SEQ)
    # B sees 1024 tokens a step where A sees 16 x 128 = 2048: B's steps 2, 4, 6 are A's 1, 2, 3
    b = common_records(
        parse_file(lf_log(tmp_path / "trainer_log.jsonl", {i: 5.0 - 0.5 * i for i in range(1, 7)}, 1024))
    )
    by_tokens = align(a, b, metric="loss", by="tokens")
    assert by_tokens.steps == [2048, 4096, 6144]
    assert by_tokens.b == pytest.approx([4.0, 3.0, 2.0]) and by_tokens.stats()[
        "max_abs_error"
    ] == pytest.approx(0.0)
    by_step = align(a, b, metric="loss", by="step")
    assert by_step.steps == [1, 2, 3] and by_step.b == pytest.approx([4.5, 4.0, 3.5])


def test_logs_compare_takes_a_torch_and_a_llamafactory_run_in_one_table(tmp_path):
    from ascendfactory.cli.app import app

    a = megatron_log(tmp_path / "run_log.txt", {1: 4.0, 2: 3.0, 3: 2.0})
    b = lf_log(tmp_path / "trainer_log.jsonl", {i: 5.0 - 0.5 * i for i in range(1, 7)}, 1024)
    try:
        r = CliRunner().invoke(
            app,
            [
                "logs",
                "compare",
                str(a),
                str(b),
                "--metric",
                "loss",
                "--align",
                "tokens",
                "--seq-length",
                "128",
                "--json",
            ],
        )
    finally:
        out.mode = "human"
    assert r.exit_code == 0, r.stdout
    data = json.loads(r.stdout)
    assert data["metric"] == "loss" and data["aligned_steps"] == 3 and data["within_tolerance"] == 1.0
    try:
        bad = CliRunner().invoke(app, ["logs", "compare", str(a), str(b), "--align", "time"])
        missing = CliRunner().invoke(app, ["logs", "compare", str(a), str(b), "--align", "tokens"])
    finally:
        out.mode = "human"
    assert "use step or tokens" in str(bad.exception)  # a ConfigError, rendered by the CLI's one boundary
    assert "--seq-length" in str(missing.exception) and "run A has no tokens seen" in str(missing.exception)
