"""Live tail, export (csv/jsonl/tensorboard read back), plotting, and never-raise properties."""

from __future__ import annotations

import csv
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.metrics import (
    LiveTail,
    Record,
    StepTable,
    export_records,
    format_names,
    parse_lines,
    plot_loss,
)
from ascendfactory.metrics.plot import default_metrics

LINE = (
    "iteration {i:4d}/  100 | consumed samples: {c} | elapsed time per iteration (ms): 100.0 | "
    "global batch size: 8 | lm loss: {loss:.6E} |"
)


def line(i: int, loss: float = 2.0) -> str:
    return LINE.format(i=i, c=8 * i, loss=loss)


def test_live_tail_yields_complete_lines_only(tmp_path):
    path = tmp_path / "run_log.txt"
    tail = LiveTail(path)
    assert tail.poll() == []  # file not there yet
    with open(path, "w") as f:
        f.write("preamble\n" + line(1) + "\n" + line(2)[:30])  # second line half written
        f.flush()
        assert [r.step for r in tail.poll()] == [1]
        assert tail.format == "megatron"
        f.write(line(2)[30:] + "\n" + line(3, 1.5)[:10])
        f.flush()
        got = tail.poll()
        assert [(r.step, r.metrics["lm loss"]) for r in got] == [(2, 2.0)]
        f.write(line(3, 1.5)[10:])  # last line never gets its newline
    assert [r.step for r in tail.close()] == [3]


def test_live_tail_restarts_after_truncation(tmp_path):
    path = tmp_path / "log"
    path.write_text(line(1) + "\n" + line(2) + "\n")
    tail = LiveTail(path, "megatron")
    assert len(tail.poll()) == 2
    path.write_text(line(1, 3.0) + "\n")
    assert [r.metrics["lm loss"] for r in tail.poll()] == [3.0]
    assert [r.step for r in tail.follow(interval=0.01, timeout=0.02)] == []


def _records():
    return iter(
        [
            Record(step=i, metrics={"lm loss": 2.0 / i, "consumed samples": 8.0 * i}, wall_time=1.7e9 + i)
            for i in range(1, 6)
        ]
        + [Record(step=5, kind="checkpoint", note="/c")]
    )


def test_export_csv_and_jsonl(tmp_path):
    assert export_records(_records, "csv", tmp_path / "m.csv") == 6
    rows = list(csv.DictReader(open(tmp_path / "m.csv")))
    assert rows[0]["step"] == "1" and float(rows[1]["lm loss"]) == 1.0 and rows[-1]["kind"] == "checkpoint"
    assert export_records(_records, "jsonl", tmp_path / "m.jsonl") == 6
    first = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[0])
    assert first["metrics"]["lm loss"] == 2.0 and first["step"] == 1


def test_export_tensorboard_read_back_with_event_accumulator(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    export_records(_records, "tensorboard", tmp_path / "tb")
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "lm loss" in tags and "lm loss-vs-samples" in tags and "consumed samples-vs-samples" not in tags
    loss = acc.Scalars("lm loss")
    assert [e.step for e in loss] == [1, 2, 3, 4, 5] and loss[1].value == pytest.approx(1.0)
    assert [e.step for e in acc.Scalars("lm loss-vs-samples")] == [8, 16, 24, 32, 40]
    assert loss[0].wall_time == pytest.approx(1.7e9 + 1)


def test_export_unknown_target(tmp_path):
    from ascendfactory.errors import ConfigError

    with pytest.raises(ConfigError, match="csv, jsonl, tensorboard"):
        export_records(_records, "xlsx", tmp_path / "x")


def test_plot_loss_png_runs_and_resumed_segments(tmp_path):
    run_a = [Record(step=i, metrics={"lm loss": 3.0 / i}) for i in range(1, 30)]
    run_b = run_a[:10] + [Record(step=i, metrics={"lm loss": 2.5 / i}) for i in range(5, 30)]  # resumed
    out = plot_loss([run_a, run_b], tmp_path / "training_loss.png", labels=["a", "b"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000
    rl = [
        Record(step=i, metrics={"critic/score/mean": i / 30, "response_length/mean": 100.0 + i})
        for i in range(1, 20)
    ]
    assert default_metrics([StepTable.from_records(rl)]) == ["critic/score/mean", "response_length/mean"]
    with pytest.raises(ValueError):
        plot_loss([Record(step=1, metrics={"foo": 1.0})], tmp_path / "none.png")


TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200)
MARKERS = st.sampled_from(
    [
        "iteration 1/2 | ",
        "iteration: 3 / 4 | ",
        "step:1 - ",
        "metrics_tag: ",
        '{"current_steps": ',
        '{"step": 1, "data": ',
        "{'loss': ",
        "| lm loss: ",
        " - a:",
        "[Rank 0] (after 1 iterations) memory (MB) | ",
        "saving checkpoint at iteration ",
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(MARKERS, TEXT).map("".join) | TEXT, max_size=8),
    st.sampled_from([None, *format_names()]),
)
def test_parsers_never_raise_on_arbitrary_text(lines, fmt):
    for rec in parse_lines(lines, fmt):
        assert isinstance(rec.step, int) and all(isinstance(v, float) for v in rec.metrics.values())


def _drawn(monkeypatch) -> list:
    """The figures plot_loss saves (their axes' lines are what was drawn)."""
    from matplotlib.figure import Figure

    figures, save = [], Figure.savefig

    def capture(self, *args, **kwargs):
        figures.append(self)
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", capture)
    return figures


def test_validation_loss_is_drawn_beside_the_training_loss(tmp_path, monkeypatch):
    from ascendfactory.metrics.plot import validation_key, validation_series

    assert validation_key("lm loss", ["lm loss value", "lm loss PPL"]) == "lm loss value"  # Megatron
    assert validation_key("loss", ["eval_loss", "eval_runtime"]) == "eval_loss"  # LLaMA-Factory
    assert validation_key("lm loss", ["grad norm"]) is None
    train = [Record(step=i, metrics={"lm loss": 3.0 / i}) for i in range(1, 21)]
    evals = [
        Record(step=i, metrics={"lm loss value": 2.0 / i, "lm loss PPL": 9.0}, kind="eval") for i in (10, 20)
    ]
    test = [Record(step=20, metrics={"lm loss value": 5.0}, kind="test")]  # the test set is not validation
    table = StepTable.from_records(train + evals + test)
    assert validation_series(table, "lm loss") == ([10, 20], [0.2, 0.1])
    figures = _drawn(monkeypatch)
    plot_loss(train + evals + test, tmp_path / "with.png", labels=["run"])
    plot_loss(train, tmp_path / "without.png", labels=["run"])
    labels = [[line.get_label() for line in fig.axes[0].get_lines()] for fig in figures]
    assert "run (validation)" in labels[0] and "run (validation)" not in labels[1]
    drawn = next(line for line in figures[0].axes[0].get_lines() if line.get_label() == "run (validation)")
    assert list(drawn.get_xdata()) == [10, 20] and list(drawn.get_ydata()) == [0.2, 0.1]
