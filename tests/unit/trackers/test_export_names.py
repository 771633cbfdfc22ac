"""`logs export --to <tracker>` names each value as the run's own tracker integration names it live, so the
exported run and the pipeline's line up: the embedded trainer's log exported beside its output tree gives
the names its monitor reports (`loss`, `learning-rate`, `grad-norm`, `batch-size`, `lm loss validation`),
a plain Megatron log Megatron's own writer names."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendfactory.cli.app import main
from ascendfactory.engine.train.logline import IterationStats, format_training_log, format_validation
from ascendfactory.engine.train.monitor import Monitor
from ascendfactory.trackers.base import Sink
from ascendfactory.trackers.export import default_name


class Recording(Sink):
    name = "recording"
    run_id = "r1"

    def __init__(self) -> None:
        self.logged: dict[str, dict[int, float]] = {}

    def log_metrics(self, metrics, step):
        for key, value in metrics.items():
            self.logged.setdefault(key, {})[int(step)] = value


def stats(i: int, loss: float) -> IterationStats:
    return IterationStats(
        iteration=i,
        train_iters=2,
        consumed_samples=16 * i,
        elapsed_ms=100.0,
        learning_rate=1e-3,
        global_batch_size=16,
        losses={"lm loss": loss},
        loss_scale=1.0,
        grad_norm=0.5,
        skipped_iterations=0,
        nan_iterations=0,
    )


def write_run(out: Path, backend: str) -> Path:
    """An output tree with the embedded trainer's log lines and the exp-config.yaml naming `backend`."""
    (out / "logs").mkdir(parents=True)
    (out / "exp-config.yaml").write_text(f"backend: {backend}\n")
    lines = [format_training_log(stats(1, 3.0)), format_training_log(stats(2, 2.5))]
    lines += format_validation("iteration 2", {"lm loss": 2.75})
    log = out / "logs" / "x-run_log-N1-1.txt"
    log.write_text("\n".join(lines) + "\n")
    return log


def exported(monkeypatch, log: Path) -> dict[str, dict[int, float]]:
    sink = Recording()
    monkeypatch.setattr("ascendfactory.trackers.export.open_run", lambda spec: sink)
    assert main(["logs", "export", str(log), str(log.parent / "ml"), "--to", "mlflow"]) == 0
    return sink.logged


def live(monkeypatch) -> dict[str, dict[int, float]]:
    """What the embedded trainer's monitor reports to its trackers for the same two iterations."""
    sink = Recording()
    monitor = Monitor(
        {"monitor_on": False, "target": [], "invert": False, "dump_path": ""},
        None,
        rank=0,
        print_fn=lambda line: None,
        sinks=sink,
    )
    for i, loss in ((1, 3.0), (2, 2.5)):
        monitor.training_scalars(
            iteration=i,
            samples=16 * i,
            lr=1e-3,
            gbs=16,
            loss=loss,
            loss_scale=1.0,
            grad_norm=0.5,
            iter_time_s=0.1,
            samples_per_s=160.0,
            tflops=0.0,
        )
    monitor.validation_scalars("lm loss", 2.75, iteration=2, samples=32)
    return sink.logged


def test_the_embedded_trainers_log_exports_under_the_names_its_run_reported(tmp_path, monkeypatch):
    got, want = exported(monkeypatch, write_run(tmp_path / "out", "torch")), live(monkeypatch)
    for name in ("loss", "learning-rate", "grad-norm", "batch-size", "lm loss validation"):
        assert got[name] == pytest.approx(want[name]), name
    assert "lm loss" not in got and "eval/lm loss value" not in got


def test_a_megatron_log_elsewhere_exports_under_megatrons_own_names(tmp_path, monkeypatch):
    log = write_run(tmp_path / "out", "mindspeed-llm")
    got = exported(monkeypatch, log)
    assert got["lm loss"] == {1: 3.0, 2: 2.5}  # Megatron's writer: the loss key as it is
    assert got["lm loss validation"] == {2: pytest.approx(2.75)}
    assert "learning-rate" in got and "grad-norm" in got and "batch-size" in got


def test_a_format_without_names_keeps_its_own_and_prefixes_the_other_kinds():
    assert default_name("train", "loss") == "loss" and default_name("eval", "loss") == "eval/loss"
