"""What a run leaves behind besides checkpoints: `exp-config.yaml`, `training_loss.png`, the summary.

- `write_exp_config`: the resolved config as YAML, secret-looking values (token, password, secret,
  access key, api key, ak/sk) replaced by `***`.
- `loss_logs`: the loss rank's run logs of this run, preceded by the earlier runs it resumed from, so
  resumed segments join into one curve (later step wins, `ascendfactory.metrics.StepTable`).
- `summarize` / `render_summary`: loss at start and end, MindSpeed-LLM throughput (GBS x seq_length /
  (devices x ms) x 1000 over a steady-state window that skips the first iterations), wall time per
  step, and where everything was written; also saved as `{af_output_dir}/.af/summary.json`.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from ascendfactory.metrics import Record, StepTable, parse_file, plot_loss, throughput_mindspeed
from ascendfactory.pipeline.launch import LogNames

MASK = "***"
_SECRET_WORDS = {"token", "password", "passwd", "pwd", "secret", "ak", "sk", "apikey", "accesskey",
                 "credential", "credentials", "privatekey"}
_SECRET_PAIRS = {("access", "key"), ("api", "key"), ("secret", "key"), ("private", "key"), ("secret", "id")}
_SEQ_ARG = re.compile(r"^\s*seq_length\s*\.{2,}\s*(\d+)\s*$")
LOSS_KEYS = ("lm loss", "loss")


def is_secret_key(key: str) -> bool:
    """Secret: `hf_token`, `OBS_SECRET_ACCESS_KEY`, `apiKey`, `ak`, `db-password`.

    Not secret: `max-tokens`, `tokenizer-name-or-path` (whole words are compared, not substrings).
    """
    words = [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", key) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(words, words[1:]))


def mask_secrets(value: Any) -> Any:
    """A copy of `value` with the values of secret-looking keys replaced by `***` (at any depth)."""
    if isinstance(value, dict):
        return {k: (MASK if is_secret_key(str(k)) and v not in (None, "") else mask_secrets(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def write_exp_config(config: dict[str, Any], path: str, *, source: str | None = None) -> str | None:
    """Write the resolved config (masked) to `path`; never overwrite the experiment file being run."""
    if source and os.path.exists(source) and os.path.exists(path) and os.path.samefile(source, path):
        return None
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    text = ("# Resolved by ascendfactory-cli train (defaults, experiment file and overrides merged; "
            "secrets masked)\n" + yaml.safe_dump(mask_secrets(config), sort_keys=False, allow_unicode=True))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def _train_records(path: str) -> list[Record]:
    try:
        return [r for r in parse_file(path, "megatron") if r.kind == "train"]
    except OSError:
        return []


def loss_logs(names: LogNames, *, nnodes: int, rank: int) -> list[str]:
    """The loss rank's log of this run, preceded by the earlier runs' logs it continues.

    Walking back from this run, an earlier log is included while it starts before the part already
    included (it is a segment this run resumed from); a log starting at or after it ends the walk.
    """
    current = names.run_log(nnodes, rank)
    pattern = os.path.join(names.logs_dir, f"{glob.escape(names.prefix)}-*-run_log-N{nnodes}-{rank}.txt")
    earlier = sorted(p for p in glob.glob(pattern) if os.path.basename(p) < os.path.basename(current))
    chain = [current] if os.path.exists(current) else []
    first = min((r.step for r in _train_records(current)), default=None) if chain else None
    for path in reversed(earlier):
        steps = [r.step for r in _train_records(path)]
        if first is None or not steps or min(steps) >= first:
            break
        chain.insert(0, path)
        first = min(steps)
    return chain


def chained_records(paths: Iterable[str]) -> list[Record]:
    return list(itertools.chain.from_iterable(_train_records(p) for p in paths))


def plot(paths: list[str], out_png: str) -> str | None:
    """`training_loss.png` from the joined segments; None when no loss was logged."""
    records = chained_records(paths)
    if not any(any(k in r.metrics for k in LOSS_KEYS) for r in records):
        return None
    return str(plot_loss(records, out_png))


def seq_length_from_log(path: str, *, max_lines: int = 5000) -> int | None:
    """`seq_length` from Megatron's arguments dump at the top of a run log."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in itertools.islice(f, max_lines):
                m = _SEQ_ARG.match(line)
                if m:
                    return int(m.group(1))
    except OSError:
        return None
    return None


@dataclass
class StepResult:
    name: str
    state: str  # done | skipped | failed | interrupted | waited
    wall_s: float = 0.0
    detail: str = ""
    logs: list[str] = field(default_factory=list)


@dataclass
class RunSummary:
    output_dir: str
    steps: list[StepResult]
    wall_s: float
    loss_start: float | None = None
    loss_end: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    throughput: dict[str, Any] | None = None
    written: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(summary: RunSummary, paths: list[str], *, seq_length: int | None,
              devices: int | None) -> RunSummary:
    """Fill in loss and throughput from the loss rank's logs (joined segments)."""
    table = StepTable.from_records(chained_records(paths))
    key = next((k for k in LOSS_KEYS if table.has(k)), None)
    if key:
        steps, values = table.series(key)
        if steps:
            summary.first_step, summary.last_step = steps[0], steps[-1]
            summary.loss_start, summary.loss_end = values[0], values[-1]
    seq = seq_length or next((s for p in paths if (s := seq_length_from_log(p))), None)
    if table.steps:
        summary.throughput = throughput_mindspeed(table, seq_length=seq, devices=devices).to_dict()
    return summary


def save_summary(summary: RunSummary, path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary.to_dict(), f, indent=2, default=str)
    return path


def render_summary(summary: RunSummary, out: Any) -> None:
    """Print the summary through the CLI's output object (`out.table`, `out.text`)."""
    rows = [{"step": s.name, "state": s.state, "wall time (s)": f"{s.wall_s:.1f}", "detail": s.detail}
            for s in summary.steps]
    out.table(rows, title=f"run summary ({summary.wall_s:.1f}s)")
    if summary.loss_start is not None:
        out.text(f"loss: {summary.loss_start:.4f} at step {summary.first_step} -> {summary.loss_end:.4f} "
                 f"at step {summary.last_step}")
    tp = summary.throughput
    if tp and tp.get("value") is not None:
        window = tp.get("window")
        out.text(f"throughput: {tp['value']:,.1f} {tp['unit']} (steps {window[0]}-{window[1]}, first "
                 f"{len(tp.get('steps_skipped') or [])} skipped; {tp['formula']})")
    elif tp and "seq_length" in (tp.get("note") or ""):
        out.text("throughput: seq_length unknown (not in the plan's facts nor in the log's arguments)")
    elif tp and tp.get("note"):
        out.text(f"throughput: {tp['note']}")
    for what, where in summary.written.items():
        out.text(f"{what}: {where}")
