"""Kubernetes: a job manifest whose pods all run `ascendfactory-cli train <yaml>`; `kubectl apply -f` it.

- `volcano`: a `batch.volcano.sh/v1alpha1` `Job` with one task `worker` of N replicas and the `svc` and
  `env` plugins, which give every pod `VC_TASK_INDEX`, `VC_WORKER_HOSTS` and `VC_WORKER_NUM`
  (volcano-sh/volcano `pkg/controllers/job/plugins/env/env.go`, `pkg/controllers/job/plugins/svc/svc.go`);
  `minAvailable: N` gang-schedules the pods, `schedulerName: volcano` (TorchX's Kubernetes layout, too).
- `pytorchjob`: a `kubeflow.org/v1` `PyTorchJob` with one Master and N-1 Workers; the operator sets
  `MASTER_ADDR`, `MASTER_PORT` (from the container port named `pytorchjob-port` of the container named
  `pytorch`), `WORLD_SIZE`, `RANK` and `PET_NNODES` / `PET_NODE_RANK` (kubeflow/training-operator v1.9.0
  `pkg/controller.v1/pytorch/envvar.go`, `master.go`).

The pods' working directory is the directory `submit k8s` ran in, and the experiment file is named as it was:
the experiment and `af_output_dir` must be on a volume the pods mount at the same path (add it to the
manifest: `volumes` / `volumeMounts`), as ModelArts mounts its shared storage. `/dev/shm` is a memory
`emptyDir` (the container default of 64 MiB is too small for data loaders).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ascendfactory.submit.job import Experiment, check_nodes

FILES = {"volcano": "volcano-job.yaml", "pytorchjob": "pytorchjob.yaml"}
PYTORCHJOB_CONTAINER = "pytorch"  # the operator reads the port of the container with this name
PYTORCHJOB_PORT = "pytorchjob-port"


@dataclass(frozen=True)
class PodOptions:
    image: str
    nodes: int
    gpus_per_node: int | None = None
    device_resource: str = "nvidia.com/gpu"


def job_name(exp: Experiment) -> str:
    """A DNS-1123 label from the model and experiment names (pod host names derive from it)."""
    cfg = exp.loaded.config
    name = re.sub(r"[^a-z0-9-]+", "-", f"af-{cfg.af_model_name}-{cfg.exp_name}".lower()).strip("-")
    return name[:40].rstrip("-") or "af-job"


def _container(exp: Experiment, opts: PodOptions, name: str) -> dict:
    container: dict = {
        "name": name,
        "image": opts.image,
        "command": ["ascendfactory-cli", "train", exp.path, *exp.names, *exp.overrides],
        "workingDir": str(Path.cwd()),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if opts.gpus_per_node:
        container["resources"] = {"limits": {opts.device_resource: opts.gpus_per_node}}
    return container


def _pod_spec(container: dict, restart: str | None) -> dict:
    spec: dict = {
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    if restart:
        spec["restartPolicy"] = restart
    return spec


def volcano_job(exp: Experiment, opts: PodOptions) -> dict:
    retries = exp.loaded.config.auto_resume.max_attempts if exp.loaded.config.train_auto_resume else 0
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": job_name(exp)},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": opts.nodes,
            "maxRetry": retries,
            # One pod lost: restart the whole job (train_auto_resume resumes from the newest checkpoint).
            "policies": [
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "PodFailed", "action": "RestartJob"},
            ]
            if retries
            else [],
            "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
            "tasks": [
                {
                    "name": "worker",
                    "replicas": opts.nodes,
                    "template": {"spec": _pod_spec(_container(exp, opts, "train"), "Never")},
                }
            ],
        },
    }


def pytorch_job(exp: Experiment, opts: PodOptions) -> dict:
    port = exp.loaded.config.env.MASTER_PORT

    def container() -> dict:
        c = _container(exp, opts, PYTORCHJOB_CONTAINER)
        c["ports"] = [{"name": PYTORCHJOB_PORT, "containerPort": port}]
        return c

    replicas = {"Master": 1, "Worker": opts.nodes - 1}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job_name(exp)},
        "spec": {
            "runPolicy": {"backoffLimit": exp.loaded.config.auto_resume.max_attempts},
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": n,
                    "restartPolicy": "OnFailure" if exp.loaded.config.train_auto_resume else "Never",
                    "template": {"spec": _pod_spec(container(), None)},  # the replica's policy
                }
                for role, n in replicas.items()
                if n > 0
            },
        },
    }


BUILDERS = {"volcano": volcano_job, "pytorchjob": pytorch_job}


def manifest(exp: Experiment, kind: str, opts: PodOptions) -> dict:
    return BUILDERS[kind](exp, opts)


def render(exp: Experiment, kind: str, opts: PodOptions) -> str:
    import yaml

    head = (
        f"# Written by `ascendfactory-cli submit k8s --kind {kind}` for {exp.path}; apply with\n"
        f"#   kubectl apply -f {FILES[kind]}\n"
        "# The experiment file and af_output_dir must be on a volume every pod mounts at the same path.\n"
    )
    return head + yaml.safe_dump(manifest(exp, kind, opts), sort_keys=False)


def validate(exp: Experiment, kind: str, opts: PodOptions) -> None:
    """The experiment planned as the first pod would plan it (the platform variables that pod gets)."""
    name = job_name(exp)
    if kind == "volcano":
        hosts = ",".join(f"{name}-worker-{i}.{name}" for i in range(opts.nodes))
        env = {"VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": hosts, "VC_WORKER_NUM": str(opts.nodes)}
    else:
        env = {
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "MASTER_ADDR": f"{name}-master-0",
            "MASTER_PORT": str(exp.loaded.config.env.MASTER_PORT),
            "WORLD_SIZE": str(opts.nodes),
            "RANK": "0",
            "PET_NNODES": str(opts.nodes),
            "PET_NODE_RANK": "0",
        }
    check_nodes(exp, opts.nodes, platform_env=env, devices=opts.gpus_per_node)


def write(exp: Experiment, kind: str, text: str) -> Path:
    path = exp.output_dir / ".af" / "submit" / FILES[kind]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
