"""Step manifests: skip a step whose outputs already match its inputs, and let other nodes wait for node 0.

After a step succeeds the runner writes `{af_output_dir}/.af/<step>.json`: a fingerprint of what decides the
step's result (argv, environment, cwd and the content of its inputs) plus a fingerprint of each output. A
later run skips the step when both still match ("outputs up to date (manifest ...)"). The train step is
never skipped this way: training resumes from its checkpoints instead.

Fingerprints are cheap on big inputs: a file is its size and mtime (plus a SHA-256 of its bytes when it is
small); a directory is a hash of its recursive listing (relative path, size, mtime), never of its bytes;
a path that is neither (a Megatron data prefix such as `.../alpaca_text_document`) is the files it prefixes.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from ascendfactory.errors import StageFailedError
from ascendfactory.plan import Plan, Role, Step
from ascendfactory.secrets import mask_secrets

VERSION = 1
SMALL_FILE = 1 << 20  # files up to this size are hashed by content
NEVER_SKIPPED = (Role.TRAIN, Role.PLOT)  # training resumes instead; the plot is cheap
CLOCK_SLACK_S = 60.0  # node clocks may differ this much when comparing a manifest's time with ours


def _file_fp(path: str, st: os.stat_result, *, content: bool) -> str:
    text = f"f:{st.st_size}:{st.st_mtime_ns}"
    if content and st.st_size <= SMALL_FILE:
        with open(path, "rb") as f:
            text += ":" + hashlib.sha256(f.read()).hexdigest()
    return text


def _listing(root: str) -> str:
    h = hashlib.sha256()
    count = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            rel = os.path.relpath(e.path, root)
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
                h.update(f"d:{rel}\n".encode())
            else:
                try:
                    st = e.stat()
                except OSError:
                    continue
                h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())
                count += 1
    return f"d:{count}:{h.hexdigest()[:24]}"


def path_fingerprint(path: str) -> str:
    """A short string that changes when the content at `path` changes (see the module docstring)."""
    try:
        st = os.stat(path)
    except OSError:
        matches = sorted(glob.glob(glob.escape(path) + "*"))
        if not matches:
            return "missing"
        h = hashlib.sha256()
        for m in matches:
            h.update(f"{os.path.basename(m)}={path_fingerprint(m)}\n".encode())
        return f"p:{len(matches)}:{h.hexdigest()[:24]}"
    if os.path.isdir(path):
        return _listing(path)
    return _file_fp(path, st, content=True)


def step_fingerprint(step: Step, plan_env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """(fingerprint, input fingerprints) of what decides a step's outputs."""
    inputs = {p: path_fingerprint(p) for p in step.inputs}
    key = {
        "argv": step.argv,
        "env": {**plan_env, **step.env},
        "cwd": step.cwd,
        "inputs": inputs,
        "version": VERSION,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return digest, inputs


def manifest_path(manifest_dir: str, step: Step) -> str:
    return os.path.join(manifest_dir, f"{step.name}.json")


def failure_path(manifest_dir: str, step: Step) -> str:
    return os.path.join(manifest_dir, f"{step.name}.failed.json")


def _write_json(path: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
    os.replace(tmp, path)


def read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == VERSION else None


def write(manifest_dir: str, step: Step, plan_env: dict[str, str], *, wall_s: float, node_rank: int) -> str:
    """Record a successful step (call after it exits 0); clears a failure marker. Returns the path."""
    digest, inputs = step_fingerprint(step, plan_env)
    path = manifest_path(manifest_dir, step)
    _write_json(
        path,
        {
            "version": VERSION,
            "step": step.name,
            "role": step.role.value,
            "fingerprint": digest,
            "argv": step.argv,
            "env": mask_secrets({**plan_env, **step.env}),  # fingerprinted above, never stored
            "cwd": step.cwd,
            "inputs": inputs,
            "outputs": {p: path_fingerprint(p) for p in step.outputs},
            "wall_s": round(wall_s, 3),
            "finished_at": time.time(),
            "node_rank": node_rank,
            "host": socket.gethostname(),
        },
    )
    try:
        os.remove(failure_path(manifest_dir, step))
    except OSError:
        pass
    return path


def invalidate(manifest_dir: str, step: Step) -> None:
    """Forget a step's manifest (before it runs: a crash mid-step must not leave it 'up to date')."""
    for path in (manifest_path(manifest_dir, step), failure_path(manifest_dir, step)):
        try:
            os.remove(path)
        except OSError:
            pass


def write_failure(manifest_dir: str, step: Step, *, returncode: int, log_path: str, node_rank: int) -> None:
    """Tell waiting nodes that this node's run of the step failed (they stop waiting at once)."""
    _write_json(
        failure_path(manifest_dir, step),
        {
            "version": VERSION,
            "step": step.name,
            "returncode": returncode,
            "log_path": log_path,
            "finished_at": time.time(),
            "node_rank": node_rank,
        },
    )


def outcome_path(manifest_dir: str, step: Step, node_rank: int) -> str:
    return os.path.join(manifest_dir, f"{step.name}.node{node_rank}.json")


def write_outcome(manifest_dir: str, step: Step, *, node_rank: int, returncode: int, log_path: str) -> None:
    """How this node's run of `step` ended (each attempt overwrites it): what the other nodes read before a
    retry (`peer_outcomes`), on a shared filesystem."""
    _write_json(
        outcome_path(manifest_dir, step, node_rank),
        {
            "version": VERSION,
            "step": step.name,
            "returncode": returncode,
            "log_path": log_path,
            "finished_at": time.time(),
            "node_rank": node_rank,
            "host": socket.gethostname(),
        },
    )


def peer_outcomes(
    manifest_dir: str, step: Step, *, nnodes: int, node_rank: int, since: float
) -> dict[int, dict[str, Any] | None]:
    """The other nodes' outcome of `step` in this run (written at or after `since`, less the clock slack):
    {node rank: its record, or None when it has written none yet}."""
    out: dict[int, dict[str, Any] | None] = {}
    for rank in range(nnodes):
        if rank == node_rank:
            continue
        data = read(outcome_path(manifest_dir, step, rank))
        fresh = data is not None and data.get("finished_at", 0) >= since - CLOCK_SLACK_S
        out[rank] = data if fresh else None
    return out


@dataclass(frozen=True)
class Decision:
    up_to_date: bool
    reason: str
    fingerprint: str


def decide(step: Step, plan_env: dict[str, str], manifest_dir: str) -> Decision:
    """Whether `step` can be skipped now: same fingerprint as its manifest and untouched outputs."""
    digest, _ = step_fingerprint(step, plan_env)
    path = manifest_path(manifest_dir, step)
    if step.role in NEVER_SKIPPED or not step.outputs:
        return Decision(False, f"{step.role.value} steps always run", digest)
    data = read(path)
    if data is None:
        return Decision(False, "no manifest", digest)
    if data.get("fingerprint") != digest:
        return Decision(False, "argv, env or inputs changed since the last run", digest)
    recorded = data.get("outputs") or {}
    for out in step.outputs:
        now = path_fingerprint(out)
        if now == "missing" or recorded.get(out) != now:
            return Decision(False, f"output {out} missing or changed", digest)
    return Decision(True, f"outputs up to date (manifest {path})", digest)


def _under(a: str, b: str) -> bool:
    a, b = os.path.abspath(a), os.path.abspath(b)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)


def annotate_plan(plan: Plan, manifest_dir: str | None = None) -> Plan:
    """Mark the steps whose manifest says their outputs are up to date as skipped (for `--dry-run`).

    A step that reads what an earlier, running step writes cannot be decided before that step ran; it
    gets a note instead. Returns the same plan.
    """
    manifest_dir = manifest_dir or plan.manifest_dir
    produced: list[str] = []
    for step in plan.steps:
        if step.skipped:
            continue
        d = decide(step, plan.env, manifest_dir)
        step.fingerprint = d.fingerprint
        depends = any(_under(i, o) or _under(o, i) for i in step.inputs for o in produced)
        if d.up_to_date and not depends:
            step.skip_reason = d.reason
            continue
        if d.up_to_date:
            step.notes.append(
                "skipped at run time if its inputs are unchanged by the steps before it "
                f"(manifest {manifest_path(manifest_dir, step)})"
            )
        produced.extend(step.outputs)
    return plan


def wait_for_node0(
    step: Step,
    plan_env: dict[str, str],
    manifest_dir: str,
    *,
    timeout_s: float,
    started_at: float,
    sleep: Any = time.sleep,
    poll_s: float = 2.0,
) -> str:
    """On NODE_RANK > 0: wait until node 0 has run (or skipped) an `only_node0` step; returns the manifest.

    Done when the manifest matches this node's fingerprint, or node 0 wrote it after this run started.
    Raises StageFailedError at once when node 0 reports a failure, and after `timeout_s` otherwise.
    `sleep(seconds)` returns False to abort the wait (an interrupt).
    """
    digest, _ = step_fingerprint(step, plan_env)
    path, fail = manifest_path(manifest_dir, step), failure_path(manifest_dir, step)
    deadline = time.monotonic() + timeout_s
    while True:
        data = read(path)
        fresh = data is not None and data.get("finished_at", 0) >= started_at - CLOCK_SLACK_S
        if data and (data.get("fingerprint") == digest or fresh):
            return path
        failed = read(fail)
        if failed and failed.get("finished_at", 0) >= started_at - CLOCK_SLACK_S:
            raise StageFailedError(
                step.name,
                int(failed.get("returncode") or 1),
                failed.get("log_path"),
                tail=f"step {step.name} failed on NODE_RANK 0; see its log there",
            )
        if time.monotonic() >= deadline:
            raise StageFailedError(
                step.name,
                124,
                None,
                tail=(
                    f"waited {timeout_s:.0f}s (node_wait_timeout_s) for NODE_RANK 0 to finish step "
                    f"{step.name}, but {path} did not appear. Check that node 0 is running and that "
                    f"af_output_dir is on a filesystem both nodes share (else set shared_filesystem: false)."
                ),
            )
        if sleep(min(poll_s, max(deadline - time.monotonic(), 0.01))) is False:
            return ""
