"""The extension exercise (docs/architecture.md), run for real: four extensions added from outside the
package, each a distribution of its own installed into a virtual environment and found only through its
`ascendfactory.plugins` entry point (no module of ascendfactory names them, no import before `main`), and
every command sees them:

    plugin_backend/    lightning-demo: a torchrun backend with its own log format, formula and scheme
    plugin_rl/         rl-demo: a Ray RL backend (GRPO's advantage, DeepSpeed-style global_stepN + latest)
    plugin_tracker/    csvlog: a tracker (its client af_csvlog; rows for both backends above)
    plugin_scheduler/  background: a scheduler with a platform of its own (AF_PLATFORM)

The commands run with the environment's python (`python -m ascendfactory.cli.app`, this checkout on
PYTHONPATH), which is also what `submit` writes for each node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.support.ports import free_port

pytestmark = pytest.mark.integration
HERE = Path(__file__).parent
PLUGINS = ("plugin_backend", "plugin_rl", "plugin_tracker", "plugin_scheduler")


@dataclass
class Env:
    python: Path
    root: Path

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.run(
            [str(self.python), "-m", "ascendfactory.cli.app", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env=env,
        )

    def ok(self, *args: str, timeout: float = 300) -> str:
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout


@pytest.fixture(scope="module")
def plugins(tmp_path_factory) -> Env:
    """A venv (this python's packages visible) with the four plugin distributions installed (from copies:
    their builds write nothing into the repository)."""
    root = tmp_path_factory.mktemp("plugins")
    venv = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        check=True,
        timeout=120,
    )
    sources = [str(shutil.copytree(HERE / name, root / "src" / name)) for name in PLUGINS]
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--no-index", *sources],
        check=True,
        timeout=300,
    )
    return Env(venv / "bin" / "python", root)


def experiment(env: Env, backend: str, exp: str, out: Path, **options) -> Path:
    """`config` writes the plugin's own template; the test then points it at a folder and a port."""
    path = env.root / f"{backend}-{out.name}.yaml"
    env.ok(
        "config",
        f"--backend={backend}",
        "--af_model_name=qwen2.5-0.5b",
        f"--exp_name={exp}",
        f"--output_file_path={path}",
        "--force",
    )
    data = yaml.safe_load(path.read_text())
    data["af_output_dir"] = str(out)
    data["train_auto_resume"] = True
    data["env"] = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": free_port(), "NPUS_PER_NODE": 2}
    data["backend_config"].update(options)
    path.write_text(yaml.safe_dump(data))
    return path


def wait(env: Env, exp: Path, until: set[str], timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = json.loads(env.run("submit", "status", str(exp), "--json").stdout)
        if state["state"] in until or time.monotonic() > deadline:
            return state
        time.sleep(1)


def csvlog_run(out: Path) -> dict:
    """The csvlog run of an output tree, read with the tracker's own client."""
    import importlib

    entry = json.loads((out / "trackers" / "runs.json").read_text())["csvlog"]
    sys.path.insert(0, str(HERE / "plugin_tracker"))
    try:
        client = importlib.import_module("af_csvlog")
    finally:
        sys.path.remove(str(HERE / "plugin_tracker"))
    return client.read(entry["location"], entry["project"], entry["run_id"])


def test_every_command_sees_the_plugins(plugins):
    listed = plugins.ok("experiments")
    assert "lightning-demo" in listed and "rl-demo" in listed
    assert "lightning-demo driver" in plugins.ok("doctor", "--backend", "lightning-demo")
    assert "check ray" in plugins.ok("doctor", "--install-plan", "rl-demo")  # what install.sh runs
    assert "background" in plugins.ok("submit", "--help")
    rl = experiment(plugins, "rl-demo", "grpo", plugins.root / "rl-out")
    plan = json.loads(plugins.ok("train", str(rl), "--report_to=[csvlog]", "--dry-run", "--format", "json"))
    assert (plan["logs"]["format"], plan["checkpoints"]["scheme"]) == ("rl-demo", "deepspeed-latest")
    train = next(s for s in plan["steps"] if s["name"] == "train")
    assert train["argv"][-2:] == ["--logger", "csvlog"]  # the tracker's row for rl-demo
    assert plan["env"]["AF_CSVLOG_DIR"] == str(plugins.root / "rl-out" / "trackers" / "csvlog")
    memory = json.loads(plugins.ok("estimate", str(rl), "--json"))["memory"]  # its own kind of memory job
    assert memory["model"] == "rl-demo" and [s["stage"] for s in memory["stages"]] == ["rollout"]
    torch = plugins.ok(
        "train",
        str(REPO / "cfgs" / "quickstart.yaml"),
        "--report_to=[csvlog]",
        "--dry-run",
        "--format",
        "json",
    )
    argv = next(s for s in json.loads(torch)["steps"] if s["name"] == "train")["argv"]
    assert argv[argv.index("--af-report-to") + 1] == "csvlog"  # the embedded trainer opens it itself
    k8s = plugins.ok(
        "submit", "k8s", "--kind", "volcano", str(rl), "--image", "img:1", "--gpus-per-node", "2", "--dry-run"
    )
    assert f"- {rl}" in k8s  # planned as its first pod would (a dry run that found the plugin)
    unknown = plugins.run("train", str(rl), "--report_to=[csvlg]", "--dry-run")
    assert unknown.returncode == 2 and "csvlog" in unknown.stderr  # the valid names include the plugin's


def test_a_plugin_backend_submitted_to_a_plugin_scheduler_reports_to_a_plugin_tracker(plugins):
    """`submit background` runs lightning-demo's job; cancelled, its csvlog run is killed; resubmitted, it
    resumes, finishes and continues the same run; `logs` reads its log by the plugin's format."""
    out = plugins.root / "lightning-out"
    exp = experiment(plugins, "lightning-demo", "pt", out, steps=400, save_every=2, step_sleep=0.2)
    submitted = plugins.ok("submit", "background", str(exp), "--report_to=[csvlog]")
    assert "submitted background job" in submitted
    deadline = time.monotonic() + 180
    while not list((out / "checkpoints").glob("step=*-last")) and time.monotonic() < deadline:
        time.sleep(0.5)
    cancelled = plugins.ok("submit", "cancel", str(exp), "--report_to=[csvlog]")
    assert "cancelled background job" in cancelled
    state = wait(plugins, exp, {"CANCELLED", "FAILED", "COMPLETED"})
    assert state["state"] == "CANCELLED", state
    run = csvlog_run(out)
    assert run["state"] == "killed"
    stopped_at = max(run["metrics"]["reduced_train_loss"])

    exp.write_text(exp.read_text().replace("steps: 400", f"steps: {stopped_at + 4}"))
    plugins.ok("submit", "background", str(exp), "--report_to=[csvlog]")
    state = wait(plugins, exp, {"CANCELLED", "FAILED", "COMPLETED"})
    assert state["state"] == "COMPLETED", state
    run = csvlog_run(out)
    assert run["state"] == "finished" and {"training_loss.png", "exp-config.yaml"} <= set(run["files"])
    steps = run["metrics"]["reduced_train_loss"]
    assert max(steps) == stopped_at + 4  # the same run, continued by the resumed job
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert run["metrics"]["summary/loss_end"][0] == [pytest.approx(summary["loss_end"])]

    (log,) = [p for p in (out / "logs").glob("lightning-*-run_log-N1-0.txt") if "resumed" in p.read_text()]
    found = json.loads(plugins.ok("logs", "summary", str(log), "--json"))
    assert found["format"] == "lightning-demo"  # sniffed among the formats, the plugin's included
    assert found["convergence"]["metric"] == "reduced_train_loss"  # the format's declared loss key
    exported = plugins.ok("logs", "export", str(log), str(plugins.root / "exported"), "--to", "csvlog")
    assert "records written" in exported and "run " in exported


@pytest.mark.slow  # a Ray cluster of one node: ~30 s here
def test_the_ray_rl_plugin_trains_and_reports_through_its_framework(plugins):
    out = plugins.root / "rl-run"
    exp = experiment(plugins, "rl-demo", "grpo", out, steps=6, save_every=2, save_total_limit=2)
    plugins.ok("train", str(exp), "--report_to=[csvlog]", timeout=600)
    assert (out / "saved_checkpoints" / "latest").read_text() == "global_step6"
    assert sorted(p.name for p in (out / "saved_checkpoints").glob("global_step*")) == [
        "global_step4",
        "global_step6",
    ]
    run = csvlog_run(out)
    assert run["state"] == "finished" and sorted(run["metrics"]["reward"]) == [1, 2, 3, 4, 5, 6]
    summary = json.loads((out / ".af" / "summary.json").read_text())
    assert summary["throughput"]["formula"] == "rl-demo" and summary["metrics"]["reward"]["last"] > 0
