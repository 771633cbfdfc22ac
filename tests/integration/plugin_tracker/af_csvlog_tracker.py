"""The `csvlog` tracker's record, registered when its entry point loads: everything the house derives from
it (the `report_to` section, the client check before launch, the variables every step gets, the run the
pipeline opens and ends finished/failed/killed, what the embedded trainer opens itself, `logs export`, and
how two outside backends reach it) is here; no file of ascendfactory names it."""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field

from ascendfactory.plan import TrackerSpec
from ascendfactory.trackers.base import (
    RunNames,
    Sink,
    Tracker,
    TrackerKeys,
    TrackerSettings,
    finite,
    import_client,
)
from ascendfactory.trackers.registry import register_tracker

NAME = "csvlog"


class CsvlogSettings(TrackerSettings):
    """csvlog: runs as folders of CSV under the output tree."""

    credentials = "(none: a local store)"
    dir: str | None = Field(None, description="The store; default {af_output_dir}/trackers/csvlog.")


def resolve(settings: CsvlogSettings, names: RunNames) -> TrackerSpec:
    where = os.path.abspath(settings.dir or names.tree.trackers(NAME))
    return TrackerSpec(NAME, names.project, names.run_name, location=where)


class CsvlogSink(Sink):
    name = NAME

    def __init__(self, spec: TrackerSpec, *, run_id: str | None = None, **_: Any) -> None:
        client = import_client(NAME, "af_csvlog", "pip install af-plugin-csvlog")
        self.run = client.init(spec.location, spec.project, spec.run_name, run_id=run_id)
        self.run_id = self.run.id

    def log_params(self, params):
        self.run.log_params(dict(params))

    def log_metrics(self, metrics, step):
        self.run.log(finite(metrics), step)

    def log_summary(self, values):
        self.run.log(finite(values), 0)

    def log_artifact(self, path):
        self.run.add_file(path)

    def close(self, *, state="finished"):
        self.run.finish(state)


def env(spec: TrackerSpec) -> dict[str, str]:
    return {
        "AF_CSVLOG_DIR": spec.location,
        "AF_CSVLOG_PROJECT": spec.project,
        "AF_CSVLOG_NAME": spec.run_name,
    }


def run_env(spec: TrackerSpec, run_id: str) -> dict[str, str]:
    return {"AF_CSVLOG_RUN_ID": run_id}


def from_env(environ) -> tuple[TrackerSpec, str | None]:
    spec = TrackerSpec(
        NAME,
        environ.get("AF_CSVLOG_PROJECT", "default"),
        environ.get("AF_CSVLOG_NAME", "train"),
        location=environ.get("AF_CSVLOG_DIR", "csvlog"),
    )
    return spec, environ.get("AF_CSVLOG_RUN_ID") or None


def export(dest: str, project: str, run_name: str) -> TrackerSpec:
    return TrackerSpec(NAME, project, run_name, location=os.path.abspath(dest))


TRACKER = register_tracker(
    Tracker(
        name=NAME,
        description="csvlog: runs as CSV folders (a tracker from a plugin)",
        settings=CsvlogSettings,
        resolve=resolve,
        client=("af_csvlog",),
        packages=("af-plugin-csvlog",),
        env=env,
        run_env=run_env,
        open=CsvlogSink,
        run_ids="create",
        states={"finished": "finished", "failed": "failed", "killed": "killed"},
        from_env=from_env,
        export=export,
        # how the two outside backends' frameworks reach it: their own `loggers` list
        keys={
            "lightning-demo": TrackerKeys(append={"loggers": NAME}),
            "rl-demo": TrackerKeys(append={"loggers": NAME}),
        },
    )
)
