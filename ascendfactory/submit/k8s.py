"""Kubernetes, two scheduler records (`submit.scheduler`) under `submit k8s --kind`: a job manifest whose pods
all run `ascendfactory-cli train <yaml>`; `kubectl apply -f` it; `submit status` and `submit cancel` ask
`kubectl get` / `kubectl delete` for the job by its name (recorded in the output tree's submit.json).

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

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import Field

from ascendfactory.errors import SchedulerError
from ascendfactory.submit.job import Experiment, record
from ascendfactory.submit.scheduler import JobState, Scheduler, SchedulerOptions, Submitted

FILES = {"volcano": "volcano-job.yaml", "pytorchjob": "pytorchjob.yaml"}
RESOURCES = {"volcano": "jobs.batch.volcano.sh", "pytorchjob": "pytorchjobs.kubeflow.org"}  # kubectl names
PYTORCHJOB_CONTAINER = "pytorch"  # the operator reads the port of the container with this name
PYTORCHJOB_PORT = "pytorchjob-port"
DEFAULT_DEVICE = "nvidia.com/gpu"
KUBECTL_TIMEOUT_S = 60


class PodOptions(SchedulerOptions):
    """The pods of `submit k8s`: the image, and the device each node requests."""

    image: str = Field(description="Container image with ascendfactory-cli installed.")
    device_resource: str | None = Field(
        None,
        description=f"Resource name of one accelerator (huawei.com/Ascend910 ...); with --gpus-per-node "
        f"alone, {DEFAULT_DEVICE}; alone, env.NPUS_PER_NODE of it.",
    )

    @property
    def names_a_device(self) -> bool:
        return self.device_resource is not None


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
        container["resources"] = {"limits": {opts.device_resource or DEFAULT_DEVICE: opts.gpus_per_node}}
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


def render(kind: str, exp: Experiment, opts: PodOptions) -> str:
    import yaml

    head = (
        f"# Written by `ascendfactory-cli submit k8s --kind {kind}` for {exp.path}; apply with\n"
        f"#   kubectl apply -f {FILES[kind]}\n"
        "# The experiment file and af_output_dir must be on a volume every pod mounts at the same path.\n"
    )
    return head + yaml.safe_dump(manifest(exp, kind, opts), sort_keys=False)


def node_env(kind: str, exp: Experiment, opts: PodOptions) -> dict[str, str]:
    """The platform variables the first pod gets (Volcano's env and svc plugins; the PyTorchJob operator)."""
    name = job_name(exp)
    if kind == "volcano":
        hosts = ",".join(f"{name}-worker-{i}.{name}" for i in range(opts.nodes))
        return {"VC_TASK_INDEX": "0", "VC_WORKER_HOSTS": hosts, "VC_WORKER_NUM": str(opts.nodes)}
    return {
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "MASTER_ADDR": f"{name}-master-0",
        "MASTER_PORT": str(exp.loaded.config.env.MASTER_PORT),
        "WORLD_SIZE": str(opts.nodes),
        "RANK": "0",
        "PET_NNODES": str(opts.nodes),
        "PET_NODE_RANK": "0",
    }


def write(kind: str, exp: Experiment, opts: PodOptions, text: str) -> Submitted:
    """The manifest into the output tree (`kubectl apply -f` it), recorded so that `submit status|cancel`
    find the job by its name."""
    path = Path(exp.tree.submitted(FILES[kind]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    name = job_name(exp)
    record(exp, {"scheduler": kind, "job_id": name, "manifest": str(path), "nodes": opts.nodes})
    return Submitted(
        name,
        (
            f"wrote {path}",
            f"apply it: kubectl apply -f {path}",
            f"status: ascendfactory-cli submit status {exp.path}",
        ),
    )


def kubectl(argv: list[str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kubectl")
    if exe is None:
        raise SchedulerError("kubectl not found on PATH: run this where kubectl reaches the cluster")
    try:
        done = subprocess.run(
            [exe, *argv], capture_output=True, text=True, timeout=KUBECTL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"kubectl did not answer within {KUBECTL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise SchedulerError(
            f"kubectl {' '.join(argv)} failed (exit {done.returncode}): {done.stderr.strip()}"
        )
    return done


# Volcano Job phases (volcano-sh/apis pkg/apis/batch/v1alpha1/job.go `JobPhase`; the CRD schema's
# `status.state.phase` enum in tests/data/k8s): the active ones, then Completed, Failed, Aborted, Terminated.
VOLCANO_ACTIVE = ("Pending", "Aborting", "Running", "Restarting", "Completing", "Terminating")
# PyTorchJob condition types (kubeflow/training-operator v1.9.0 pkg/apis/kubeflow.org/v1/common_types.go
# JobConditionType): Created, Running, Restarting, Suspended, Succeeded, Failed; the newest true one counts.
PYTORCHJOB_ACTIVE = ("Created", "Running", "Restarting", "Suspended")


def state_of(kind: str, doc: Mapping[str, Any]) -> tuple[str, str, str]:
    """(state, reason, message) of a job object as `kubectl get -o json` prints it."""
    status = doc.get("status") or {}
    if kind == "volcano":
        st = status.get("state") or {}
        return str(st.get("phase") or "Pending"), str(st.get("reason") or ""), str(st.get("message") or "")
    true = [c for c in status.get("conditions") or [] if str(c.get("status")) == "True"]
    last = true[-1] if true else {}
    return str(last.get("type") or "Created"), str(last.get("reason") or ""), str(last.get("message") or "")


def status(kind: str, job: Mapping[str, Any], logs_dir: Path | None) -> JobState:
    """`kubectl get <kind> <name> -o json`: the job's phase (Volcano) or newest condition (PyTorchJob)."""
    name = str(job["job_id"])
    doc = json.loads(kubectl(["get", RESOURCES[kind], name, "-o", "json"]).stdout)
    state, reason, message = state_of(kind, doc)
    active = state in (VOLCANO_ACTIVE if kind == "volcano" else PYTORCHJOB_ACTIVE)
    succeeded = state == ("Completed" if kind == "volcano" else "Succeeded")
    return JobState(
        job_id=name,
        state=state,
        active=active,
        succeeded=succeeded,
        reason=reason,
        errors=(message,) if message and not (active or succeeded) else (),
    )


def cancel(kind: str, job: Mapping[str, Any]) -> None:
    """`kubectl delete`: its pods get SIGTERM, and each node's runner stops its processes."""
    kubectl(["delete", RESOURCES[kind], str(job["job_id"])])


def _record(kind: str, description: str) -> Scheduler:
    return Scheduler(
        name=kind,
        description=description,
        help="Write a Kubernetes job manifest (kubectl apply -f it); its pods run `ascendfactory-cli train`.",
        options=PodOptions,
        platform="Volcano" if kind == "volcano" else "Kubeflow",
        node_env=partial(node_env, kind),
        render=partial(render, kind),
        submit=partial(write, kind),
        status=partial(status, kind),
        cancel=partial(cancel, kind),
        command="k8s",
        kind=kind,
        examples=(
            "ascendfactory-cli submit k8s --kind volcano exp.yaml --nodes 2 --image registry/af:latest",
            "kubectl apply -f outputs/<model>-<exp>/.af/submit/volcano-job.yaml",
            "ascendfactory-cli submit k8s --kind pytorchjob exp.yaml --nodes 4 --image registry/af:latest "
            "--gpus-per-node 8 --dry-run",
            "ascendfactory-cli submit k8s --kind volcano exp.yaml --image img --device-resource "
            "huawei.com/Ascend910      # env.NPUS_PER_NODE devices each",
        ),
    )


VOLCANO = _record("volcano", "a Volcano Job (batch.volcano.sh/v1alpha1), gang-scheduled")
PYTORCHJOB = _record("pytorchjob", "a Kubeflow PyTorchJob (kubeflow.org/v1): one Master, N-1 Workers")
