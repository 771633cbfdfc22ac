"""The scheduler records behind `submit`: a Slurm dry run on a machine that is no Slurm node, the devices
each node requests checked against the experiment's, and `submit status|cancel` for the Kubernetes kinds
through kubectl (a recorded kubectl answering with documents valid against the kinds' CRD schemas)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from ascendfactory.cli.app import main
from ascendfactory.config.load import load_experiment
from ascendfactory.config.topology import with_platform
from ascendfactory.submit import k8s
from ascendfactory.submit.registry import SCHEDULERS, commands
from tests.conftest import REPO
from tests.unit.submit.test_submit_k8s import schema
from tests.unit.submit.test_submit_slurm_script import cli, unpinned


def test_every_scheduler_is_a_record_of_one_interface():
    assert [s.name for s in SCHEDULERS.entries()][:3] == ["slurm", "volcano", "pytorchjob"]
    grouped = {name: [s.kind for s in group] for name, group in commands().items()}
    assert grouped["slurm"] == [None] and grouped["k8s"] == ["volcano", "pytorchjob"]
    for s in SCHEDULERS.entries():
        assert s.platform and callable(s.status) and callable(s.cancel) and callable(s.node_env)


# -- Slurm on a machine that is no Slurm node (audit B1) ------------------------------------------------
def test_a_slurm_dry_run_needs_neither_a_slurm_node_nor_python_hostlist(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hostlist", None)  # `import hostlist` fails
    code, text = cli(capsys, "submit", "slurm", unpinned(tmp_path), "--nodes", "2", "--dry-run")
    assert code == 0, text
    assert "#SBATCH --nodes=2" in text and "no scontrol on PATH" not in text


def slurm_node(nodelist: str) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "9",
        "SLURM_NODEID": "0",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": "1",
    }


def test_a_node_list_the_tool_cannot_read_names_the_fix_and_the_fix_works(tmp_path):
    exp = unpinned(tmp_path)
    with pytest.raises(Exception) as e:
        with_platform(load_experiment(exp), slurm_node("gpu[07-"))
    text = str(e.value)
    assert "SLURM_JOB_NODELIST" in text and "--env.MASTER_ADDR=" in text and "no scontrol" not in text
    fixed = with_platform(load_experiment(exp, ["--env.MASTER_ADDR=gpu07"]), slurm_node("gpu[07-"))
    assert fixed.config.env.MASTER_ADDR == "gpu07" and fixed.config.env.NNODES == 2
    read = with_platform(load_experiment(exp), slurm_node("gpu[07-09],login1"))
    assert read.config.env.MASTER_ADDR == "gpu07"


# -- the devices each node requests (audit C5) ------------------------------------------------------------
def k8s_manifest(tmp_path, capsys, *args: str, **experiment) -> tuple[int, str]:
    exp = unpinned(tmp_path, **experiment)
    return cli(capsys, "submit", "k8s", "--kind", "volcano", exp, "--nodes", "2", "--image", "img:1", *args)


def limits(text: str) -> dict:
    doc = yaml.safe_load(text[text.index("apiVersion") :])
    container = doc["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    return container.get("resources", {}).get("limits", {})


def test_a_device_resource_alone_requests_the_devices_the_experiment_runs_on(tmp_path, capsys):
    env = {"MASTER_PORT": 29517, "NPUS_PER_NODE": 2}
    code, text = k8s_manifest(
        tmp_path, capsys, "--device-resource", "huawei.com/Ascend910", "--dry-run", env=env
    )
    assert code == 0, text
    assert limits(text) == {"huawei.com/Ascend910": 2}


def test_a_device_resource_without_any_count_is_refused(tmp_path, capsys):
    code, text = k8s_manifest(tmp_path, capsys, "--device-resource", "huawei.com/Ascend910", "--dry-run")
    assert code == 2
    assert "--device-resource" in text and "--gpus-per-node" in text and "NPUS_PER_NODE" in text


@pytest.mark.parametrize("command", ["k8s", "slurm"])
def test_a_device_count_other_than_the_experiments_is_refused(tmp_path, capsys, command):
    exp = unpinned(tmp_path, env={"MASTER_PORT": 29517, "NPUS_PER_NODE": 2})
    extra = ["--kind", "volcano", "--image", "img:1"] if command == "k8s" else []
    code, text = cli(capsys, "submit", command, *extra, exp, "--gpus-per-node", "8", "--dry-run")
    assert code == 2
    assert "requests 8 devices per node, but the experiment runs 2 processes per node" in text
    assert "--gpus-per-node 2" in text


def test_a_count_without_a_resource_name_requests_nvidia_gpus_as_before(tmp_path, capsys):
    code, text = k8s_manifest(tmp_path, capsys, "--gpus-per-node", "2", "--dry-run")
    assert code == 0, text
    assert limits(text) == {"nvidia.com/gpu": 2}


# -- status and cancel of the Kubernetes kinds ------------------------------------------------------------
@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    """kubectl on PATH that records its argv and answers `get` with the document in `answer.json`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib, sys\n"
        f"here = pathlib.Path({str(tmp_path)!r})\n"
        "with open(here / 'calls.jsonl', 'a') as f: f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1] == 'get': print((here / 'answer.json').read_text())\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def calls(root: Path) -> list[list[str]]:
    return [json.loads(line) for line in (root / "calls.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "kind,status,shown,code",
    [
        ("volcano", {"state": {"phase": "Running"}, "running": 2}, "Running", 0),
        ("volcano", {"state": {"phase": "Completed"}, "succeeded": 2}, "Completed", 0),
        ("volcano", {"state": {"phase": "Failed", "message": "pod worker-1 failed"}}, "Failed", 1),
        (
            "pytorchjob",
            {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]},
            "Running",
            0,
        ),
        (
            "pytorchjob",
            {
                "conditions": [
                    {"type": "Running", "status": "False"},
                    {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "exit 1"},
                ]
            },
            "Failed",
            1,
        ),
    ],
)
def test_status_of_a_written_manifest_asks_kubectl_for_its_job(
    tmp_path, capsys, kubectl, kind, status, shown, code
):
    exp = unpinned(tmp_path)
    assert main(["submit", "k8s", "--kind", kind, exp, "--nodes", "2", "--image", "img:1"]) == 0
    capsys.readouterr()
    doc = yaml.safe_load((tmp_path / "out" / ".af" / "submit" / k8s.FILES[kind]).read_text())
    answer = {**doc, "status": status}
    jsonschema.validate(answer, schema(kind), cls=jsonschema.Draft7Validator)  # what a cluster would print
    (kubectl / "answer.json").write_text(json.dumps(answer))
    got = main(["submit", "status", exp, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert (got, out["state"], out["scheduler"]) == (code, shown, kind)
    name = doc["metadata"]["name"]
    assert calls(kubectl)[-1] == ["get", k8s.RESOURCES[kind], name, "-o", "json"]
    assert main(["submit", "cancel", exp]) == 0
    assert calls(kubectl)[-1] == ["delete", k8s.RESOURCES[kind], name]
    assert f"cancelled {kind} job {name}" in capsys.readouterr().out


def test_a_job_name_without_its_scheduler_is_refused_with_the_fix(capsys):
    code, text = cli(capsys, "submit", "status", "af-some-job")
    assert code == 2 and "--scheduler" in text


def test_status_without_kubectl_says_so(tmp_path, capsys, monkeypatch):
    exp = unpinned(tmp_path)
    assert main(["submit", "k8s", "--kind", "volcano", exp, "--image", "img:1"]) == 0
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    code, text = cli(capsys, "submit", "status", exp)
    assert code == 1 and "kubectl not found on PATH" in text


def test_the_repository_file_list_of_the_k8s_schemas_is_intact():
    assert (REPO / "tests" / "data" / "k8s" / "volcano_batch_v1alpha1_job.schema.json").is_file()
