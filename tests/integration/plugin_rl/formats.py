"""What the rl-demo framework writes that the house does not know, registered from outside the package.

log format   `rl-demo`: `Train step [3/8] | policy_loss=0.1234 | reward=0.5625 | response_length=3.0 |
             samples_per_s=412.3` (OpenRLHF-style progress lines)
formula      `rl-demo`: samples/s, the mean of the lines' `samples_per_s`
scheme       `deepspeed-latest`: `global_stepN/` directories, complete when `state.json` is there, and a
             `latest` file naming the newest one (DeepSpeed's tag file)
"""

from __future__ import annotations

import math
import os
import re
import shutil

from ascendfactory.checkpoints import register_scheme
from ascendfactory.metrics.formats import LogFormat, register_format
from ascendfactory.metrics.record import Record
from ascendfactory.metrics.table import StepTable
from ascendfactory.metrics.throughput import Formula, Throughput, register_formula

NAME = "rl-demo"
SCHEME_NAME = "deepspeed-latest"
_LINE = re.compile(r"Train step \[(\d+)/\d+\]((?:\s*\|\s*[\w/]+=[-+0-9.eE]+)+)")
_STEP_DIR = re.compile(r"^global_step(\d+)$")
COMPLETE = "state.json"


def sniff(line: str) -> bool:
    return _LINE.search(line) is not None


class RLDemoParser:
    name = NAME

    def feed(self, line: str) -> tuple[Record, ...]:
        m = _LINE.search(line)
        if m is None:
            return ()
        pairs = (part.strip().split("=", 1) for part in m.group(2).split("|") if "=" in part)
        return (Record(step=int(m.group(1)), metrics={k: float(v) for k, v in pairs}),)

    def flush(self) -> tuple[Record, ...]:
        return ()


def summary(table: StepTable, **_: object) -> Throughput:
    values = [v for v in table.column("samples_per_s") if math.isfinite(v)]
    mean = sum(values) / len(values) if values else None
    return Throughput(
        metric="samples/s", value=mean, unit="samples/s", formula=NAME, steps_used=list(table.steps)
    )


def complete_steps(root: str) -> list[tuple[int, str]]:
    """(step, path) of every complete `global_stepN/`, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        m = _STEP_DIR.match(name)
        if m and os.path.isfile(os.path.join(root, name, COMPLETE)):
            found.append((int(m.group(1)), os.path.join(root, name)))
    return sorted(found)


class DeepSpeedLatest:
    def repair_tracker(self, root: str) -> tuple[str | None, str | None]:
        done = complete_steps(root)
        if not done:
            return None, None
        tag = os.path.basename(done[-1][1])
        latest = os.path.join(root, "latest")
        before = open(latest).read().strip() if os.path.isfile(latest) else None
        if before == tag:
            return tag, None
        with open(latest, "w") as f:
            f.write(tag)
        return tag, f"latest pointed at {before or 'nothing'}; now {tag}"

    def apply_retention(self, root: str, keep: int) -> list[str]:
        removed = []
        for _, path in complete_steps(root)[:-keep] if keep > 0 else []:
            shutil.rmtree(path)
            removed.append(path)
        return removed


register_format(
    LogFormat(NAME, "rl-demo `Train step [N/T] | k=v` lines", sniff, RLDemoParser, loss_keys=("policy_loss",))
)
register_formula(Formula(NAME, summary))
register_scheme(SCHEME_NAME, DeepSpeedLatest())
