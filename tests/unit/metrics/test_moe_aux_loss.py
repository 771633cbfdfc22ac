"""A mixture-of-experts run's load-balancing loss, as Megatron logs it beside the LM loss (core_r0.8.0
megatron/core/transformer/moe/moe_utils.py `track_moe_metrics` adds each tracked aux loss to the losses the
iteration line prints), in `logs summary` and in the loss plot."""

from __future__ import annotations

import json
from pathlib import Path

from ascendfactory.cli.app import main
from ascendfactory.metrics.plot import default_metrics, plot_loss, table_for_plot

LINE = (
    " [2025-06-01 10:00:{s:02d}] iteration {i:8d}/      20 | consumed samples: {c:12d} | elapsed time per "
    "iteration (ms): 812.4 | learning rate: 1.000000E-05 | global batch size:     8 | lm loss: {lm:.6E} | "
    "load_balancing_loss: {lb:.6E} | loss scale: 1.0 | grad norm: 3.210 | number of skipped iterations: "
    "  0 | number of nan iterations:   0 |"
)


def _log(path: Path) -> Path:
    lines = [LINE.format(s=i, i=i, c=8 * i, lm=10.0 - 0.3 * i, lb=1.2 - 0.01 * i) for i in range(1, 21)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_summary_lists_the_load_balancing_loss_beside_the_lm_loss(tmp_path, capsys):
    log = _log(tmp_path / "run.log")
    assert main(["logs", "summary", str(log), "--json"]) == 0
    metrics = list(json.loads(capsys.readouterr().out)["metrics"])
    assert metrics.index("load_balancing_loss") == metrics.index("lm loss") + 1
    assert main(["logs", "summary", str(log)]) == 0
    table = [ln for ln in capsys.readouterr().out.splitlines() if "loss" in ln]
    assert "lm loss" in table[0] and "load_balancing_loss" in table[1]


def test_the_plot_draws_it_in_a_panel_under_the_lm_loss(tmp_path):
    log = _log(tmp_path / "run.log")
    table = table_for_plot(log)  # the column reader: the loss and the MoE aux losses
    assert default_metrics([table]) == ["lm loss", "load_balancing_loss"]
    steps, values = table.series("load_balancing_loss")
    assert steps == list(range(1, 21)) and abs(values[0] - 1.19) < 1e-9
    out = plot_loss(log, tmp_path / "loss.png")
    assert out.stat().st_size > 0
    dense = tmp_path / "dense.log"
    dense.write_text(log.read_text().replace("load_balancing_loss", "other"))
    assert default_metrics([table_for_plot(dense)]) == ["lm loss"]
