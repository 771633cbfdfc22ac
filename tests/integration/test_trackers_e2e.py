"""Trackers with their real clients, without a training run: a resumed run continues the MLflow run and the
W&B run id kept in the output tree (the pipeline's side and the embedded trainer's side), and
`logs export --to mlflow|wandb` turns a real log into a tracker run. (The quickstart and the LLaMA-Factory
integration tests report to MLflow / W&B through a real training run: tracker_readback.py.)"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ascendfactory.engine.train import trackers as trainer_trackers
from ascendfactory.pipeline.results import RunSummary
from ascendfactory.pipeline.tracking import RunTracking
from ascendfactory.plan import TrackerSpec, Tracking
from ascendfactory.trackers import tracker_env
from tests.integration.tracker_readback import (
    mlflow_run,
    mlflow_series,
    run_ids,
    wandb_segments,
    wandb_series,
)

pytestmark = pytest.mark.integration
pytest.importorskip("mlflow")
pytest.importorskip("wandb")


def tracking_for(out: Path) -> Tracking:
    root = out / "trackers"
    specs = (
        TrackerSpec(
            "mlflow",
            "proj",
            "run",
            location=f"sqlite:///{root}/mlflow/mlflow.db",
            artifacts=str(root / "mlflow" / "artifacts"),
            resume_env=(("MLFLOW_MAX_LOG_PARAMS", "0"),),
        ),
        TrackerSpec("wandb", "proj", "run", location=str(root), mode="offline"),
    )
    return Tracking(specs, params=(("experiment.lr", "0.1"),), runs_file=str(root / "runs.json"))


def train_segment(tracking: Tracking, env: dict[str, str], monkeypatch, steps: dict[int, float]) -> None:
    """What the embedded trainer does on its loss rank: its flags plus the variables the runner sets."""
    for spec in tracking.specs:
        for k, v in {**tracker_env(spec), **env}.items():
            monkeypatch.setenv(k, v)
    args = argparse.Namespace(
        wandb_project="proj",
        wandb_exp_name="run",
        wandb_save_dir=tracking.spec("wandb").location,
        save=None,
        af_report_to=["mlflow"],
    )
    sinks = trainer_trackers.open_sinks(args, params={"lr": 0.1, "train_iters": 2}, warn=pytest.fail)
    assert len(sinks.sinks) == 2
    for step, loss in steps.items():
        sinks.log_metrics({"loss": loss}, step)
    sinks.close(state="finished")


def test_a_resumed_run_continues_its_mlflow_run_and_wandb_id(tmp_path, monkeypatch):
    out, warnings = tmp_path / "out", []
    tracking = tracking_for(out)
    first = RunTracking(tracking, warn=warnings.append)
    assert [line.split()[0] for line in first.prepare()] == ["mlflow", "wandb"]
    env = first.env()
    assert set(env) == {"MLFLOW_RUN_ID", "WANDB_RUN_ID", "WANDB_RESUME"}  # a new run: no resume variables
    train_segment(tracking, env, monkeypatch, {1: 2.0})
    (out / "exp-config.yaml").write_text("lr: 0.1\n")
    first.report(
        RunSummary(str(out), [], 1.0, loss_start=2.0, loss_end=2.0, last_step=1),
        [str(out / "exp-config.yaml")],
    )
    ids = run_ids(out)

    second = RunTracking(tracking, warn=warnings.append)  # the same command again: it resumes
    assert all("(continues)" in line for line in second.prepare())
    env2 = second.env()
    assert env2["MLFLOW_RUN_ID"] == env["MLFLOW_RUN_ID"] and env2["WANDB_RUN_ID"] == env["WANDB_RUN_ID"]
    assert env2["MLFLOW_MAX_LOG_PARAMS"] == "0"  # the framework's variables for a continued run
    train_segment(tracking, env2, monkeypatch, {2: 1.0})
    second.report(
        RunSummary(str(out), [], 1.0, loss_start=2.0, loss_end=1.0, last_step=2), [], state="failed"
    )
    assert run_ids(out) == ids and not warnings

    client, run = mlflow_run(out)
    assert len(client.search_runs([run.info.experiment_id])) == 1
    assert mlflow_series(client, run.info.run_id, "loss") == {1: 2.0, 2: 1.0}
    assert run.data.params["experiment.lr"] == "0.1" and run.data.params["train_iters"] == "2"
    assert run.data.metrics["summary/loss_end"] == 1.0 and run.info.status == "FAILED"
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["exp-config.yaml"]
    segments = wandb_segments(out / "trackers")
    assert len(segments) == 4 and {s.run_id for s in segments} == {ids["wandb"]["run_id"]}
    assert wandb_series(segments, "loss") == {1: 2.0, 2: 1.0}


def megatron_log(path: Path, losses: dict[int, float]) -> Path:
    """A run log in Megatron's format, written by the embedded trainer's own line formatter."""
    from ascendfactory.engine.train.logline import IterationStats, format_training_log

    lines = [
        format_training_log(
            IterationStats(
                iteration=i,
                train_iters=len(losses),
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
        )
        for i, loss in losses.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_logs_export_turns_a_log_into_mlflow_and_wandb_runs(tmp_path):
    losses = {1: 3.0, 2: 2.5, 3: 2.25}
    source = megatron_log(tmp_path / "run_log-N1-0.txt", losses)
    from typer.testing import CliRunner

    from ascendfactory.cli._output import out
    from ascendfactory.cli.app import app

    def export(*args: str):
        try:
            return CliRunner().invoke(app, ["logs", "export", str(source), *args])
        finally:
            out.mode = "human"

    ml = export(str(tmp_path / "ml"), "--to", "mlflow", "--project", "imported")
    assert ml.exit_code == 0 and "3 records written" in ml.stdout, ml.stdout
    wb = export(str(tmp_path / "wb"), "--to", "wandb", "--run-name", "node0")
    assert wb.exit_code == 0, wb.stdout
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/ml/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("imported").experiment_id])
    assert mlflow_series(client, run.info.run_id, "lm loss") == losses
    assert mlflow_series(client, run.info.run_id, "elapsed time per iteration _ms_") == {
        1: 100.0,
        2: 100.0,
        3: 100.0,
    }
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == [source.name]
    assert run.data.params["source"] == str(source)
    (seg,) = wandb_segments(tmp_path / "wb")
    assert seg.name == "node0" and seg.project == tmp_path.name
    assert wandb_series([seg], "lm loss") == losses and source.name in seg.files


def test_an_interrupted_run_is_killed_in_mlflow_and_its_rerun_logs_no_step_twice(tmp_path, demo_model):
    """Ctrl-C during training ends the MLflow run KILLED (not RUNNING); the re-run continues the same run,
    resumes from the newest checkpoint and leaves every step with one value."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO
    from tests.support.ports import free_port

    out = tmp_path / "out"
    argv = [
        sys.executable,
        "-m",
        "ascendfactory.cli.app",
        "train",
        str(REPO / "cfgs" / "quickstart.yaml"),
        f"--af_output_dir={out}",
        f"--backend_config.training.tokenizer-name-or-path={demo_model}",
        f"--env.MASTER_PORT={free_port()}",
        "--backend_config.training.train-iters=12",
        "--backend_config.training.save-interval=4",
        "--backend_config.training.log-interval=1",
        "--report_to=[mlflow]",
        "--convert_mg2hf_at_last=false",
    ]
    first = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and first.poll() is None:
        logs = list((out / "logs").glob("*run_log-N1-1.txt")) if (out / "logs").is_dir() else []
        if logs and "iteration        6/" in logs[0].read_text(errors="replace"):
            break
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    text = first.communicate(timeout=120)[0]
    assert first.returncode == 130, text[-3000:]
    client, run = mlflow_run(out)
    assert run.info.status == "KILLED", text[-3000:]
    before = client.get_metric_history(run.info.run_id, "loss")
    assert max(m.step for m in before) >= 6

    again = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    client, run = mlflow_run(out)
    assert run.info.status == "FINISHED" and len(client.search_runs([run.info.experiment_id])) == 1
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
    assert sorted(steps) == list(range(1, 13))  # every step once, though steps 5-6 trained twice


def test_the_readmes_mlflow_browsing_works_with_the_extra_it_installs(tmp_path):
    """docs/trackers.md's snippet, verbatim, reads a store with the `[mlflow]` extra's client (no pandas, no
    flask: what `search_runs` as a DataFrame and `mlflow ui` need is named as the full package)."""
    import re
    import subprocess
    import sys

    from ascendfactory.trackers import open_run
    from tests.conftest import REPO

    readme = (REPO / "docs" / "trackers.md").read_text()
    bullet = readme[readme.index("- **Browsing an MLflow store**") :]
    bullet = bullet[: bullet.index("\n- **")]
    (code,) = re.findall(r"```python\n(.*?)```", bullet, flags=re.S)
    code = "\n".join(line.removeprefix("  ") for line in code.splitlines())
    store = "sqlite:///outputs/tiny-demo-quickstart-sft/trackers/mlflow/mlflow.db"
    assert (
        store in code
        and "pip install mlflow`" in bullet
        and bullet.index("pip install mlflow") < bullet.index("mlflow ui")
    )
    spec = TrackerSpec(
        "mlflow", "tiny-demo", "quickstart-sft", location=store.replace("outputs", f"{tmp_path}/outputs", 1)
    )
    sink = open_run(spec)
    sink.log_metrics({"loss": 1.5}, 3)
    sink.close(state="finished")
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [sink.run_id, "FINISHED", "1.5"]
