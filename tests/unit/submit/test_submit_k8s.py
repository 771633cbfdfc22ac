"""`submit k8s`: the Volcano Job and the Kubeflow PyTorchJob, validated against the resources' published
CRD schemas (tests/data/k8s, with their sources) without a cluster; what their pods will detect."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from ascendfactory.cli.app import app
from ascendfactory.config.platforms import detect
from tests.conftest import REPO
from tests.unit.submit.test_submit_slurm_script import unpinned

runner = CliRunner()
SCHEMAS = REPO / "tests" / "data" / "k8s"
SCHEMA = {
    "volcano": "volcano_batch_v1alpha1_job.schema.json",
    "pytorchjob": "kubeflow_v1_pytorchjob.schema.json",
}


def schema(kind: str) -> dict:
    return json.loads((SCHEMAS / SCHEMA[kind]).read_text())


def manifest(tmp_path, kind: str, nodes: int, *extra: str) -> dict:
    exp = unpinned(tmp_path)
    args = [
        "submit",
        "k8s",
        "--kind",
        kind,
        exp,
        "--nodes",
        str(nodes),
        "--image",
        "registry.local/af:1",
        *extra,
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    path = (
        tmp_path / "out" / ".af" / "submit" / ("volcano-job.yaml" if kind == "volcano" else "pytorchjob.yaml")
    )
    assert f"kubectl apply -f {path}" in r.stdout
    return yaml.safe_load(path.read_text())


def validate(kind: str, doc: dict) -> None:
    jsonschema.validate(doc, schema(kind), cls=jsonschema.Draft7Validator)


@pytest.mark.parametrize("kind", ["volcano", "pytorchjob"])
def test_manifest_matches_the_published_schema(tmp_path, kind):
    doc = manifest(tmp_path, kind, 2, "--gpus-per-node", "2", "--device-resource", "huawei.com/Ascend910")
    validate(kind, doc)
    containers = [
        c
        for task in (doc["spec"].get("tasks") or doc["spec"].get("pytorchReplicaSpecs", {}).values())
        for c in task["template"]["spec"]["containers"]
    ]
    assert containers
    for c in containers:
        assert c["command"][:2] == ["ascendfactory-cli", "train"] and c["command"][2].endswith("exp.yaml")
        assert c["resources"]["limits"] == {"huawei.com/Ascend910": 2}


@pytest.mark.parametrize("kind", ["volcano", "pytorchjob"])
def test_the_schema_catches_a_broken_manifest(tmp_path, kind):
    doc = manifest(tmp_path, kind, 2)
    broken = copy.deepcopy(doc)
    if kind == "volcano":
        broken["spec"]["tasks"][0]["replicas"] = "two"
    else:
        broken["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["ports"][0][
            "containerPort"
        ] = "29517"
    with pytest.raises(jsonschema.ValidationError):
        validate(kind, broken)


def test_volcano_job_shape_and_what_its_pods_detect(tmp_path):
    doc = manifest(tmp_path, "volcano", 2)
    spec = doc["spec"]
    assert (doc["apiVersion"], doc["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert spec["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": []}
    assert spec["minAvailable"] == 2 and spec["schedulerName"] == "volcano"
    (task,) = spec["tasks"]
    assert task["name"] == "worker" and task["replicas"] == 2
    name = doc["metadata"]["name"]
    # what the svc and env plugins give pod 1 (hosts `<job>-<task>-<i>.<job>`, volcano svc.go GenerateHosts)
    pod1 = {
        "VC_TASK_INDEX": "1",
        "VC_WORKER_HOSTS": f"{name}-worker-0.{name},{name}-worker-1.{name}",
        "VC_WORKER_NUM": "2",
    }
    d = detect(pod1)
    assert d is not None and d.platform == "Volcano"
    assert d.values == {"NNODES": 2, "NODE_RANK": 1, "MASTER_ADDR": f"{name}-worker-0.{name}"}


def test_pytorchjob_shape(tmp_path):
    doc = manifest(tmp_path, "pytorchjob", 4)
    replicas = doc["spec"]["pytorchReplicaSpecs"]
    assert (doc["apiVersion"], doc["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Master": 1, "Worker": 3}
    for spec in replicas.values():
        (c,) = spec["template"]["spec"]["containers"]
        # the operator takes MASTER_PORT from this container's port of this name
        assert c["name"] == "pytorch" and c["ports"] == [{"name": "pytorchjob-port", "containerPort": 29517}]


def test_one_node_pytorchjob_has_no_workers(tmp_path):
    doc = manifest(tmp_path, "pytorchjob", 1)
    assert list(doc["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    validate("pytorchjob", doc)
