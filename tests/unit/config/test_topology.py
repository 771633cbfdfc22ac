"""Precedence of the topology (command line > experiment file > platform > defaults), the refusals, and what
`train --dry-run` shows; the ModelArts section of the README, through its environment variables."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from ascendfactory.cli.app import app
from ascendfactory.config.load import load_experiment
from ascendfactory.config.topology import with_platform
from ascendfactory.errors import ConfigError
from tests.conftest import REPO

SLURM_NODE1 = {  # node 1 of a 2-node Slurm job
    "SLURM_JOB_ID": "7",
    "SLURM_NODEID": "1",
    "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "gpu[1-2]",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
}


def experiment(tmp_path, env: dict | None) -> str:
    data = yaml.safe_load((REPO / "cfgs" / "quickstart.yaml").read_text())
    data["af_output_dir"] = str(tmp_path / "out")
    data["backend_config"]["preprocess_data"]["input"] = str(REPO / "cfgs" / "data" / "demo_sft.jsonl")
    if env is None:
        data.pop("env")
    else:
        data["env"] = env
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_platform_fills_what_the_file_leaves_unset(tmp_path):
    loaded = load_experiment(experiment(tmp_path, {"MASTER_PORT": 29999}))
    got = with_platform(loaded, SLURM_NODE1)
    env = got.config.env
    assert (env.NNODES, env.NODE_RANK, env.MASTER_ADDR, env.MASTER_PORT) == (2, 1, "gpu1", 29999)
    assert got.topology["NODE_RANK"] == "SLURM_NODEID=1 (Slurm)"
    assert got.topology["MASTER_ADDR"] == "first of SLURM_JOB_NODELIST=gpu[1-2] (Slurm)"
    assert got.topology["MASTER_PORT"] == loaded.source  # the file beats the platform
    assert got.source_of("env.NODE_RANK") == "SLURM_NODEID=1 (Slurm)"
    assert loaded.config.env.NODE_RANK == 0  # the loaded experiment itself is left as it was


def test_command_line_beats_the_platform(tmp_path):
    loaded = load_experiment(experiment(tmp_path, None), ["--env.MASTER_ADDR=10.0.0.9", "--env.NODE_RANK=0"])
    got = with_platform(loaded, SLURM_NODE1)
    assert (got.config.env.MASTER_ADDR, got.config.env.NODE_RANK, got.config.env.NNODES) == ("10.0.0.9", 0, 2)
    assert got.topology["MASTER_ADDR"] == got.topology["NODE_RANK"] == "command line"
    assert got.topology["NNODES"].startswith("SLURM_NNODES=2")


def test_defaults_without_a_platform(tmp_path):
    got = with_platform(load_experiment(experiment(tmp_path, None)), {})
    assert set(got.topology.values()) == {"default"} and got.platform is None
    assert (got.config.env.NNODES, got.config.env.NODE_RANK, got.config.env.MASTER_ADDR) == (
        1,
        0,
        "localhost",
    )


def test_a_file_pinning_what_each_node_must_differ_in_is_refused(tmp_path):
    loaded = load_experiment(experiment(tmp_path, {"NNODES": 1, "NODE_RANK": 0, "MASTER_ADDR": "localhost"}))
    with pytest.raises(ConfigError) as e:
        with_platform(loaded, SLURM_NODE1)
    keys = [p.key for p in e.value.problems]
    assert keys == ["env.NNODES", "env.NODE_RANK", "env.MASTER_ADDR"]
    assert "Slurm runs this command on 2 nodes" in str(e.value) and "remove env.NNODES" in str(e.value)


def test_a_file_agreeing_with_the_platform_is_fine(tmp_path):
    loaded = load_experiment(experiment(tmp_path, {"NNODES": 2, "MASTER_ADDR": "gpu1"}))
    got = with_platform(loaded, SLURM_NODE1)
    assert got.config.env.NODE_RANK == 1 and got.topology["NNODES"] == loaded.source


def test_several_tasks_per_node_refused_unless_the_rank_is_given(tmp_path):
    environ = {**SLURM_NODE1, "SLURM_STEP_TASKS_PER_NODE": "2"}
    with pytest.raises(ConfigError, match="2 tasks per node"):
        with_platform(load_experiment(experiment(tmp_path, None)), environ)
    loaded = load_experiment(experiment(tmp_path, None), ["--env.NODE_RANK=1"])
    assert with_platform(loaded, environ).config.env.NODE_RANK == 1


runner = CliRunner()


def dry_run_json(args: list[str], environ: dict[str, str], monkeypatch) -> dict:
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    r = runner.invoke(app, ["train", *args, "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_modelarts_boot_command_as_the_readme_shows(tmp_path, monkeypatch):
    """README "ModelArts": boot command `ascendfactory-cli train exp.yaml`, env without topology keys."""
    exp = experiment(tmp_path, {"MASTER_PORT": 29517})
    plan = dry_run_json(
        [exp],
        {
            "MA_NUM_HOSTS": "2",
            "VC_TASK_INDEX": "1",
            "VC_WORKER_NUM": "2",
            "VC_WORKER_HOSTS": "ma-job-x-worker-0.ma-job-x,ma-job-x-worker-1.ma-job-x",
            "MA_NUM_GPUS": "2",
        },
        monkeypatch,
    )
    topo = plan["facts"]["topology"]
    assert plan["facts"]["platform"] == "ModelArts"
    assert topo["NODE_RANK"] == {"value": 1, "source": "VC_TASK_INDEX=1 (ModelArts)"}
    assert topo["NNODES"]["value"] == 2 and topo["NNODES"]["source"].startswith("MA_NUM_HOSTS=2")
    assert topo["MASTER_ADDR"]["value"] == "ma-job-x-worker-0.ma-job-x"
    assert topo["NPUS_PER_NODE"] == {"value": 2, "source": "MA_NUM_GPUS=2 (ModelArts)"}
    assert plan["facts"]["world_size"] == 4
    train = next(s for s in plan["steps"] if s["name"] == "train")
    argv = " ".join(train["argv"])
    assert "--nnodes 2" in argv and "--node_rank 1" in argv
    assert "--master_addr ma-job-x-worker-0.ma-job-x" in argv


def test_dry_run_text_names_each_source(tmp_path, monkeypatch):
    exp = experiment(tmp_path, {"MASTER_PORT": 29517})
    for k, v in {**SLURM_NODE1, "SLURM_JOB_NODELIST": "gpu1,gpu2"}.items():
        monkeypatch.setenv(k, v)
    r = runner.invoke(app, ["train", exp, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "topology (platform: Slurm):" in r.stdout
    assert "NODE_RANK=1  <- SLURM_NODEID=1 (Slurm)" in r.stdout
    assert f"MASTER_PORT=29517  <- {exp}" in r.stdout


def test_rank_beyond_the_default_node_count_is_refused_without_a_platform(tmp_path):
    loaded = load_experiment(experiment(tmp_path, None), ["--env.NODE_RANK=3"])  # loads: a platform may say
    with pytest.raises(ConfigError) as e:
        with_platform(loaded, {})
    assert "NODE_RANK (3, from command line) must be < NNODES (1, from default)" in str(e.value)
