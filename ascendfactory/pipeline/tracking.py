"""The pipeline's part of the experiment trackers (`plan.tracking`), on the node that logs the loss:

1. before training, each tracker's run is created, or continued from the id kept in `tracking.runs_file`
   (`{af_output_dir}/trackers/runs.json`), so a resumed or re-run experiment reports into the same run;
   MLflow's run is created with the run's parameters (the resolved experiment, secrets masked);
2. the train step gets the run ids in the trackers' own variables (`MLFLOW_RUN_ID`, `WANDB_RUN_ID` with
   `WANDB_RESUME=allow`): the framework's own integration, or the embedded trainer, logs into that run;
3. after the run, what only the pipeline knows goes to the same run: the summary (throughput by the
   framework's formula, first and last loss, NaN count, peak memory where the log has it) and the loss plot
   and `exp-config.yaml` as artifacts; a failed training marks the run failed, an interrupted one (Ctrl-C,
   SIGTERM) killed. A run that trained nothing this time (an experiment re-run after it completed) adds no
   summary: the one of the training that ran stays.

A tracker never stops a run: a client that fails is reported once and left out.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

from ascendfactory.pipeline import procgroup
from ascendfactory.plan import Tracking
from ascendfactory.trackers import RunState, Sink, Sinks, Tracker, get_tracker, open_run, run_env
from ascendfactory.trackers.base import new_run_id


def _tracker(name: str) -> Tracker:
    return get_tracker(name)


class RunTracking:
    def __init__(self, tracking: Tracking | None, *, warn: Callable[[str], None]) -> None:
        self.tracking, self.warn = tracking, warn
        self.ids: dict[str, str] = {}
        self.continued: set[str] = set()  # trackers whose run existed before this invocation
        self.prepared = False
        self._thread: threading.Thread | None = None
        self._lines: list[str] = []

    @property
    def active(self) -> bool:
        return self.tracking is not None and any(_tracker(s.name).open for s in self.tracking.specs)

    def _read_ids(self) -> dict[str, str]:
        path = self.tracking.runs_file if self.tracking else ""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            return {k: v["run_id"] for k, v in data.items() if isinstance(v, dict) and v.get("run_id")}
        except (OSError, ValueError):
            return {}

    def _write_ids(self) -> None:
        assert self.tracking is not None
        os.makedirs(os.path.dirname(self.tracking.runs_file), exist_ok=True)
        data = {
            s.name: {
                "run_id": self.ids[s.name],
                "project": s.project,
                "run_name": s.run_name,
                "location": s.location,
            }
            for s in self.tracking.specs
            if s.name in self.ids
        }
        tmp = self.tracking.runs_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, self.tracking.runs_file)

    def start(self) -> None:
        """`prepare` in the background (MLflow creates its store in seconds): the steps before training run
        meanwhile; `wait` joins it before the train step."""
        if not self.active or self._thread is not None or self.tracking is None:
            return
        # imports register at-fork hooks (logging's): never beside the steps' forks (procgroup)
        clients = tuple(
            module
            for s in self.tracking.specs
            if _tracker(s.name).run_ids
            for module in _tracker(s.name).client
        )

        def prepare() -> None:  # its warnings come back with its lines, on the runner's thread
            warn, self.warn = self.warn, lambda text: self._lines.append(f"warning: {text}")
            procgroup.import_guarded(clients)
            try:
                self._lines.extend(self.prepare())
            finally:
                self.warn = warn

        self._thread = threading.Thread(target=prepare, daemon=True)
        self._thread.start()

    def wait(self) -> list[str]:
        """Join `start`; the lines `prepare` returned (once)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        lines, self._lines = self._lines, []
        return lines

    def prepare(self) -> list[str]:
        """Create or continue each run; returns lines for the runner's log."""
        if not self.active or self.tracking is None:
            return []
        self.prepared = True
        known, lines = self._read_ids(), []
        for spec in self.tracking.specs:
            ids = _tracker(spec.name).run_ids
            if ids is None:
                continue
            run_id = spec.run_id or known.get(spec.name)
            if ids == "create":
                sink = self._open(spec, run_id)
                if sink is None:
                    continue
                sink.log_params(dict(self.tracking.params))
                run_id = sink.run_id
            run_id = run_id or new_run_id()
            self.ids[spec.name] = run_id
            if known.get(spec.name) == run_id:
                self.continued.add(spec.name)
            verb = "continues" if spec.name in self.continued else "new"
            lines.append(f"{spec.name} run {run_id} ({verb}) in {spec.location}")
        if self.ids:
            self._write_ids()
        return lines

    def _open(self, spec: Any, run_id: str | None) -> Sink | None:
        try:
            return open_run(spec, run_id=run_id)
        except Exception as e:  # noqa: BLE001 - a tracker never stops the run
            self.warn(f"report_to {spec.name}: {e}; the run is not reported to {spec.name}")
            return None

    def env(self) -> dict[str, str]:
        """The run ids for the train step, in the trackers' own variables."""
        out: dict[str, str] = {}
        for spec in self.tracking.specs if self.tracking else ():
            if spec.name in self.ids:
                out.update(run_env(spec, self.ids[spec.name]))
            if spec.name in self.continued:
                out.update(dict(spec.resume_env))
        return out

    def resumed(self) -> None:
        """The train step restarts (auto-resume): every run it reports to now exists."""
        self.continued.update(self.ids)

    def _segment(self, name: str, state: RunState) -> bool:
        """A tracker whose every segment is a run of its own (no id kept) gets one at the end, unless the
        run was killed: then there is no run of it to end."""
        return _tracker(name).run_ids is None and state != "killed"

    def report(self, summary: Any, artifacts: list[str], *, state: RunState = "finished") -> None:
        """The pipeline's results into each run, and the run ended in `state` (after training: finished;
        failed after a failed training; killed after an interrupt). `summary` None: no new summary (the
        runner passes none when this invocation trained nothing: the training's own summary stays)."""
        if not self.prepared or self.tracking is None:
            return
        opened = [
            self._open(s, self.ids.get(s.name))
            for s in self.tracking.specs
            if _tracker(s.name).open is not None and (s.name in self.ids or self._segment(s.name, state))
        ]
        sinks = Sinks([s for s in opened if s is not None], warn=self.warn)
        if not sinks:
            return
        sinks.log_params(dict(self.tracking.params))
        if summary is not None:
            sinks.log_summary(summary_values(summary))
        for path in artifacts:
            if os.path.isfile(path):
                sinks.log_artifact(path)
        sinks.close(state=state)


def summary_values(summary: Any) -> dict[str, float | str]:
    """The run summary as flat `summary/...` figures."""
    out: dict[str, float | str] = {}
    for key in (
        "loss_start",
        "loss_end",
        "first_step",
        "last_step",
        "nan_iterations",
        "peak_memory_mb",
        "wall_s",
    ):
        value = getattr(summary, key, None)
        if value is not None:
            out[f"summary/{key}"] = value
    tp = summary.throughput or {}
    if tp.get("value") is not None:
        out["summary/throughput"] = tp["value"]
        out["summary/throughput_unit"] = str(tp.get("unit", ""))
        out["summary/throughput_formula"] = str(tp.get("formula", ""))
    for name, m in (summary.metrics or {}).items():
        for k in ("first", "last", "mean", "min", "max"):
            if k in m:
                out[f"summary/{name}/{k}"] = m[k]
    return out
