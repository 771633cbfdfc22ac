"""`Step` and `Plan`: what `train` will run, in order, as data (rendered by `--dry-run`, run by the runner).

A step knows its argv (never a shell string), the environment changes it needs, what it reads and writes,
and, when it will not run, why. The runner never looks inside argv; backends never run anything.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RankLayout:
    """How a launcher's output maps to ranks: torchrun with `--tee 3` prefixes each line `[defaultN]:`."""

    nnodes: int
    nproc_per_node: int
    node_rank: int

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc_per_node + local_rank


@dataclass
class Step:
    """One subprocess of the pipeline.

    `kind` is one of: preprocess, hf2mg, train, mg2hf, merge, plot (plot runs in-process, argv empty).
    `skip_reason` is set when the step will not run, with the reason in words.
    `ranks` is set for distributed launches so the runner can write one log per rank.
    `only_node0`: on multi-node runs with a shared filesystem, only NODE_RANK 0 runs it; the others wait
    for its manifest.
    """

    name: str
    kind: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    ranks: RankLayout | None = None
    only_node0: bool = False
    # Filled by the runner from the manifest: a content fingerprint of argv, env and inputs.
    fingerprint: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def skipped(self) -> bool:
        return self.skip_reason is not None

    def command_line(self) -> str:
        """The argv as a copy-pasteable shell line (quoting only; argv itself is what runs)."""
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["command"] = self.command_line()
        return d


@dataclass
class Plan:
    """The ordered steps of one experiment, plus what they were resolved from."""

    backend: str
    exp_name: str
    model_name: str
    output_dir: str
    steps: list[Step] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # applies to every step
    facts: dict[str, Any] = field(default_factory=dict)  # resolved layout (world, TP, PP, DP, ...)

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def step(self, kind: str) -> Step | None:
        return next((s for s in self.steps if s.kind == kind), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "exp_name": self.exp_name,
            "model_name": self.model_name,
            "output_dir": self.output_dir,
            "facts": self.facts,
            "env": self.env,
            "warnings": self.warnings,
            "steps": [s.to_dict() for s in self.steps],
        }
