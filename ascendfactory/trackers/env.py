"""The trackers' own environment variables: every framework's integration reads them (MLflow's client, the
`wandb` and `swanlab` SDKs), so a framework reaches the run the plan resolved without a key of ours."""

from __future__ import annotations

from ascendfactory.plan import TrackerSpec

# What installs each tracker's client (pyproject's extras and a framework environment's install plan).
# mlflow-skinny is MLflow's client and stores without its server and UI (the package: about 40 MB);
# SQLAlchemy and Alembic give it the local SQLite store (MLflow 3 keeps the file store in maintenance).
PACKAGES: dict[str, tuple[str, ...]] = {
    "mlflow": ("mlflow-skinny>=2.9", "sqlalchemy>=2.0", "alembic>=1.12"),
    "wandb": ("wandb>=0.16",),
    "swanlab": ("swanlab>=0.5",),
}


def tracker_env(spec: TrackerSpec) -> dict[str, str]:
    """Where and how the tracker writes (no run id: `run_env` adds it at run time)."""
    if spec.name == "mlflow":
        return {"MLFLOW_TRACKING_URI": spec.location, "MLFLOW_EXPERIMENT_NAME": spec.project}
    if spec.name == "wandb":
        env = {
            "WANDB_MODE": spec.mode or "offline",
            "WANDB_DIR": spec.location,
            "WANDB_PROJECT": spec.project,
            "WANDB_NAME": spec.run_name,
        }
        if spec.entity:
            env["WANDB_ENTITY"] = spec.entity
        return env
    if spec.name == "swanlab":
        return {
            "SWANLAB_MODE": spec.mode or "local",
            "SWANLAB_LOG_DIR": spec.location,
            "SWANLAB_PROJ_NAME": spec.project,
            "SWANLAB_EXP_NAME": spec.run_name,
        }
    if spec.name == "tensorboard":
        return {"TENSORBOARD_DIR": spec.location}
    return {}


def run_env(spec: TrackerSpec, run_id: str) -> dict[str, str]:
    """What makes a framework's own integration log into the run `run_id` instead of starting a new one:
    MLflow's `start_run` continues `MLFLOW_RUN_ID`; `wandb.init` resumes `WANDB_RUN_ID` with
    `WANDB_RESUME=allow`. SwanLab's local mode has no resume: each segment is a run of its own."""
    if spec.name == "mlflow":
        return {"MLFLOW_RUN_ID": run_id}
    if spec.name == "wandb":
        return {"WANDB_RUN_ID": run_id, "WANDB_RESUME": "allow"}
    return {}
