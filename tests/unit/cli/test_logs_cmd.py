"""`ascendfactory-cli logs ...` through typer's CliRunner."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from ascendfactory.cli import logs_cmd
from ascendfactory.cli._output import out
from ascendfactory.cli.app import main

try:  # the whole app when its other command modules import; else the logs group alone
    from ascendfactory.cli.app import app as _app

    PREFIX: list[str] = ["logs"]
except ImportError:
    _app, PREFIX = logs_cmd.app, []

runner = CliRunner()
LINE = (
    "iteration {i:4d}/  100 | consumed samples: {c} | elapsed time per iteration (ms): {ms} | "
    "global batch size: 8 | lm loss: {loss:.6E} | number of nan iterations: 0 |"
)


@pytest.fixture(autouse=True)
def _human_mode():
    yield
    out.mode = "human"


def invoke(*args: str):
    return runner.invoke(_app, [*PREFIX, *args])


@pytest.fixture
def run_log(tmp_path):
    path = tmp_path / "run_log.txt"
    path.write_text(
        "\n".join(
            LINE.format(i=i, c=8 * i, ms=2000.0 if i == 1 else 1000.0, loss=3.0 - 0.02 * i)
            for i in range(1, 41)
        )
        + "\n"
    )
    return path


def test_module_is_light():
    code = (
        "import sys, ascendfactory.cli.logs_cmd; "
        "print(any(m in sys.modules for m in ('torch', 'matplotlib')))"
    )
    import subprocess

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


def test_summary_json(run_log):
    res = invoke(
        "summary", str(run_log), "--seq-length", "4096", "--devices", "8", "--device", "910B3", "--json"
    )
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["format"] == "megatron" and data["num_steps"] == 40
    assert data["metrics"]["lm loss"]["min"] == pytest.approx(2.2)
    tp = data["throughput"][0]
    assert tp["value"] == pytest.approx(8 * 4096 / (8 * 1000.0) * 1000) and tp["window"] == [5, 40]
    assert data["convergence"]["verdict"] == "converging"


def test_summary_human_and_steps(run_log):
    res = invoke("summary", str(run_log), "--steps", "10:20")
    assert res.exit_code == 0, res.output
    assert "steps 10-20" in res.output and "convergence" in res.output and "lm loss" in res.output


def test_summary_errors(run_log, tmp_path):
    res = invoke("summary", str(run_log), "--device", "tpu")
    assert res.exit_code != 0 and "910b3" in str(res.exception).lower()
    res = invoke("summary", str(tmp_path / "missing.log"))
    assert res.exit_code != 0 and "not found" in str(res.exception)


def test_compare_json_and_plot(run_log, tmp_path):
    other = tmp_path / "b.log"
    other.write_text(run_log.read_text().replace("E+00 |", "E+00 |", 1))
    png = tmp_path / "cmp.png"
    res = invoke("compare", str(run_log), str(other), "--plot", str(png), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["metric"] == "lm loss" and data["within_tolerance"] == 1.0 and data["aligned_steps"] == 40
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plot_and_export(run_log, tmp_path):
    png = tmp_path / "loss.png"
    res = invoke("plot", str(run_log), "-o", str(png), "--smoothing", "0.8")
    assert res.exit_code == 0, res.output and png.exists()
    res = invoke("plot", str(run_log), "--smoothing", "1.5")
    assert res.exit_code != 0
    res = invoke("export", str(run_log), str(tmp_path / "m.jsonl"), "--to", "jsonl", "--json")
    assert res.exit_code == 0 and json.loads(res.output)["records"] == 40
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 40


def test_help_has_examples():
    for cmd in ("summary", "compare", "plot", "export"):
        res = invoke(cmd, "--help")
        assert res.exit_code == 0 and "Examples" in res.output


def test_plot_reads_megatron_logs_column_wise(run_log, tmp_path):
    """`logs plot` on a Megatron log goes through `metrics.columns`; the series equal the parser's."""
    from ascendfactory.metrics import StepTable, parse_file
    from ascendfactory.metrics.plot import table_for_plot

    for fmt in (None, "megatron", "mindspeed-llm"):
        table = table_for_plot(run_log, fmt, None)
        assert table.series("lm loss") == StepTable.from_records(parse_file(run_log)).series("lm loss")
        assert len(table.series("lm loss")[0]) == 40 and table.wall[0] != table.wall[0]  # no wall times
    mixed = table_for_plot(run_log, None, ["lm loss", "global batch size"])
    assert mixed.series("global batch size")[1] == [8.0] * 40
    res = invoke("plot", str(tmp_path / "missing.log"), "--format", "megatron")
    assert res.exit_code != 0 and "log file not found" in str(res.exception)  # main() prints it


def _megatron_run(root):
    """An output directory of a 2-rank Megatron run: the loss on rank 1, exp-config.yaml beside logs/."""
    logs = root / "logs"
    logs.mkdir(parents=True)
    (logs / "m-e-20260101_000000-run_log-N1-0.txt").write_text(
        "using world size: 2\n loading checkpoint from ./w at iteration 1\n"
    )
    lines = [
        f" iteration {i:8d}/      20 | consumed samples: {16 * i:12d} |"
        " elapsed time per iteration (ms): 100.0 |"
        f" learning rate: 1.0E-03 | global batch size:    16 | lm loss: {7 - i / 10:.6E} | loss scale: 1.0 |"
        for i in range(1, 21)
    ]
    (logs / "m-e-20260101_000000-run_log-N1-1.txt").write_text("\n".join(lines) + "\n")
    (root / "exp-config.yaml").write_text(
        "env: {NNODES: 1, NPUS_PER_NODE: 2}\nbackend_config:\n  training: {seq-length: 128}\n"
    )
    return logs


def test_summary_of_a_logs_directory_reads_the_loss_rank_and_the_runs_seq_length(tmp_path, capsys):
    logs = _megatron_run(tmp_path)
    assert main(["logs", "summary", str(logs)]) == 0
    printed = capsys.readouterr()
    assert "run_log-N1-1.txt  [megatron]  steps 1-20" in printed.out
    assert "seq_length 128 from" in printed.err and "devices 2 from" in printed.err
    # 16 x 128 tokens per 100 ms over 2 devices
    assert "throughput tokens/s/p: 10,240.0 tokens/s/device" in printed.out


def test_summary_of_rank_0_names_the_rank_that_logs_the_loss(tmp_path, capsys):
    logs = _megatron_run(tmp_path)
    assert main(["logs", "summary", str(logs / "m-e-20260101_000000-run_log-N1-0.txt")]) == 0
    err = capsys.readouterr().err
    assert "has no training steps: this run prints them in m-e-20260101_000000-run_log-N1-1.txt" in err


def test_summary_shows_each_ranks_memory_peak(run_log, tmp_path):
    """Several ranks' Megatron memory reports in one log (torchrun's stdout): one row per rank."""
    mem = (
        "[Rank {r}] (after 1 iterations) memory (MB) | allocated: {a} | max allocated: {p} | "
        "reserved: 900.0 | max reserved: 950.5"
    )
    path = tmp_path / "ranks.log"
    path.write_text(
        run_log.read_text()
        + mem.format(r=0, a=100.25, p=321.5)
        + "\n"
        + mem.format(r=2, a=90.0, p=210.0)
        + "\n"
    )
    res = invoke("summary", str(path), "--json")
    assert res.exit_code == 0, res.output
    by_rank = json.loads(res.output)["memory_by_rank"]
    assert by_rank["0"]["max_allocated_mb"] == 321.5 and by_rank["2"]["max_allocated_mb"] == 210.0
    assert by_rank["2"]["step"] == 1 and by_rank["0"]["max_reserved_mb"] == 950.5
    out.mode = "human"
    res = invoke("summary", str(path))
    assert res.exit_code == 0, res.output
    assert "321.5" in res.output and "210" in res.output and "max allocated" in res.output


def _trainer_log(path, tokens_per_step: int, steps: int):
    rows = [
        {"current_steps": i, "total_steps": steps, "loss": 7 - i / 10, "lr": 1e-3, "epoch": i / steps,
         "percentage": 100 * i / steps, "elapsed_time": "0:00:01", "remaining_time": "0:00:01",
         "total_tokens": tokens_per_step * i}
        for i in range(1, steps + 1)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_compare_by_tokens_reads_the_runs_seq_length_and_plots_legibly(tmp_path, capsys, monkeypatch):
    """The README's cross-framework example: a Megatron log without its arguments dump, its seq-length in
    exp-config.yaml beside logs/ (as `logs summary` reads it), against LLaMA-Factory's trainer_log.jsonl."""
    from ascendfactory.metrics import plot as plot_mod

    figures = []
    figure, canvas = plot_mod._matplotlib()

    class Recorded(figure):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            figures.append(self)

    monkeypatch.setattr(plot_mod, "_matplotlib", lambda: (Recorded, canvas))
    logs = _megatron_run(tmp_path / "mega")
    (tmp_path / "lf").mkdir()
    lf = _trainer_log(tmp_path / "lf" / "trainer_log.jsonl", 16 * 128 * 10, 2)
    png = tmp_path / "c.png"
    code = main(["logs", "compare", str(logs / "m-e-20260101_000000-run_log-N1-1.txt"), str(lf),
                 "--metric", "loss", "--align", "tokens", "--plot", str(png)])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "seq_length 128 of m-e-20260101_000000-run_log-N1-1.txt from" in printed.err
    assert "of 11 steps within" in printed.out and png.stat().st_size > 1000  # tokens 20480..40960
    top, bottom = figures[-1].axes
    assert bottom.get_xlabel() == "tokens seen" and bottom.get_ylabel() == "(A - B) / A (%)"
    assert all(line.get_marker() == "o" for line in top.get_lines())
    legend = [t.get_text() for t in top.get_legend().get_texts()]
    assert legend[0].startswith("A: ") and legend[1].startswith("B: ")


def test_plot_takes_a_run_folder_and_the_rank_0_log(tmp_path, capsys):
    logs = _megatron_run(tmp_path)
    assert main(["logs", "plot", str(logs), "-o", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 1000
    rank0 = logs / "m-e-20260101_000000-run_log-N1-0.txt"
    assert main(["logs", "plot", str(rank0), "-o", str(tmp_path / "b.png")]) == 0
    assert "has no training steps: reading m-e-20260101_000000-run_log-N1-1.txt" in capsys.readouterr().err
    alone = tmp_path / "alone.txt"
    alone.write_text("using world size: 2\n")
    assert main(["logs", "plot", str(alone), "-o", str(tmp_path / "c.png")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--metric: no loss or reward found in" in err and "metric=" not in err
    assert "with --metric" in err
