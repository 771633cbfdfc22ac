"""A backend from outside the package brings its own log format, throughput formula and checkpoint scheme
(`plugin_backend/`: a torchrun job that logs Lightning-style lines and saves `step=N-...` directories), and
the real CLI, runner, auto-resume, retention, run summary and `logs summary` use them, with nothing in
`ascendfactory/` naming them: the "new backend with a new log format" exercise (docs/architecture.md), run for
real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.ports import free_port

pytestmark = pytest.mark.integration

CLI = [sys.executable, str(Path(__file__).parent / "plugin_backend" / "cli.py")]
REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path: Path, **options) -> Path:
    cfg = {
        "backend": "lightning-demo",
        "af_model_name": "qwen2.5-0.5b",
        "exp_name": "plugin",
        "af_output_dir": str(tmp_path / "out"),
        "train_auto_resume": True,
        "auto_resume": {"backoff_s": 0},
        "env": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_port(), "NPUS_PER_NODE": 2},
        "backend_config": options,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, cwd=REPO)


def test_a_plugin_backend_runs_with_its_own_format_formula_and_scheme(tmp_path):
    path = experiment(tmp_path, steps=8, save_every=2, save_total_limit=2, fail_at=5)
    plan = json.loads(cli("train", str(path), "--dry-run", "--format", "json").stdout)
    assert plan["logs"]["format"] == "lightning-demo"
    assert plan["logs"]["throughput"] == "lightning-demo"
    assert plan["checkpoints"]["scheme"] == "lightning-steps"

    run = cli("train", str(path))
    assert run.returncode == 0, run.stdout + run.stderr
    text = run.stdout + run.stderr
    assert "auto-resume 1/3 from step=4-consumed_samples=128" in text  # the scheme's resume point
    assert "re-planned train: resumes from step=4-consumed_samples=128" in text
    out = tmp_path / "out"
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert (summary["first_step"], summary["last_step"]) == (1, 8)  # both attempts' logs, by the new parser
    assert summary["loss_end"] < summary["loss_start"] / 10
    assert summary["throughput"]["formula"] == "lightning-demo"
    assert summary["throughput"]["value"] > 0 and summary["throughput"]["unit"] == "tokens/s/device"
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())  # retention by the plugin's scheme
    assert kept == [
        "step=6-consumed_samples=192",
        "step=8-consumed_samples=256",
        "step=8-consumed_samples=256-last",
    ]
    assert (out / "training_loss.png").stat().st_size > 0

    (log,) = (out / "logs").glob("lightning-*-run_log-N1-0.txt")
    detected = cli("logs", "summary", str(log), "--json")
    assert detected.returncode == 0, detected.stderr
    found = json.loads(detected.stdout)
    assert found["format"] == "lightning-demo"  # sniffed among the built-in formats
    assert found["convergence"]["metric"] == "reduced_train_loss"  # the format's declared loss key


def test_without_the_plugin_its_experiment_is_refused_before_anything_runs(tmp_path):
    """The plain CLI, which has not imported the plugin, refuses its experiment on a dry run."""
    path = experiment(tmp_path, steps=2)
    plain = subprocess.run(
        [sys.executable, "-m", "ascendfactory.cli.app", "train", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert plain.returncode != 0
    assert "unknown backend 'lightning-demo'" in plain.stdout + plain.stderr
