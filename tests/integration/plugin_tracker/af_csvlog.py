"""A tiny run store: the client a framework's integration imports to report to the `csvlog` tracker.

    run = af_csvlog.init(dir, project, name, run_id=None)   # a new run, or the run `run_id` continued
    run = af_csvlog.init_from_env()   # the same, named by the tracker's variables (AF_CSVLOG_*)
    run.log({"loss": 1.5}, step=3); run.log_params({...}); run.add_file(path); run.finish("finished")

A run is a folder `<dir>/<project>/<run_id>/`: `meta.json` (name, state: running, finished, failed,
killed), `params.json`, `metrics.csv` (step,key,value, appended), `files/`. `read(...)` returns it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import uuid
from collections.abc import Mapping


class Run:
    def __init__(self, root: str, run_id: str) -> None:
        self.root, self.id = root, run_id

    def _meta(self) -> dict:
        with open(os.path.join(self.root, "meta.json"), encoding="utf-8") as f:
            return json.load(f)

    def _write_meta(self, meta: dict) -> None:
        with open(os.path.join(self.root, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f)

    def log(self, metrics: dict, step: int) -> None:
        with open(os.path.join(self.root, "metrics.csv"), "a", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            for key, value in metrics.items():
                w.writerow([int(step), key, float(value)])

    def log_params(self, params: dict) -> None:
        path = os.path.join(self.root, "params.json")
        old = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**{k: str(v) for k, v in params.items()}, **old}, f)

    def add_file(self, path: str) -> None:
        os.makedirs(os.path.join(self.root, "files"), exist_ok=True)
        shutil.copy2(path, os.path.join(self.root, "files", os.path.basename(path)))

    def finish(self, state: str = "finished") -> None:
        if state not in ("finished", "failed", "killed"):
            raise ValueError(f"unknown run state {state!r}")
        self._write_meta({**self._meta(), "state": state})


def init(dir: str, project: str, name: str, run_id: str | None = None) -> Run:
    run_id = run_id or uuid.uuid4().hex[:12]
    root = os.path.join(dir, project, run_id)
    os.makedirs(root, exist_ok=True)
    run = Run(root, run_id)
    meta = run._meta() if os.path.exists(os.path.join(root, "meta.json")) else {"name": name}
    run._write_meta({**meta, "state": "running"})
    return run


def init_from_env(environ: Mapping[str, str] = os.environ) -> Run:
    """The run the tracker's variables name (`AF_CSVLOG_DIR`, `_PROJECT`, `_NAME`, `_RUN_ID`): what a
    framework's integration opens, as `wandb.init` reads `WANDB_*`."""
    return init(
        environ["AF_CSVLOG_DIR"],
        environ["AF_CSVLOG_PROJECT"],
        environ["AF_CSVLOG_NAME"],
        run_id=environ.get("AF_CSVLOG_RUN_ID"),
    )


def read(dir: str, project: str, run_id: str) -> dict:
    """The run as stored: meta, params, metrics as {key: {step: [values]}}, files."""
    root = os.path.join(dir, project, run_id)
    run = Run(root, run_id)
    metrics: dict = {}
    path = os.path.join(root, "metrics.csv")
    if os.path.exists(path):
        with open(path, newline="", encoding="utf-8") as f:
            for step, key, value in csv.reader(f):
                metrics.setdefault(key, {}).setdefault(int(step), []).append(float(value))
    params_path = os.path.join(root, "params.json")
    files = os.path.join(root, "files")
    return {
        **run._meta(),
        "params": json.load(open(params_path, encoding="utf-8")) if os.path.exists(params_path) else {},
        "metrics": metrics,
        "files": sorted(os.listdir(files)) if os.path.isdir(files) else [],
    }
