"""Plots that do not mislead: smoothing scaled to the points, the raw curve in the legend, the experiment's
name, whole-number iteration ticks, the resume marked, a schedule never smoothed, `logs compare` legends
that tell files apart and a comparison across formats on the loss both logs have."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendfactory.metrics import compare
from ascendfactory.metrics import plot as plot_mod
from ascendfactory.metrics.plot import is_schedule, plot_loss, smoothing_for
from ascendfactory.metrics.record import Record


def test_smoothing_is_scaled_to_the_number_of_points():
    assert smoothing_for(15, 0.6) == 0.0  # the GRPO warm-up's 15 points: raw only
    assert smoothing_for(24, 0.6) == pytest.approx(1 - 20 / 24)
    assert smoothing_for(500, 0.6) == 0.6


def test_a_schedule_is_never_smoothed():
    assert is_schedule("learning rate") and is_schedule("learning_rate") and is_schedule("actor/lr")
    assert not is_schedule("lm loss") and not is_schedule("grpo/score/mean")


@pytest.fixture
def figures(monkeypatch):
    made = []
    figure, canvas = plot_mod._matplotlib()

    class Recorded(figure):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(plot_mod, "_matplotlib", lambda: (Recorded, canvas))
    return made


def _records(n: int, lr: bool = False) -> list[Record]:
    return [
        Record(step=i, metrics={"lm loss": 5.0 / i, **({"learning rate": 1e-3 * i} if lr else {})})
        for i in range(1, n + 1)
    ]


def test_the_legend_names_the_experiment_and_the_raw_curve_and_marks_the_resume(tmp_path, figures):
    plot_loss(_records(100), tmp_path / "a.png", labels=["quickstart-sft"], resumed_at=[60])
    ax = figures[-1].axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "quickstart-sft (raw)" in legend and "resumed" in legend
    assert any(t.startswith("quickstart-sft (smoothed") for t in legend)
    assert not any("run 1" in t for t in legend)
    ticks = ax.get_xticks()
    assert all(float(t).is_integer() for t in ticks)


def test_few_points_and_the_learning_rate_are_drawn_raw(tmp_path, figures):
    plot_loss(_records(12), tmp_path / "b.png", labels=["grpo-warmup"])
    assert [t.get_text() for t in figures[-1].axes[0].get_legend().get_texts()] == ["grpo-warmup"]
    plot_loss(_records(200, lr=True), tmp_path / "c.png", metric="learning rate", labels=["x"])
    assert [t.get_text() for t in figures[-1].axes[0].get_legend().get_texts()] == ["x"]


def test_compare_legends_tell_two_files_of_the_same_name_apart():
    from ascendfactory.cli.logs_cmd import distinct_names

    a, b = Path("/runs/lora-a/trainer_log.jsonl"), Path("/runs/lora-b/trainer_log.jsonl")
    assert distinct_names(a, b) == ("lora-a/trainer_log.jsonl", "lora-b/trainer_log.jsonl")


def test_compare_across_formats_uses_the_loss_each_log_has():
    megatron = [Record(step=i, metrics={"lm loss": 2.0}) for i in range(1, 6)]
    hf = [Record(step=i, metrics={"loss": 2.02, "grad_norm": 1.0}) for i in range(1, 6)]
    cmp = compare(megatron, hf)
    assert cmp.metric == "lm loss (A) / loss (B)" and len(cmp.steps) == 5


def _nan_run(n: int) -> list[Record]:
    nan = float("nan")
    train = [
        Record(step=i, metrics={"lm loss": nan, "number of nan iterations": 5.0}) for i in range(5, n + 1, 5)
    ]
    return [*train, Record(step=n, metrics={"lm loss value": nan, "lm loss PPL": nan}, kind="eval")]


def test_an_all_nan_run_shows_its_nan_marks_and_says_why_the_axis_is_empty(tmp_path, figures):
    plot_loss(_nan_run(60), tmp_path / "nan.png", labels=["own64"])
    ax = figures[-1].axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["NaN lm loss (60 iterations)"]  # no entry for a line that is not drawn
    texts = [t.get_text() for t in ax.texts]
    assert texts == ["no finite 'lm loss': every logged value is NaN / inf"]
    assert list(ax.get_yticks()) == []


def test_a_single_point_has_a_marker(tmp_path, figures):
    plot_loss(_records(1), tmp_path / "one.png")
    [line] = figures[-1].axes[0].get_lines()
    assert line.get_marker() == "o"
