"""Run a Plan: each step as a subprocess in its own process group, teed to the documented log files.

    run_experiment(plan, loaded) -> 0      raises StageFailedError / InterruptedRunError otherwise

Lifecycle of one `train` (DESIGN.md, "runner" and "results"):

1. write `exp-config.yaml`; with `train_auto_resume`, repair the checkpoint tracker and re-plan so the
   train step resumes from the newest complete checkpoint;
2. for each step in order: planner skip -> multi-node wait (NODE_RANK > 0, `only_node0`) -> manifest skip
   -> run. A successful step writes its manifest; a failing one has the outputs it created removed
   (never `saved_checkpoints`) and raises StageFailedError naming the first failing rank;
3. the train step runs with the device monitor and the retention watcher; when it fails and
   `train_auto_resume` is on it is re-planned and restarted from the newest checkpoint, up to
   `auto_resume.max_attempts` times, `auto_resume.backoff_s` apart;
4. the plot step runs in-process; the summary is printed and saved to `.af/summary.json`.

SIGINT / SIGTERM stop every child process group (SIGTERM, grace, SIGKILL) and raise InterruptedRunError
(exit 130 / 143); the logs record `run interrupted by SIGINT`.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from datetime import datetime
from typing import Any

from ascendfactory import checkpoints
from ascendfactory.config.load import LoadedExperiment
from ascendfactory.errors import InterruptedRunError, StageFailedError
from ascendfactory.layout import OutputLayout
from ascendfactory.pipeline import manifest, results
from ascendfactory.pipeline.launch import (
    DIST_TIMEOUT_ENV,
    LogNames,
    Outcome,
    StepProcess,
    with_rendezvous_timeout,
)
from ascendfactory.pipeline.monitor import DeviceMonitor
from ascendfactory.pipeline.plan import Plan, Step
from ascendfactory.pipeline.procgroup import DEFAULT_GRACE_S, Interrupt, trap_signals
from ascendfactory.pipeline.progress import Progress
from ascendfactory.pipeline.results import StepResult

POLL_S = 0.2


def run_experiment(plan: Plan, loaded: LoadedExperiment, *, live: bool | None = None,
                   grace_s: float = DEFAULT_GRACE_S, stamp: str | None = None) -> int:
    """Run every step of `plan`; 0 on success. See the module docstring for what happens on the way."""
    return Runner(plan, loaded, live=live, grace_s=grace_s, stamp=stamp).run()


class Runner:
    def __init__(self, plan: Plan, loaded: LoadedExperiment, *, live: bool | None = None,
                 grace_s: float = DEFAULT_GRACE_S, stamp: str | None = None) -> None:
        from ascendfactory.cli._output import out

        self.plan, self.loaded, self.cfg = plan, loaded, loaded.config
        self.out = out
        self.layout = OutputLayout(plan.output_dir)
        self.names = LogNames.for_run(self.layout.logs_dir, plan.model_name, plan.exp_name, stamp)
        self.manifests = self.layout.manifest_dir
        self.node_rank = self.cfg.env.NODE_RANK
        self.grace_s = grace_s
        self.interrupt = Interrupt()
        self.results: list[StepResult] = []
        self.started_at = time.time()
        self._saved = threading.Event()
        self._log = None
        self._live = live

    # -- lifecycle ------------------------------------------------------------------------------------
    def run(self) -> int:
        t0 = time.monotonic()
        os.makedirs(self.layout.logs_dir, exist_ok=True)
        self._log = open(self.names.runner, "a", encoding="utf-8", buffering=1)
        train = self.plan.step("train")
        loss_rank = self._loss_rank(train)
        facts = self.plan.facts
        self.progress = Progress(self.out.console, live=self._live, seq_length=facts.get("seq_length"),
                                 devices=facts.get("world_size"))
        try:
            with trap_signals(self.interrupt):
                self.progress.start(self.plan.steps)
                written = results.write_exp_config(self.cfg.model_dump(mode="json"), self.layout.exp_config,
                                                   source=self.loaded.source)
                self.event(f"run {self.names.prefix} {self.names.stamp}: logs in {self.layout.logs_dir}"
                           + (f", resolved config in {written}" if written else ""))
                self._prepare_resume()
                for step in list(self.plan.steps):
                    self._check_interrupt(None)
                    self.run_step(step, loss_rank)
            self.progress.close()
            self.finish(time.monotonic() - t0, loss_rank)
        except InterruptedRunError as e:
            self.event(str(e))
            raise
        except StageFailedError as e:
            self.event(f"step {e.stage} failed with exit code {e.returncode}; log: {e.log_path}")
            raise
        finally:
            self.progress.close()
            self._log.close()
        return 0

    def finish(self, wall_s: float, loss_rank: int | None) -> None:
        summary = results.RunSummary(output_dir=self.plan.output_dir, steps=self.results, wall_s=wall_s)
        written = {"logs": self.layout.logs_dir}
        if os.path.isdir(self.layout.saved_checkpoints):
            written["checkpoints"] = self.layout.saved_checkpoints
        for step in self.plan.steps:
            made = not step.skipped and step.outputs and os.path.exists(step.outputs[0])
            if step.kind in ("mg2hf", "plot") and made:
                written["hf weights" if step.kind == "mg2hf" else "loss curve"] = step.outputs[0]
        if os.path.exists(self.layout.exp_config):
            written["config"] = self.layout.exp_config
        summary.written = written
        if loss_rank is not None:
            facts = self.plan.facts
            results.summarize(summary, self._loss_logs(loss_rank), seq_length=facts.get("seq_length"),
                              devices=facts.get("world_size"))
        written["summary"] = results.save_summary(summary, os.path.join(self.manifests, "summary.json"))
        results.render_summary(summary, self.out)
        self.event(f"run finished in {wall_s:.1f}s")

    def event(self, text: str) -> None:
        if self._log is not None and not self._log.closed:
            self._log.write(f"[{datetime.now():%Y-%m-%d %H:%M:%S}] {text}\n")
        if hasattr(self, "progress"):
            self.progress.event(text)

    # -- one step -------------------------------------------------------------------------------------
    def run_step(self, step: Step, loss_rank: int | None) -> None:
        if step.skipped:
            return self._record(step, "skipped", step.skip_reason or "")
        if step.kind == "plot":
            return self._plot(step, loss_rank)
        if step.only_node0 and self.node_rank != 0:
            t0 = time.monotonic()
            self.progress.step_started(step, detail="waiting for NODE_RANK 0")
            self.event(f"step {step.name}: waiting for NODE_RANK 0 (shared filesystem)")
            path = manifest.wait_for_node0(step, self.plan.env, self.manifests,
                                           timeout_s=self.cfg.node_wait_timeout_s, started_at=self.started_at,
                                           sleep=self.interrupt.sleep)
            self._check_interrupt(None)
            return self._record(step, "waited", f"run by NODE_RANK 0 ({path})", time.monotonic() - t0)
        if step.kind != "train":
            decision = manifest.decide(step, self.plan.env, self.manifests)
            step.fingerprint = decision.fingerprint
            if decision.up_to_date:
                return self._record(step, "skipped", decision.reason)
        manifest.invalidate(self.manifests, step)
        existed = {p: os.path.exists(p) for p in step.outputs}
        try:
            if step.kind == "train":
                step, outcome = self._train(step, loss_rank)
            else:
                outcome = self.launch(step, loss_rank=None)
        except InterruptedRunError:
            self._remove_partial(step, existed)
            raise
        if outcome.returncode != 0:
            self._remove_partial(step, existed)
            manifest.write_failure(self.manifests, step, returncode=outcome.returncode,
                                   log_path=outcome.log_path, node_rank=self.node_rank)
            self._record(step, "failed", f"exit code {outcome.returncode}", outcome.wall_s, outcome.logs)
            raise StageFailedError(step.name, outcome.returncode, outcome.log_path, outcome.tail,
                                   outcome.rank)
        if step.kind != "train":
            manifest.write(self.manifests, step, self.plan.env, wall_s=outcome.wall_s,
                           node_rank=self.node_rank)
        self._record(step, "done", "", outcome.wall_s, outcome.logs)

    def launch(self, step: Step, *, loss_rank: int | None) -> Outcome:
        """Start the step, tee it, watch it (monitor, retention, signals) until it exits."""
        env = {**os.environ, **self.plan.env, **step.env}
        env.setdefault("PYTHONUNBUFFERED", "1")  # live logs: children flush line by line
        argv = list(step.argv)
        monitor = None
        if step.ranks is not None:
            argv = with_rendezvous_timeout(argv, self.cfg.node_wait_timeout_s)
            env.setdefault(DIST_TIMEOUT_ENV, str(int(self.cfg.node_wait_timeout_s)))
            monitor = DeviceMonitor(self.names, step.ranks, env=env)
        self.progress.step_started(step, loss_rank=loss_rank)
        self.event(f"step {step.name}: running {step.command_line()}")
        proc = StepProcess(step, env=env, names=self.names, on_line=self._on_line)
        proc.start(argv)
        if monitor is not None and proc.pid is not None:
            monitor.attach(proc.pid)
            monitor.start()
        try:
            while proc.poll() is None:
                if self.interrupt.event.wait(POLL_S):
                    break
                if self._saved.is_set():
                    self._saved.clear()
                    self._retention()
                self.progress.refresh()
            if self.interrupt.signum is not None:
                proc.stop(reason=f"run interrupted by {signal.Signals(self.interrupt.signum).name}",
                          grace_s=self.grace_s)
        finally:
            if monitor is not None:
                monitor.stop()
            outcome = proc.finish()
        self._check_interrupt(step, outcome)
        return outcome

    def _on_line(self, rank: int | None, text: str) -> None:
        if checkpoints.SAVED_MARKER in text:
            self._saved.set()
        self.progress.feed(rank, text)

    # -- train: auto-resume and retention -------------------------------------------------------------
    def _train(self, step: Step, loss_rank: int | None) -> tuple[Step, Outcome]:
        policy = self.cfg.auto_resume
        attempt = 0
        while True:
            outcome = self.launch(step, loss_rank=loss_rank)
            self._retention()
            if outcome.returncode == 0 or not self.cfg.train_auto_resume or attempt >= policy.max_attempts:
                return step, outcome
            attempt += 1
            state, repaired = checkpoints.repair_tracker(self.layout.saved_checkpoints)
            if repaired:
                self.event(repaired)
            start = (checkpoints.iteration_name(state.tracker) if state.resumable
                     else "the start (no complete checkpoint yet)")
            rank = f" (first failing rank {outcome.rank})" if outcome.rank is not None else ""
            self.event(f"train failed with exit code {outcome.returncode}{rank}; auto-resume "
                       f"{attempt}/{policy.max_attempts} from {start} in {policy.backoff_s:g}s")
            if not self.interrupt.sleep(policy.backoff_s):
                self._check_interrupt(step)
            step = self._replan_train(step)

    def _replan_train(self, fallback: Step) -> Step:
        from ascendfactory.pipeline.planner import make_plan

        new = make_plan(self.loaded, dry_run=False).step("train")
        if new is None:
            return fallback
        self.event("re-planned train: " + ("; ".join(new.notes) or new.command_line()))
        return new

    def _prepare_resume(self) -> None:
        """Re-running after a crash continues from the newest checkpoint even when the tracker is stale."""
        if not self.cfg.train_auto_resume or not os.path.isdir(self.layout.saved_checkpoints):
            return
        _, repaired = checkpoints.repair_tracker(self.layout.saved_checkpoints)
        if repaired and self.plan.step("train") is not None:
            self.event(repaired)
            new = self._replan_train(self.plan.step("train"))  # type: ignore[arg-type]
            self.plan.steps = [new if s.kind == "train" else s for s in self.plan.steps]

    def _retention(self) -> None:
        keep = self.cfg.save_total_limit
        if keep > 0:
            for path in checkpoints.apply_retention(self.layout.saved_checkpoints, keep):
                self.event(f"save_total_limit {keep}: removed {path}")

    # -- helpers --------------------------------------------------------------------------------------
    def _plot(self, step: Step, loss_rank: int | None) -> None:
        t0 = time.monotonic()
        paths = self._loss_logs(loss_rank) if loss_rank is not None else []
        out_png = step.outputs[0] if step.outputs else self.layout.loss_plot
        written = results.plot(paths, out_png) if paths else None
        if written is None:
            return self._record(step, "skipped", "no loss logged by this node", time.monotonic() - t0)
        self._record(step, "done", written, time.monotonic() - t0)

    def _loss_logs(self, rank: int) -> list[str]:
        return results.loss_logs(self.names, nnodes=self.cfg.env.NNODES, rank=rank)

    def _loss_rank(self, train: Step | None) -> int | None:
        """MindSpeed-LLM logs loss on the last rank; None when that rank is on another node."""
        if train is None or train.ranks is None:
            return None
        last = train.ranks.world_size - 1
        return last if train.ranks.node_rank == train.ranks.nnodes - 1 else None

    def _remove_partial(self, step: Step, existed: dict[str, bool]) -> None:
        """Remove outputs this failed run created; never checkpoints, logs or the output dir itself."""
        saved = os.path.abspath(self.layout.saved_checkpoints)
        keep = {os.path.abspath(p) for p in (saved, self.layout.logs_dir, self.layout.root, self.manifests)}
        for path, was_there in existed.items():
            full = os.path.abspath(path)
            if was_there or full in keep or full.startswith(saved + os.sep):
                continue
            if os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
            elif os.path.exists(full):
                os.remove(full)
            else:
                continue
            self.event(f"removed partial output of the failed step {step.name}: {full}")

    def _record(self, step: Step, state: str, detail: str, wall_s: float = 0.0, logs: Any = None) -> None:
        self.results.append(StepResult(step.name, state, wall_s, detail, list(logs or [])))
        self.progress.step_done(step, state, detail if state != "done" else f"{wall_s:.1f}s")
        self.event(f"step {step.name}: {state}" + (f" in {wall_s:.1f}s" if wall_s else "")
                   + (f" - {detail}" if detail else ""))

    def _check_interrupt(self, step: Step | None, outcome: Outcome | None = None) -> None:
        signum = self.interrupt.signum
        if signum is None:
            return
        if step is not None:
            self._record(step, "interrupted", signal.Signals(signum).name, outcome.wall_s if outcome else 0.0,
                         outcome.logs if outcome else None)
        raise InterruptedRunError(signum)
