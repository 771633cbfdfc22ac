"""`submit slurm` against a real Slurm (slurm_cluster.py: Debian's daemons, two nodes on this host): the
quickstart finishes with the documented tree; `submit cancel` mid-run, then a new submit resumes from the
checkpoint; a failing job's error is what `submit status` shows; a two-node job where each node takes its
rank from SLURM_NODEID and node 0's name from the node list."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.integration import slurm_cluster
from tests.integration.test_quickstart_e2e import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(slurm_cluster.missing() is not None, reason=str(slurm_cluster.missing())),
]
QUICK = str(REPO / "cfgs" / "quickstart.yaml")
CLI = [sys.executable, "-m", "ascendfactory.cli.app"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    slurm_cluster.stop(cluster)


def cli(cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=timeout
    )


def short(out: Path, model: Path, *extra: str) -> list[str]:
    return [
        f"--af_output_dir={out}",
        f"--backend_config.training.tokenizer-name-or-path={model}",
        f"--env.MASTER_PORT={free_port()}",
        "--backend_config.training.log-interval=1",
        "--backend_config.training.eval-iters=1",
        *extra,
    ]


def submit(cluster, exp: str, *args: str) -> str:
    proc = cli(cluster, "submit", "slurm", exp, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = re.search(r"submitted slurm job (\d+)", proc.stdout)
    assert job, proc.stdout
    return job.group(1)


def status(cluster, job: str) -> dict:
    proc = cli(cluster, "submit", "status", job, "--json")
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def wait(cluster, job: str, until, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = status(cluster, job)
        if until(st):
            return st
        time.sleep(1)
    pytest.fail(f"job {job}: {what} not reached in {timeout:g} s; last {st}\n{cluster.logs()}")


def finished(st: dict) -> bool:
    return st["state"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED")


def node_log(out: Path, job: str, node: int) -> str:
    return (out / "logs" / f"slurm-{job}-node{node}.out").read_text(errors="replace")


def iterations(out: Path) -> list[int]:
    """Iterations the newest run's last rank logged (Megatron's `iteration  N/ M |` lines)."""
    newest = sorted((out / "logs").glob("*-run_log-N1-1.txt"))[-1]
    return [int(m) for m in re.findall(r"iteration\s+(\d+)/", newest.read_text())]


def test_quickstart_cancelled_mid_run_resumes_and_leaves_the_documented_tree(slurm, tmp_path, demo_model):
    """One pipeline, two jobs (CI time): the quickstart is cancelled after its first checkpoint; the same
    experiment submitted again resumes from it and finishes with the documented tree."""
    out = tmp_path / "run"
    common = short(
        out,
        demo_model,
        "--backend_config.training.save-interval=3",
        "--backend_config.training.eval-interval=1000",
    )
    job = submit(
        slurm,
        QUICK,
        "--nodes",
        "1",
        "--time",
        "00:20:00",
        *common,
        "--backend_config.training.train-iters=400",
    )
    tracker = out / "saved_checkpoints" / "latest_checkpointed_iteration.txt"
    wait(slurm, job, lambda st: tracker.exists() or finished(st), 600, "a checkpoint")
    again = cli(slurm, "submit", "slurm", QUICK, *common, "--backend_config.training.train-iters=9")
    assert again.returncode == 2 and f"slurm job {job}" in again.stderr and "still RUNNING" in again.stderr
    proc = cli(slurm, "submit", "cancel", QUICK, *common)  # the experiment's newest job
    assert proc.returncode == 0 and f"cancelled slurm job {job}" in proc.stdout, proc.stderr
    st = wait(slurm, job, finished, 120, "cancelled")
    assert st["state"] == "CANCELLED", st
    saved = int(tracker.read_text())
    assert 3 <= saved < 400
    target = saved + 3
    job2 = submit(slurm, QUICK, *common, f"--backend_config.training.train-iters={target}")
    st = wait(slurm, job2, finished, 600, "the end")
    assert st["state"] == "COMPLETED" and st["exit_code"] == "0:0", node_log(out, job2, 0)[-3000:]
    assert int(tracker.read_text()) == target
    assert min(iterations(out)) == saved + 1  # went on from the checkpoint, not from iteration 1
    for name in (
        "preprocess_data",
        "converted_weight_TP1PP1",
        "saved_checkpoints",
        "ckpt_converted_mg2hf",
        "exp-config.yaml",
        "training_loss.png",
        ".af/summary.json",
    ):
        assert (out / name).exists(), name
    logs = sorted(p.name for p in (out / "logs").iterdir())
    for j in (job, job2):
        assert f"slurm-{j}.out" in logs and f"slurm-{j}-node0.out" in logs
    assert any(n.endswith("-run_log-N1-0.txt") for n in logs) and any(
        n.endswith("-run_log-N1-1.txt") for n in logs
    )
    assert "step preprocess: skipped" in node_log(out, job2, 0)  # its manifest matched
    record = json.loads((out / ".af" / "submit.json").read_text())["jobs"]
    assert [r["job_id"] for r in record] == [job, job2] and Path(str(record[-1]["script"])).is_file()
    proc = cli(slurm, "submit", "status", QUICK, *common)  # the experiment names its newest job
    assert proc.returncode == 0 and f"slurm job {job2}: COMPLETED" in proc.stdout


def test_a_failing_job_shows_its_error_in_status(slurm, tmp_path, demo_model):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('not json at all\n{"broken": \n')
    out = tmp_path / "run"
    job = submit(slurm, QUICK, *short(out, demo_model, f"--backend_config.preprocess_data.input={bad}"))
    st = wait(slurm, job, finished, 300, "the end")
    assert st["state"] == "FAILED" and st["exit_code"].startswith("2:") or st["exit_code"].startswith("1:"), (
        st
    )
    errors = "\n".join(st["errors"])
    assert "node0: error: step 'preprocess' failed with exit code 1" in errors
    assert "bad record (line 1): unreadable JSON" in errors
    proc = cli(slurm, "submit", "status", job)
    assert proc.returncode == 1 and "FAILED" in proc.stdout and "unreadable JSON" in proc.stdout


def test_two_nodes_take_their_ranks_from_slurm(slurm, tmp_path, demo_model):
    if not slurm.resolvable:
        pytest.skip("this machine's host name does not resolve: no MASTER_ADDR for the two test nodes")
    data = yaml.safe_load(Path(QUICK).read_text())
    data.pop("env")  # the topology comes from Slurm
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"
    overrides = short(
        out,
        demo_model,
        "--env.NPUS_PER_NODE=1",
        "--convert_mg2hf_at_last=false",
        "--backend_config.training.train-iters=4",
        "--backend_config.training.save-interval=4",
        "--backend_config.training.eval-interval=1000",
        f"--backend_config.preprocess_data.input={REPO / 'cfgs' / 'data' / 'demo_sft.jsonl'}",
    )
    job = submit(slurm, str(exp), "--nodes", "2", *overrides)
    st = wait(slurm, job, finished, 600, "the end")
    assert st["state"] == "COMPLETED", node_log(out, job, 0)[-2000:] + node_log(out, job, 1)[-2000:]
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert any(n.endswith("-run_log-N2-0.txt") for n in logs) and any(
        n.endswith("-run_log-N2-1.txt") for n in logs
    )
    assert "waiting for NODE_RANK 0" in node_log(out, job, 1) or "run by NODE_RANK 0" in node_log(out, job, 1)
    assert (out / "saved_checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "4"


@pytest.mark.slow
def test_a_ray_backend_runs_under_the_same_script(slurm, tmp_path):
    """The Ray launch (tests/integration/ray_contract) across the two Slurm nodes: node 0 (SLURM_NODEID 0)
    heads the Ray cluster on the first host of the node list, a host name resolved for `ray start`; node 1
    joins. The script is `submit slurm`'s own, with the test CLI (which registers the test backend) in
    place of the console script."""
    if not slurm.resolvable:
        pytest.skip("this machine's host name does not resolve: no MASTER_ADDR for the two test nodes")
    contract_cli = [sys.executable, str(Path(__file__).parent / "ray_contract" / "cli.py")]
    out = tmp_path / "run"
    exp = tmp_path / "ray.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "backend": "ray-contract",
                "af_model_name": "qwen2.5-0.5b",
                "exp_name": "slurm",
                "af_output_dir": str(out),
                "node_wait_timeout_s": 120,
                "env": {"MASTER_PORT": free_port()},
                "backend_config": {"steps": 4},
            }
        )
    )
    proc = subprocess.run(
        [*contract_cli, "submit", "slurm", str(exp), "--nodes", "2", "--dry-run"],
        cwd=REPO,
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    train = next(line for line in proc.stdout.splitlines() if " train " in line)
    console = train.split(" train ")[0].strip()
    script = tmp_path / "ray.sbatch"
    script.write_text(proc.stdout.replace(console, " ".join(contract_cli)))
    (out / "logs").mkdir(parents=True)
    job = slurm.run("sbatch", "--parsable", str(script)).stdout.strip()
    assert job.isdigit()
    st = wait(slurm, job, finished, 600, "the end")
    logs = node_log(out, job, 0)[-3000:] + node_log(out, job, 1)[-3000:]
    assert st["state"] == "COMPLETED", logs
    (head_log,) = (out / "logs").glob("raycontract-*-ray-node0-of-2.txt")
    assert "cluster ready: 2 of 2 nodes" in head_log.read_text()
    (worker_log,) = (out / "logs").glob("raycontract-*-ray-node1-of-2.txt")
    assert "the driver on the head succeeded" in worker_log.read_text()
