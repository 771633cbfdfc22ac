"""Plan files, joined loss logs across resumed runs, the summary and the plot."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ascendfactory.pipeline import results
from ascendfactory.pipeline.launch import LogNames
from ascendfactory.plan import LogNaming, LogSpec, ThroughputSpec
from ascendfactory.secrets import mask_secrets

LOGS = LogSpec(
    format="megatron",
    naming=LogNaming(prefix="m-e"),
    loss_rank="last",
    throughput=ThroughputSpec("megatron", devices=4),
)

LINE = (
    " [2026-01-22 10:00:00] iteration {it:8d}/{n:8d} | consumed samples: {cs:12d} | elapsed time per "
    "iteration (ms): {ms} | learning rate: 1.000000E-05 | global batch size: {gbs:5d} | "
    "lm loss: {loss:.6E} |"
)


def _log(path: str, steps: range, *, n: int = 10, ms: float = 100.0, gbs: int = 8, head: str = "") -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(head)
        for it in steps:
            f.write(LINE.format(it=it, n=n, cs=it * gbs, ms=ms, gbs=gbs, loss=10.0 / it) + "\n")


def test_written_config_masks_secrets_and_never_overwrites_the_source(tmp_path):
    cfg = {
        "af_model_name": "m",
        "env": {"HF_TOKEN": "abc", "NNODES": 1},
        "backend_config": {
            "training": {"tokenizer-name-or-path": "/models/x", "api-key": "k", "lst": [{"password": "p"}]}
        },
    }
    path = results.write_file(str(tmp_path / "out" / "exp-config.yaml"), yaml.safe_dump(mask_secrets(cfg)))
    data = yaml.safe_load(Path(path).read_text())
    assert data["env"] == {"HF_TOKEN": "***", "NNODES": 1}
    assert data["backend_config"]["training"] == {
        "tokenizer-name-or-path": "/models/x",
        "api-key": "***",
        "lst": [{"password": "***"}],
    }
    src = tmp_path / "exp-config.yaml"
    src.write_text("# my comments\n")
    assert results.write_file(str(src), yaml.safe_dump(cfg), source=str(src)) is None
    assert src.read_text() == "# my comments\n"


def test_loss_logs_join_the_runs_a_resume_continues(tmp_path):
    logs = str(tmp_path / "logs")
    old = LogNames.for_run(logs, "m", "e", "20260101_000000")
    mid = LogNames.for_run(logs, "m", "e", "20260102_000000")
    cur = LogNames.for_run(logs, "m", "e", "20260103_000000")
    _log(old.run_log(1, 0), range(1, 4))  # an unrelated earlier run from scratch... that crashed at 3
    _log(mid.run_log(1, 0), range(1, 7))  # a new run from scratch, crashed after 6
    _log(cur.run_log(1, 0), range(5, 11))  # resumed from the checkpoint at 4
    _log(LogNames.for_run(logs, "other", "e", "20260102_000000").run_log(1, 0), range(1, 3))
    assert results.loss_logs(cur, LOGS, nnodes=1, rank=0, world_size=1) == [
        mid.run_log(1, 0),
        cur.run_log(1, 0),
    ]
    fresh = LogNames.for_run(logs, "m", "e", "20260104_000000")
    _log(fresh.run_log(1, 0), range(1, 3))
    assert results.loss_logs(fresh, LOGS, nnodes=1, rank=0, world_size=1) == [fresh.run_log(1, 0)]


def test_a_rerun_that_trained_nothing_plots_the_runs_before_it(tmp_path):
    logs = str(tmp_path / "logs")
    first = LogNames.for_run(logs, "m", "e", "20260101_000000")
    resumed = LogNames.for_run(logs, "m", "e", "20260102_000000")
    rerun = LogNames.for_run(logs, "m", "e", "20260103_000000")
    _log(first.run_log(1, 0), range(1, 7))
    _log(resumed.run_log(1, 0), range(5, 11))
    _log(rerun.run_log(1, 0), range(0), head="nothing left to train: iteration 10 of 10\n")
    assert results.loss_logs(rerun, LOGS, nnodes=1, rank=0, world_size=1) == [
        first.run_log(1, 0),
        resumed.run_log(1, 0),
    ]


def test_summary_uses_the_mindspeed_formula_over_a_steady_window(tmp_path):
    path = str(tmp_path / "run.txt")
    _log(path, range(1, 11), ms=200.0, gbs=16, head="  seq_length ..................... 1024\n")
    s = results.summarize(results.RunSummary(output_dir=str(tmp_path), steps=[], wall_s=1.0), [path], LOGS)
    assert (s.first_step, s.last_step) == (1, 10)
    assert s.loss_start == pytest.approx(10.0) and s.loss_end == pytest.approx(1.0)
    assert s.throughput["value"] == pytest.approx(16 * 1024 / (4 * 200.0) * 1000)
    assert s.throughput["steps_skipped"]  # the first iterations are left out


def test_plot_joins_segments_into_one_png(tmp_path):
    a, b = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    _log(a, range(1, 7))
    _log(b, range(5, 11))
    png = results.plot([a, b], str(tmp_path / "training_loss.png"), LOGS)
    assert png and Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = str(tmp_path / "empty.txt")
    Path(empty).write_text("no iterations here\n")
    assert results.plot([empty], str(tmp_path / "none.png"), LOGS) is None


RL_LOGS = LogSpec(
    format="verl",
    naming=LogNaming(prefix="verl_grpo-m-2048-npu"),
    loss_rank="first",
    throughput=ThroughputSpec("verl"),
    loss_keys=("actor/pg_loss",),
    plot_metrics=("critic/score/mean", "response_length/mean"),
    summary_metrics=("critic/score/mean", "response_length/mean", "actor/kl_loss"),
)


def _verl_log(path: str, steps: range) -> None:
    with open(path, "w") as f:
        for s in steps:
            f.write(
                f"(TaskRunner pid=7) step:{s} - actor/pg_loss:np.float64({0.5 / s}) - critic/score/mean:"
                f"{s / 10} - response_length/mean:{100 + s} - perf/throughput:{1000.0 + s}\n"
            )


def test_plot_draws_the_plans_metrics_the_log_has(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(results, "plot_loss", lambda records, out, *, metric: drawn.append(metric) or out)
    path = str(tmp_path / "run.txt")
    _verl_log(path, range(1, 5))
    assert results.plot([path], str(tmp_path / "p.png"), RL_LOGS)
    assert drawn[-1] == ["critic/score/mean", "response_length/mean"]
    only_loss = LogSpec(**{**RL_LOGS.__dict__, "plot_metrics": ("val-core/acc",)})
    results.plot([path], str(tmp_path / "p.png"), only_loss)
    assert drawn[-1] == ["actor/pg_loss"]  # none of the named panels logged: the loss


def test_summary_reports_the_plans_metrics_over_joined_segments(tmp_path):
    a, b = str(tmp_path / "a.txt"), str(tmp_path / "b.txt")
    _verl_log(a, range(1, 6))
    _verl_log(b, range(4, 9))  # resumed from step 3: later steps win
    s = results.summarize(results.RunSummary(output_dir=str(tmp_path), steps=[], wall_s=1.0), [a, b], RL_LOGS)
    score = s.metrics["critic/score/mean"]
    assert (score["first_step"], score["last_step"], score["count"]) == (1, 8, 8)
    assert score["first"] == pytest.approx(0.1) and score["last"] == pytest.approx(0.8)
    assert score["mean"] == pytest.approx(0.45) and (score["min"], score["max"]) == (0.1, 0.8)
    assert "actor/kl_loss" not in s.metrics  # not logged: left out
    assert s.loss_start == pytest.approx(0.5) and s.throughput["formula"]

    class Out:
        lines: list[str] = []

        def table(self, rows, title=None):
            pass

        def text(self, line):
            self.lines.append(line)

    out = Out()
    results.render_summary(s, out)
    assert "critic/score/mean: 0.1 at step 1 -> 0.8 at step 8 (mean 0.45, min 0.1, max 0.8)" in out.lines
    assert results.RunSummary.to_dict(s)["metrics"]["response_length/mean"]["last"] == 108


def test_plot_draws_the_validation_loss_of_a_megatron_log(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from ascendfactory.engine.train.logline import format_validation

    a = str(tmp_path / "a.txt")
    _log(a, range(1, 11))
    with open(a, "a", encoding="utf-8") as f:
        for prefix in (
            "iteration 5",
            "iteration 10",
            "iteration 10 on validation set",
            "iteration 10 on test set",
        ):
            f.write("\n".join(format_validation(prefix, {"lm loss": 1.5})) + "\n")
    figures, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (figures.append(self), save(self, *a, **k)))
    assert results.plot([a], str(tmp_path / "training_loss.png"), LOGS)
    lines = {line.get_label(): line for line in figures[0].axes[0].get_lines()}
    valid = next(v for k, v in lines.items() if k.endswith("(validation)"))
    assert list(valid.get_xdata()) == [5, 10] and list(valid.get_ydata()) == [1.5, 1.5]


def test_run_summary_prints_each_ranks_memory_peak(tmp_path):
    line = (
        "[Rank {r}] (after 2 iterations) memory (MB) | allocated: 10.5 | max allocated: {p} | "
        "reserved: 400.0 | max reserved: 410.0\n"
    )
    paths = []
    for rank, peak in ((0, 123.25), (1, 99.0)):
        path = tmp_path / f"run_log-N1-{rank}.txt"
        path.write_text(
            LINE.format(it=2, n=2, cs=16, ms=100.0, gbs=8, loss=1.0) + "\n" + line.format(r=rank, p=peak)
        )
        paths.append(str(path))
    s = results.RunSummary(output_dir=str(tmp_path), steps=[], wall_s=1.0)
    s.memory = results.memory_by_rank(paths, LOGS)
    assert s.memory[0]["max_allocated_mb"] == 123.25 and s.memory[1]["max_allocated_mb"] == 99.0

    class Out:
        lines: list[str] = []

        def table(self, rows, title=None):
            pass

        def text(self, line):
            self.lines.append(line)

    out = Out()
    results.render_summary(s, out)
    peaks = "peak memory (MB, max allocated | max reserved): rank 0: 123.2 | 410.0; rank 1: 99.0 | 410.0"
    assert peaks in out.lines
