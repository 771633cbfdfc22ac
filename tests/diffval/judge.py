"""Run a backend's cases through our checks and the framework's own, and sort them into the four cells.

both_accept        both accept
both_refuse        both refuse (`named`: our problems name a mutated key)
we_accept_only     we accept and the framework refuses: a defect
we_refuse_only     we refuse and the framework accepts: fixed, or a stricter rule of ours (README table)
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.diffval.backends import ADAPTERS, REPO, Adapter
from tests.diffval.cases import Base, Case, make_case
from tests.diffval.ours import Ours, verdict

CELLS = ("both_accept", "both_refuse", "we_accept_only", "we_refuse_only")


@dataclass
class Row:
    case: Case
    ours: Ours
    theirs_ok: bool | None
    theirs_error: str | None

    @property
    def cell(self) -> str:
        if self.theirs_ok is None:
            return "undecided"  # the framework's answer depends on a package this machine lacks
        if self.ours.accepted:
            return "both_accept" if self.theirs_ok else "we_accept_only"
        return "we_refuse_only" if self.theirs_ok else "both_refuse"

    def line(self) -> str:
        ours = "accept" if self.ours.accepted else "; ".join(self.ours.messages)[:240]
        theirs = "accept" if self.theirs_ok else str(self.theirs_error)[:240]
        case = f"{self.case.id} [{self.case.base}] {self.case.describe()}"
        return f"{case}\n    ours: {ours}\n    theirs: {theirs}"


@dataclass
class Report:
    backend: str
    rows: list[Row] = field(default_factory=list)
    mismatched_payloads: list[str] = field(default_factory=list)  # carry() disagreed with the plan
    ours_s: float = 0.0
    theirs_s: float = 0.0

    def cell(self, name: str) -> list[Row]:
        return [r for r in self.rows if r.cell == name]

    @property
    def unnamed(self) -> list[Row]:
        return [r for r in self.cell("both_refuse") if not any(r.ours.names(m.key) for m in r.case.mutations)]

    @property
    def crashed(self) -> list[Row]:
        """Cases where our own checks raised instead of answering (a traceback for the user)."""
        return [r for r in self.rows if r.ours.keys == ["(crash)"]]

    @property
    def agreement(self) -> float:
        agree = len(self.cell("both_accept")) + len(self.cell("both_refuse"))
        return 100.0 * agree / max(1, len(self.rows) - len(self.cell("undecided")))


def run_backend(backend: str, *, cases: int, seed: int, workdir: Path) -> Report:
    adapter = ADAPTERS[backend]
    if adapter.worker() is None:
        raise RuntimeError(f"{backend}: {adapter.unavailable()}")
    workdir.mkdir(parents=True, exist_ok=True)
    bases = adapter.bases(workdir)
    generated = [make_case(backend, bases, adapter.keys_of, seed, i) for i in range(cases)]
    return judge_cases(backend, generated, workdir, bases=bases)


def judge_cases(backend: str, cases: list[Case], workdir: Path, *, bases: list[Base] | None = None) -> Report:
    """Our verdict and the framework's on the given cases (each on one of the adapter's bases)."""
    adapter = ADAPTERS[backend]
    argv = adapter.worker()
    if argv is None:
        raise RuntimeError(f"{backend}: {adapter.unavailable()}")
    workdir.mkdir(parents=True, exist_ok=True)
    bases = bases if bases is not None else adapter.bases(workdir)
    base_payload = {b.name: _base_payload(adapter, b, workdir) for b in bases}
    report = Report(backend)
    pending: list[tuple[Case, Ours, Any]] = []
    t0 = time.perf_counter()
    for case in cases:
        ours = verdict(case, workdir, dry_run=adapter.dry_run)
        carried = adapter.carry(base_payload[case.base], case.mutations)
        if ours.accepted and ours.plan is not None:
            payload = adapter.payload(ours.plan)
            if adapter.comparable(payload) != adapter.comparable(carried):
                report.mismatched_payloads.append(case.id)
        else:
            payload = carried
        pending.append((case, ours, payload))
    report.ours_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    answers = ask_framework(argv, [(c.id, p) for c, _, p in pending])
    report.theirs_s = time.perf_counter() - t1
    for case, ours, _ in pending:
        ok, error = answers[case.id]
        report.rows.append(Row(case, ours, ok, error))
    return report


def _base_payload(adapter: Adapter, base: Base, workdir: Path) -> Any:
    ours = verdict(
        Case(id=f"base:{base.name}", base=base.name, tree=base.tree), workdir, dry_run=adapter.dry_run
    )
    if not ours.accepted or ours.plan is None:
        raise RuntimeError(f"base {base.name} is refused by our checks: {ours.messages}")
    return adapter.payload(ours.plan)


def ask_framework(
    argv: list[str], items: list[tuple[str, Any]], frames: dict[str, list[str]] | None = None
) -> dict[str, tuple[bool | None, str | None]]:
    """Send every payload to one framework process; a process that dies is restarted after the case it
    died on (that case is a refusal: the framework's own code crashed on it). `frames`, when given, gets
    each refusal's traceback as `file:line` places (the worker's `at`), innermost last."""
    answers: dict[str, tuple[bool | None, str | None]] = {}
    todo = list(items)
    while todo:
        text = "".join(json.dumps({"id": i, "args": p}, default=str) + "\n" for i, p in todo)
        done = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=1800)
        for line in done.stdout.splitlines():
            if line.startswith("{"):
                got = json.loads(line)
                answers[got["id"]] = (got["ok"] if got["ok"] is None else bool(got["ok"]), got.get("error"))
                if frames is not None:
                    frames[got["id"]] = list(got.get("at") or [])
        left = [(i, p) for i, p in todo if i not in answers]
        if left and len(left) == len(todo) and done.returncode != 0 and not done.stdout.strip():
            raise RuntimeError(f"the framework's judge failed: {done.stderr[-2000:]}")
        if left:
            answers[left[0][0]] = (
                False,
                f"the framework's process died (exit {done.returncode}): " + done.stderr.strip()[-200:],
            )
            left = left[1:]
        todo = left
    return answers


def make_cases(backend: str, *, cases: int, seed: int, workdir: Path) -> list[Case]:
    adapter = ADAPTERS[backend]
    bases = adapter.bases(workdir)
    return [make_case(backend, bases, adapter.keys_of, seed, i) for i in range(cases)]


STRICTER_HEADING = "## Rules stricter than the framework"


@dataclass(frozen=True)
class Stricter:
    backend: str
    keys: tuple[str, ...]  # ("*",): any key
    words: str  # what our message says

    def covers(self, backend: str, key: str, message: str) -> bool:
        short = key.removeprefix("backend_config.").removeprefix("training.")
        # a row of `mindspeed-llm` covers every version's judge (`mindspeed-llm@26.1.0`); a versioned row one
        same = backend == self.backend or backend.split("@")[0] == self.backend
        return same and (self.keys == ("*",) or short in self.keys) and self.words in message


def stricter_rules(readme: str | None = None) -> list[Stricter]:
    """docs/validation.md's table of rules stricter than the frameworks' (backend | key | `words` | why)."""
    text = readme if readme is not None else (REPO / "docs" / "validation.md").read_text(encoding="utf-8")
    table = text.split(STRICTER_HEADING, 1)[1] if STRICTER_HEADING in text else ""
    rules = []
    for line in table.splitlines():
        if not line.startswith("|"):
            if rules:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        words = re.findall(r"`([^`]+)`", cells[2]) if len(cells) >= 4 else []
        if words and cells[0] not in ("backend", "---"):
            rules.append(Stricter(cells[0], tuple(k.strip() for k in cells[1].split(",")), words[0]))
    return rules


def uncovered(report: Report, rules: list[Stricter]) -> list[tuple[Row, str]]:
    """Each refusal of ours in "we refuse, the framework accepts" that no stricter rule lists."""
    out = []
    for row in report.cell("we_refuse_only"):
        for key, message in zip(row.ours.keys, row.ours.messages):
            if not any(r.covers(report.backend, key, message) for r in rules):
                out.append((row, message))
    return out


def assert_agrees(report: Report, cases: int, *, named: bool = True) -> None:
    """A sample's verdicts as the tests require them: every case judged, both verdicts reached, nothing we
    accept that the framework refuses, no crash of our checks, (with `named`) every refusal naming a changed
    key, our payload the plan's, every stricter refusal of ours in the README's table."""
    assert len(report.rows) == cases
    assert report.cell("both_accept") and report.cell("both_refuse")  # the sample reaches both verdicts
    assert not report.cell("we_accept_only"), "\n".join(r.line() for r in report.cell("we_accept_only"))
    assert not report.crashed, "\n".join(r.line() for r in report.crashed)
    if named:
        assert not report.unnamed, "\n".join(r.line() for r in report.unnamed)
    assert not report.mismatched_payloads, report.mismatched_payloads
    missing = uncovered(report, stricter_rules())
    assert not missing, "\n".join(f"{row.line()}\n    not in the README table: {m}" for row, m in missing)
