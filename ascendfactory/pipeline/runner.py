"""Run a Plan: each step as a subprocess in its own process group, teed to the documented log files.

    run_experiment(plan, out=..., replan=...) -> 0     raises StageFailedError / InterruptedRunError otherwise

The runner reads only the plan (`ascendfactory.plan`): it imports nothing from the config, the backends or
the CLI. What it does per role and launch kind:

1. write the plan's `files` (the resolved `exp-config.yaml`, ...); with `policy.auto_resume`, repair the
   checkpoint tracker (`checkpoints.repair_tracker`, by the plan's checkpoint scheme) and re-plan (the
   `replan` callback) so the train step resumes from the newest complete checkpoint;
2. for each step in order: planner skip -> multi-node wait (NODE_RANK > 0, `only_node0`) -> manifest skip
   (never for TRAIN and PLOT) -> create `mkdirs` -> run through the launcher of its launch kind
   (`pipeline.launchers`). A successful step writes its manifest; a failing one has the outputs it
   created removed (never the checkpoint root) and raises StageFailedError naming the first failing rank;
3. the TRAIN step runs with the device monitor and checkpoint retention (`checkpoints.retain`, applied
   whenever the log shows `checkpoints.saved_marker` and at the end); when it fails and
   `policy.auto_resume` is on it is re-planned (the new plan's `files` written again: its step may read
   them) and restarted, up to `policy.max_attempts` times,
   `policy.backoff_s` apart;
4. the PLOT step runs in-process from the loss rank's logs (`logs.loss_rank`, `logs.format`); the summary
   (loss, throughput by `logs.throughput`) is printed through `out` and saved to `.af/summary.json`;
5. with `plan.tracking` (`report_to`), on the loss rank's node: each tracker run is created or continued
   before the steps, its id handed to the train step, and the summary, the loss plot and `exp-config.yaml`
   reported to it at the end (`pipeline.tracking`); a failed training ends those runs failed, an interrupted
   run killed.

SIGINT / SIGTERM stop every child process group (SIGTERM, grace, SIGKILL) and raise InterruptedRunError
(exit 130 / 143); the logs record `run interrupted by SIGINT`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import IO, Any

from ascendfactory.checkpoints import get_scheme
from ascendfactory.errors import InterruptedRunError, MissingDependencyError, StageFailedError
from ascendfactory.output_tree import EXP_CONFIG
from ascendfactory.pipeline import manifest, procgroup, results
from ascendfactory.pipeline.launch import LogNames, Outcome, read_tail, timestamp
from ascendfactory.pipeline.launchers import open_step
from ascendfactory.pipeline.monitor import DeviceMonitor
from ascendfactory.pipeline.procgroup import DEFAULT_GRACE_S, Interrupt, trap_signals
from ascendfactory.pipeline.progress import Progress
from ascendfactory.pipeline.results import StepResult
from ascendfactory.pipeline.tracking import RunTracking
from ascendfactory.plan import Plan, Role, Step
from ascendfactory.secrets import mask_argv

POLL_S = 0.2
SUMMARY_LABELS = {Role.EXPORT: "hf weights", Role.PLOT: "loss curve"}


def run_experiment(
    plan: Plan,
    *,
    out: Any,
    replan: Callable[[], Plan] | None = None,
    live: bool | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    stamp: str | None = None,
    verbose: bool = False,
) -> int:
    """Run every step of `plan`; 0 on success. `out`: the CLI's output object (`console`, `table`, `text`);
    `replan`: plans the experiment again (auto-resume); `verbose`: the steps' output lines on the console
    too (they are always in the logs). See the module docstring for the rest."""
    return Runner(
        plan, out=out, replan=replan, live=live, grace_s=grace_s, stamp=stamp, verbose=verbose
    ).run()


class Runner:
    def __init__(
        self,
        plan: Plan,
        *,
        out: Any,
        replan: Callable[[], Plan] | None = None,
        live: bool | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        stamp: str | None = None,
        verbose: bool = False,
    ) -> None:
        self.plan, self.out, self.replan = plan, out, replan
        self.verbose = verbose
        self.tag = procgroup.run_tag(plan.output_dir)  # in every step's environment (procgroup.RUN_TAG)
        self.policy = plan.policy
        self.names = LogNames(plan.logs_dir, plan.logs.naming, stamp or timestamp())
        self.manifests = plan.manifest_dir
        self.grace_s = grace_s
        self.interrupt = Interrupt()
        self.results: list[StepResult] = []
        self.started_at = time.time()
        self._saved = threading.Event()
        self._train_detail = ""  # what the summary says of a train step that ended unusually
        self._log: IO[str] | None = None
        self._live = live
        self.tracking = RunTracking(plan.tracking, warn=lambda text: self.event(f"warning: {text}"))

    # -- lifecycle ------------------------------------------------------------------------------------
    def run(self) -> int:
        t0 = time.monotonic()
        os.makedirs(self.plan.logs_dir, exist_ok=True)
        procgroup.become_subreaper()  # every process of the run stays ours, whatever session it moves to
        self._log = log = open(self.names.runner, "a", encoding="utf-8", buffering=1)
        self.progress = Progress(self.out.console, self.plan.logs, live=self._live, verbose=self.verbose)
        try:
            with trap_signals(self.interrupt):
                self.progress.start(self.plan.steps)
                written = [
                    p
                    for path, text in self.plan.files.items()
                    if (p := results.write_file(path, text, source=self.plan.source))
                ]
                self.event(
                    f"run {self.names.prefix} {self.names.stamp}: logs in {self.plan.logs_dir}"
                    + (f", resolved config in {', '.join(written)}" if written else "")
                )
                stale = procgroup.stop_dead_runs(self.plan.output_dir, grace_s=self.grace_s)
                if stale:
                    self.event(
                        f"stopped {len(stale)} process(es) a killed earlier run left in this directory "
                        f"(pids {', '.join(map(str, stale))}) before starting"
                    )
                self._prepare_resume()
                loss_rank = self._loss_rank(self.plan.with_role(Role.TRAIN))
                if loss_rank is not None:
                    self.tracking.start()
                for step in list(self.plan.steps):
                    self._check_interrupt(None)
                    self.run_step(step, loss_rank)
                self._check_interrupt(None)
            self.progress.close()
            self.finish(time.monotonic() - t0, loss_rank)
        except InterruptedRunError as e:
            e = InterruptedRunError(e.signum, self._resume_hint())
            self.event(str(e), console=False)  # the CLI prints it once, as the error
            self.tracking.wait()
            self.tracking.report(None, [], state="killed")  # never left RUNNING
            raise e from None
        except StageFailedError as e:
            self.event(f"step {e.stage} failed with exit code {e.returncode}; log: {e.log_path}")
            self.tracking.wait()
            self.tracking.report(None, [], state="failed")
            raise
        finally:
            self.progress.close()
            log.close()
        return 0

    def finish(self, wall_s: float, loss_rank: int | None) -> None:
        summary = results.RunSummary(output_dir=self.plan.output_dir, steps=self.results, wall_s=wall_s)
        summary.predicted = self.plan.timing
        written = {"logs": self.plan.logs_dir}
        ckpt = self.plan.checkpoints
        if ckpt is not None and os.path.isdir(ckpt.root):
            written["checkpoints"] = ckpt.root
        for step in self.plan.steps:
            made = not step.skipped and step.outputs and os.path.exists(step.outputs[0])
            if step.role in SUMMARY_LABELS and made:
                written[SUMMARY_LABELS[step.role]] = step.outputs[0]
        for path in self.plan.files:
            if os.path.exists(path):
                written["config" if os.path.basename(path) == EXP_CONFIG else os.path.basename(path)] = path
        summary.written = written
        if loss_rank is not None:
            results.summarize(summary, self._loss_logs(loss_rank), self.plan.logs)
        summary.memory = results.memory_by_rank(self._rank_logs(), self.plan.logs)
        written["summary"] = results.save_summary(summary, self.plan.tree.summary)
        self.tracking.wait()  # a run whose train step was skipped: its runs exist all the same
        if loss_rank is not None:
            fresh = summary if self._trained_here(loss_rank) else None  # a no-op re-run adds no summary
            self.tracking.report(fresh, [written[k] for k in ("loss curve", "config") if k in written])
        if self.tracking.ids:
            written["trackers"] = ", ".join(f"{k} run {v}" for k, v in self.tracking.ids.items())
        results.render_summary(summary, self.out)
        self.event(f"run finished in {wall_s:.1f}s")

    def event(self, text: str, *, log_only: str = "", console: bool = True) -> None:
        """`text` to the runner log and the console (`console`); `log_only` (a command line, ...) to the log
        alone."""
        if self._log is not None and not self._log.closed:
            self._log.write(f"[{datetime.now():%Y-%m-%d %H:%M:%S}] {text}{log_only}\n")
        if console and hasattr(self, "progress"):
            self.progress.event(text)

    def _resume_hint(self) -> str:
        """What the same command does after an interrupt: resume from the newest complete checkpoint (the
        tracker is repaired now, as the next run would), or start the training again."""
        ckpt = self.plan.checkpoints
        if self.plan.with_role(Role.TRAIN) is None or ckpt is None:
            return "run the same command again to continue (finished steps are skipped)"
        if not self.policy.auto_resume:
            return "train_auto_resume is off: the same command trains again from the start"
        start = self._repair()[0] if os.path.isdir(ckpt.root) else None
        if start is None:
            return "run the same command again to train from the start (no complete checkpoint yet)"
        return f"run the same command again to resume from {start}"

    # -- what the train step trained ------------------------------------------------------------------
    def _refuse_untrained(
        self, step: Step, loss_rank: int | None, wall_s: float = 0.0, logs: Any = None
    ) -> None:
        """A train step whose loss rank's log shows it trained nothing (`results.untrained`: no finite loss,
        or more than half the iterations NaN) fails here, whatever the framework's NaN checks were set to
        and whatever its exit code: a scheduler reading the exit status learns that nothing was trained.
        Not retried (the same data and settings give the same NaN)."""
        if loss_rank is None:
            return
        paths = self._loss_logs(loss_rank)
        reason = results.untrained(paths, self.plan.logs) if paths else None
        if reason is None:
            return
        ckpt = self.plan.checkpoints
        fix = (
            "check the data against the sequence length (check_data_fit: true names the samples that train "
            "on nothing), the learning rate and the precision"
        )
        if ckpt is not None:
            fix += f"; then remove {ckpt.root} to train again (its last checkpoint makes the run complete)"
        manifest.write_failure(
            self.manifests, step, returncode=1, log_path=paths[-1], node_rank=self.policy.node_rank
        )
        self._record(step, "failed", "trained nothing", wall_s, logs)
        raise StageFailedError(step.name, 1, paths[-1], f"{reason}\nfix: {fix}", what="trained nothing")

    # -- one step -------------------------------------------------------------------------------------
    def run_step(self, step: Step, loss_rank: int | None) -> None:
        if step.skipped:
            if step.role is Role.TRAIN:  # complete: what it trained is judged all the same
                self._refuse_untrained(step, loss_rank)
            return self._record(step, "skipped", step.skip_reason or "")
        if step.role is Role.PLOT:
            return self._plot(step, loss_rank)
        if step.launch is None:
            raise ValueError(f"step {step.name}: nothing to launch")  # a planning bug, not a user error
        if step.only_node0 and self.policy.node_rank != 0:
            t0 = time.monotonic()
            self.progress.step_started(step, detail="waiting for NODE_RANK 0")
            self.event(f"step {step.name}: waiting for NODE_RANK 0 (shared filesystem)")
            path = manifest.wait_for_node0(
                step,
                self.plan.env,
                self.manifests,
                timeout_s=self.policy.node_wait_timeout_s,
                started_at=self.started_at,
                sleep=self.interrupt.sleep,
            )
            self._check_interrupt(None)
            return self._record(step, "waited", f"run by NODE_RANK 0 ({path})", time.monotonic() - t0)
        if step.role is not Role.TRAIN:
            decision = manifest.decide(step, self.plan.env, self.manifests)
            step.fingerprint = decision.fingerprint
            if decision.up_to_date:
                return self._record(step, "skipped", decision.reason)
        manifest.invalidate(self.manifests, step)
        existed = {p: os.path.exists(p) for p in step.outputs}
        try:
            for d in step.mkdirs:
                os.makedirs(d, exist_ok=True)
            if step.role is Role.TRAIN:
                step, outcome = self._train(step, loss_rank)
            else:
                outcome = self.launch(step, loss_rank=None)
        except InterruptedRunError:
            self._remove_partial(step, existed)
            raise
        if outcome.returncode != 0:
            self._remove_partial(step, existed)
            manifest.write_failure(
                self.manifests,
                step,
                returncode=outcome.returncode,
                log_path=outcome.log_path,
                node_rank=self.policy.node_rank,
            )
            self._record(step, "failed", f"exit code {outcome.returncode}", outcome.wall_s, outcome.logs)
            raise StageFailedError(
                step.name, outcome.returncode, outcome.log_path, outcome.tail, outcome.rank
            )
        if step.role is not Role.TRAIN:
            manifest.write(
                self.manifests, step, self.plan.env, wall_s=outcome.wall_s, node_rank=self.policy.node_rank
            )
        else:
            self._refuse_untrained(step, loss_rank, outcome.wall_s, outcome.logs)
        detail = self._train_detail if step.role is Role.TRAIN else ""
        self._record(step, "done", detail, outcome.wall_s, outcome.logs)

    def launch(self, step: Step, *, loss_rank: int | None) -> Outcome:
        """Start the step through its launcher, tee it, watch it (monitor, retention, signals) to its end."""
        runs = self.tracking.env() if step.role is Role.TRAIN else {}
        env = {**os.environ, **self.plan.env, **runs, **step.env, procgroup.RUN_TAG: self.tag}
        env.setdefault("PYTHONUNBUFFERED", "1")  # live logs: children flush line by line
        proc, launcher = open_step(step, self.policy, self.names, env=env, on_line=self._on_line)
        targets = launcher.monitor() if step.role is Role.TRAIN else None
        monitor = None
        if targets is not None and step.launch is not None:
            n, ws = self.policy.nnodes, step.launch.world_size
            paths = {
                r: self.names.npu_info(r, nnodes=n, world_size=ws, node_rank=self.policy.node_rank)
                for r in targets.ranks
            }
            monitor = DeviceMonitor(targets, paths, env=proc.env)
        self.progress.step_started(step, loss_rank=loss_rank)
        self.event(f"step {step.name}: running", log_only=f" {mask_argv(step.command_line())}")
        proc.start()
        if step.role is Role.TRAIN and loss_rank is not None and self.plan.with_role(Role.PLOT) is not None:
            results.prewarm_plot()  # matplotlib loads while training runs, not after it
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
                proc.stop(
                    reason=f"run interrupted by {signal.Signals(self.interrupt.signum).name}",
                    grace_s=self.grace_s,
                )
        finally:
            if monitor is not None:
                monitor.stop()
            outcome = proc.finish()
        self._check_interrupt(step, outcome)
        return outcome

    def _on_line(self, rank: int | None, text: str) -> None:
        marker = self.plan.checkpoints.saved_marker if self.plan.checkpoints else None
        if marker and marker in text:
            self._saved.set()
        self.progress.feed(rank, text)

    # -- train: auto-resume and retention -------------------------------------------------------------
    def _train(self, step: Step, loss_rank: int | None) -> tuple[Step, Outcome]:
        for line in self.tracking.wait():  # the tracker runs exist before training reports to them
            self.event(f"tracker: {line}")
        policy = self.policy
        attempt = 0
        while True:
            outcome = self.launch(step, loss_rank=loss_rank)
            self._retention()
            manifest.write_outcome(
                self.manifests,
                step,
                node_rank=policy.node_rank,
                returncode=outcome.returncode,
                log_path=outcome.log_path,
            )
            if outcome.returncode == 0 or not policy.auto_resume:
                return step, outcome
            fatal = self._unretryable(outcome)
            if fatal:
                self.event(
                    f"train failed with exit code {outcome.returncode}: '{fatal}' in its log is an error a "
                    f"restart cannot fix; auto-resume stops"
                )
                return step, outcome
            start, repaired = self._repair()
            if repaired:
                self.event(repaired)
            new = self._replan_train(step)
            if new.skipped:  # the plan finds the run complete: its last iteration is saved
                return step, self._complete_after_failure(new, outcome)
            finished = self._finished_peers()
            if finished:
                return step, self._not_retried(outcome, finished, start)
            if attempt >= policy.max_attempts:
                return step, outcome
            attempt += 1
            start = start or "the start (no complete checkpoint yet)"
            rank = f" (first failing rank {outcome.rank})" if outcome.rank is not None else ""
            self.event(
                f"train failed with exit code {outcome.returncode}{rank}; auto-resume "
                f"{attempt}/{policy.max_attempts} from {start} in {policy.backoff_s:g}s"
            )
            if not self.interrupt.sleep(policy.backoff_s):
                self._check_interrupt(step)
            step = new
            self.tracking.resumed()

    # -- a failure after the others finished: complete, or failed with the reason, never a lone retry ------
    def _complete_after_failure(self, planned: Step, outcome: Outcome) -> Outcome:
        """The train step failed, and the re-plan finds the run complete (`planned.skip_reason`): this node's
        failure came after the last save (a teardown abort). With other nodes, their outcome decides:
        every one finished -> the step is complete; one failed, or none was heard of within
        `node_wait_timeout_s` -> it fails with that reason. Never retried: a retry has nothing to train and,
        on several nodes, would wait for peers that have left."""
        code = outcome.returncode
        peers = self._wait_for_peers()
        failed = {r: p for r, p in peers.items() if p is not None and p.get("returncode") != 0}
        silent = [r for r, p in peers.items() if p is None]
        if failed or silent:
            why = "; ".join(
                [
                    *(
                        f"NODE_RANK {r} failed too (exit code {p.get('returncode')}, log {p.get('log_path')})"
                        for r, p in failed.items()
                    ),
                    *(
                        f"NODE_RANK {r} reported no outcome within node_wait_timeout_s "
                        f"({self.policy.node_wait_timeout_s:g}s; on a shared filesystem it writes "
                        f"{os.path.basename(manifest.outcome_path(self.manifests, planned, r))})"
                        if self.policy.shared_filesystem
                        else f"NODE_RANK {r}'s outcome cannot be read here (shared_filesystem: false)"
                        for r in silent
                    ),
                ]
            )
            text = (
                f"train exited with code {code} after the run saved its last iteration "
                f"({planned.skip_reason}); {why}: not retried (nothing is left to train)"
            )
            self.event(text)
            return dataclasses.replace(outcome, tail=text + ("\n" + outcome.tail if outcome.tail else ""))
        others = f"; NODE_RANK {', '.join(map(str, peers))} finished" if peers else ""
        self._train_detail = f"complete; exit code {code} came after the last save"
        self.event(
            f"train exited with code {code} after the run saved its last iteration{others}: the step is "
            f"complete, not retried ({planned.skip_reason})"
        )
        return dataclasses.replace(outcome, returncode=0, tail="")

    def _wait_for_peers(self) -> dict[int, dict[str, Any] | None]:
        """The other nodes' train outcomes, waiting up to `node_wait_timeout_s` for all of them (not at all
        without a shared filesystem: they cannot be read here)."""
        if not self.policy.shared_filesystem:
            return self._peer_outcomes()
        deadline = time.monotonic() + self.policy.node_wait_timeout_s
        while True:
            peers = self._peer_outcomes()
            if all(p is not None for p in peers.values()) or time.monotonic() >= deadline:
                return peers
            if not self.interrupt.sleep(min(1.0, max(deadline - time.monotonic(), 0.01))):
                self._check_interrupt(None)

    def _peer_outcomes(self) -> dict[int, dict[str, Any] | None]:
        train = self.plan.with_role(Role.TRAIN)
        if train is None or self.policy.nnodes <= 1:
            return {}
        return manifest.peer_outcomes(
            self.manifests,
            train,
            nnodes=self.policy.nnodes,
            node_rank=self.policy.node_rank,
            since=self.started_at,
        )

    def _finished_peers(self) -> list[int]:
        """Other nodes whose train step already ended well in this run: a lone restart would wait for them."""
        return [r for r, p in self._peer_outcomes().items() if p is not None and p.get("returncode") == 0]

    def _not_retried(self, outcome: Outcome, finished: list[int], start: str | None) -> Outcome:
        ranks = ", ".join(map(str, finished))
        text = (
            f"train failed with exit code {outcome.returncode}, but NODE_RANK {ranks} already finished its "
            f"train step: a restart of this node alone would wait for it until node_wait_timeout_s; not "
            f"retried. Run the same command on every node to resume from "
            f"{start or 'the start (no complete checkpoint yet)'}"
        )
        self.event(text)
        return dataclasses.replace(outcome, tail=text + ("\n" + outcome.tail if outcome.tail else ""))

    def _unretryable(self, outcome: Outcome) -> str | None:
        """The first of the policy's unretryable texts found in the end of the failing log."""
        if not self.policy.unretryable:
            return None
        text = read_tail(outcome.log_path, 400) if outcome.log_path else outcome.tail
        return next((t for t in self.policy.unretryable if t in text), None)

    def _repair(self) -> tuple[str | None, str | None]:
        """(resume point, what was repaired) by the plan's checkpoint scheme."""
        ckpt = self.plan.checkpoints
        if ckpt is None or not os.path.isdir(ckpt.root):
            return None, None
        return get_scheme(ckpt.scheme).repair_tracker(ckpt.root)

    def _replan_train(self, fallback: Step) -> Step:
        if self.replan is None:
            return fallback
        plan = self.replan()
        new = plan.step(fallback.name)
        if new is None:
            return fallback
        for path, text in plan.files.items():  # the re-planned step reads them (a framework's own config)
            results.write_file(path, text, source=self.plan.source)
        self.event("re-planned train: " + ("; ".join(new.notes) or mask_argv(new.command_line())))
        return new

    def _prepare_resume(self) -> None:
        """Re-running after a crash continues from the newest checkpoint even when the tracker is stale."""
        ckpt = self.plan.checkpoints
        if not self.policy.auto_resume or ckpt is None:
            return
        _, repaired = self._repair()
        train = self.plan.with_role(Role.TRAIN)
        if repaired and train is not None:
            self.event(repaired)
            new = self._replan_train(train)
            self.plan.steps = [new if s is train else s for s in self.plan.steps]

    def _retention(self) -> None:
        ckpt = self.plan.checkpoints
        if ckpt is not None and ckpt.retain > 0:
            for path in get_scheme(ckpt.scheme).apply_retention(ckpt.root, ckpt.retain):
                self.event(f"save_total_limit {ckpt.retain}: removed {path}")

    # -- helpers --------------------------------------------------------------------------------------
    def _plot(self, step: Step, loss_rank: int | None) -> None:
        t0 = time.monotonic()
        paths = self._loss_logs(loss_rank) if loss_rank is not None else []
        out_png = step.outputs[0] if step.outputs else self.plan.tree.loss_plot
        try:
            written = (
                results.plot(paths, out_png, self.plan.logs, label=self.plan.exp_name) if paths else None
            )
        except MissingDependencyError as e:  # the training is done: the plot is skipped, with what to install
            self._check_interrupt(step)
            return self._record(step, "skipped", str(e), time.monotonic() - t0)
        self._check_interrupt(step)  # a signal while plotting (in-process) stops the run here
        if written is None:
            return self._record(step, "skipped", "no loss logged by this node", time.monotonic() - t0)
        self._record(step, "done", written, time.monotonic() - t0)

    def _trained_here(self, rank: int) -> bool:
        """Whether this invocation trained: its train step ran and (where each run has its own log) this
        run's loss log has training steps (a re-run of a finished training logs none)."""
        train = self.plan.with_role(Role.TRAIN)
        ran = any(r.name == train.name and r.state == "done" for r in self.results) if train else False
        if not ran or self.plan.logs.metrics_file:
            return ran
        world = train.launch.world_size if train is not None and train.launch is not None else 1
        current = self.names.run_log(self.policy.nnodes, rank, world_size=world)
        return results.has_training_steps(current, self.plan.logs)

    def _loss_logs(self, rank: int) -> list[str]:
        train = self.plan.with_role(Role.TRAIN)
        world = train.launch.world_size if train is not None and train.launch is not None else 1
        return results.loss_logs(
            self.names, self.plan.logs, rank=rank, nnodes=self.policy.nnodes, world_size=world
        )

    def _rank_logs(self) -> list[str]:
        """This run's log of every training rank on this node (its memory reports)."""
        train = self.plan.with_role(Role.TRAIN)
        if train is None or train.launch is None:
            return []
        world = train.launch.world_size
        return [
            path
            for rank in train.launch.ranks_here()
            if os.path.exists(
                path := self.names.run_log(
                    self.policy.nnodes, rank, world_size=world, node_rank=self.policy.node_rank
                )
            )
        ]

    def _loss_rank(self, train: Step | None) -> int | None:
        """The global rank that prints the loss (`logs.loss_rank`); None when it runs on another node."""
        if train is None or train.launch is None:
            return None
        launch = train.launch
        rank = 0 if self.plan.logs.loss_rank == "first" else launch.world_size - 1
        return rank if rank in launch.ranks_here() else None

    def _remove_partial(self, step: Step, existed: dict[str, bool]) -> None:
        """Remove outputs this failed run created; never checkpoints, logs or the output dir itself."""
        ckpt = self.plan.checkpoints
        saved = os.path.abspath(ckpt.root) if ckpt else None
        keep = {os.path.abspath(p) for p in (self.plan.logs_dir, self.plan.output_dir, self.manifests)}
        if saved:
            keep.add(saved)
        for path, was_there in existed.items():
            full = os.path.abspath(path)
            if was_there or full in keep or (saved and full.startswith(saved + os.sep)):
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
        self.event(
            f"step {step.name}: {state}"
            + (f" in {wall_s:.1f}s" if wall_s else "")
            + (f" - {detail}" if detail else "")
        )

    def _check_interrupt(self, step: Step | None, outcome: Outcome | None = None) -> None:
        signum = self.interrupt.signum
        if signum is None:
            return
        if step is not None:
            self._record(
                step,
                "interrupted",
                signal.Signals(signum).name,
                outcome.wall_s if outcome else 0.0,
                outcome.logs if outcome else None,
            )
        raise InterruptedRunError(signum)
