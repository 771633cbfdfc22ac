"""Our validation against each framework's own validator, on seeded generated experiments.

    python benchmarks/diff_validate.py [--backend llamafactory --backend verl ...] [--cases 2000] [--seed 0]
                                       [--show 20]
    python benchmarks/diff_validate.py --coverage [--backend ...] [--show 20] [--only FILE]

For each backend: cases generated from every shipped template and quickstart (`tests/diffval/cases.py`),
our verdict (the checks `train` runs before its first step, in-process) and the framework's verdict on
exactly what our plan hands it (run in the framework's own environment, one process per batch). Prints
cases, the four cells (both accept / both refuse / we accept, the framework refuses / we refuse, the
framework accepts), agreement %, and the cases in the two disagreement cells. Exit 1 when a case is in
"we accept, the framework refuses", a refused case's message names no key the case changed, or a refusal
in "we refuse, the framework accepts" is not a row of docs/validation.md's table of stricter rules.
Backends whose framework is not installed here are listed as not run, with the reason.

`--coverage` runs the coverage maps instead (tests/diffval/maps/, tests/diffval/coverage.py): per
framework and pin, the statements of its validation code here against the map (unmapped, stale), the
share mapped, and every targeted case (each statement's case, near miss and fix on every shipped
template) through the framework's judge and our dry run. Prints per framework: statements, % mapped by
kind, targeted runs, "we accept, the framework refuses", fixes the framework refuses, and the map errors.
Exit 1 on any of them. A draft pin (tests/diffval/maps/drafts/: the Megatron family's, whose mapping is
not complete) is printed the same way, marked DRAFT; its unmapped statements do not fail the run, the
disagreements of the rows it maps do.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.diffval.backends import ADAPTERS  # noqa: E402
from tests.diffval.judge import CELLS, Report, run_backend, stricter_rules, uncovered  # noqa: E402


def show(report: Report, limit: int) -> None:
    n = len(report.rows)
    cells = "  ".join(f"{c} {len(report.cell(c))}" for c in CELLS)
    undecided = len(report.cell("undecided"))
    print(f"\n== {report.backend}: {n} cases  {cells}  agreement {report.agreement:.1f}%")
    if undecided:
        print(f"   undecided here (the framework's answer needs a package this machine lacks): {undecided}")
    print(
        f"   ours {report.ours_s:.1f} s ({1000 * report.ours_s / max(1, n):.0f} ms/case), framework "
        f"{report.theirs_s:.1f} s; our checks crashed: {len(report.crashed)}; "
        f"refusals not naming a mutated key: {len(report.unnamed)}; "
        f"payload mismatches: {len(report.mismatched_payloads)}"
    )
    for cell in ("we_accept_only", "we_refuse_only"):
        rows = report.cell(cell)
        if rows:
            print(f"-- {cell} ({len(rows)}):")
            for row in rows[:limit]:
                print("  " + row.line())
    for row in report.crashed[:limit]:
        print("-- our checks crashed: " + row.line())
    for row in report.unnamed[:limit]:
        print("-- unnamed: " + row.line())
    for case_id in report.mismatched_payloads[:limit]:
        print(f"-- payload mismatch: {case_id}")
    missing = uncovered(report, stricter_rules())
    print(f"   we-refuse-only refusals missing from the README's stricter rules: {len(missing)}")
    for row, message in missing[:limit]:
        print(f"-- not in the README table: {row.case.id}: {message}")


def show_stand_ins(backend: str) -> None:
    """The modules the framework's judge cannot import here and what stands in for each (a data table)."""
    stand_ins = ADAPTERS[backend].stand_ins()
    if stand_ins is None:
        return
    print(f"   stand-ins of the {backend} judge (a call to one makes the case undecided, not a verdict):")
    for row in stand_ins:
        print(f"   - {row['module']}: {row['why']} -> {row['stands_in']}")


def coverage(backends: list[str], limit: int, only: str | None = None) -> bool:
    """The coverage maps of `backends` (every pin): returns whether any failed. `only`: the statements of
    the source files whose path holds it (a part of a map, while it is being written)."""
    from tests.diffval.coverage import load_map, report_lines, run_coverage
    from tests.diffval.pins import ALL, DRAFTS, map_path

    failed = False
    for name, pin in sorted(ALL.items()):
        if pin.backend not in backends:
            continue
        draft = name in DRAFTS
        doc = load_map(map_path(name))
        roots = pin.roots()
        if isinstance(roots, str):
            print(f"\n== coverage {name}: not run: {roots}")
            continue
        statements, _ = pin.walk(roots)
        if only:
            statements = [s for s in statements if only in s.file]
            doc["statements"] = [st for st in doc["statements"] if only in st["file"]]
            print(f"\n(only the {len(doc['statements'])} statements of files matching {only!r})")
        here, mapped = {s.id for s in statements}, {s["id"] for s in doc["statements"]}
        with tempfile.TemporaryDirectory(prefix=f"af-coverage-{name}-") as work:
            try:
                cov = run_coverage(doc, Path(work))
            except RuntimeError as e:
                print(f"\n== coverage {name}: not run: {e}")
                continue
        print()
        lines = report_lines(cov, limit)
        if draft:  # the share mapped of every statement; the rest of the report on the rows mapped so far
            head = lines[0].replace("== coverage ", "== coverage DRAFT ")
            cov.statements = [st for st in cov.statements if st.get("map")]
            lines = [head, *report_lines(cov, limit)[1:]]
        for line in lines:
            print(line)
        print(
            f"   statements here but not in the map: {len(here - mapped)}; "
            f"in the map but gone from the sources: {len(mapped - here)}"
        )
        for sid in sorted(here - mapped)[:limit]:
            print(f"-- unmapped at this pin: {sid} (python scripts/gen_validation_map.py {name})")
        failed |= cov.failed() or bool(here ^ mapped)
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", action="append", choices=sorted(ADAPTERS))
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=20, help="cases printed per disagreement cell")
    ap.add_argument("--coverage", action="store_true", help="run the coverage maps' targeted cases")
    ap.add_argument(
        "--only", metavar="FILE", help="--coverage: only the statements of files whose path holds FILE"
    )
    a = ap.parse_args()
    if a.coverage:
        return 1 if coverage(a.backend or sorted(ADAPTERS), a.show, a.only) else 0
    failed = False
    for backend in a.backend or sorted(ADAPTERS):
        with tempfile.TemporaryDirectory(prefix=f"af-diffval-{backend}-") as work:
            try:
                report = run_backend(backend, cases=a.cases, seed=a.seed, workdir=Path(work))
            except RuntimeError as e:
                print(f"\n== {backend}: not run: {e}")
                continue
        show(report, a.show)
        show_stand_ins(backend)
        failed |= bool(
            report.cell("we_accept_only")
            or report.crashed
            or report.unnamed
            or report.mismatched_payloads
            or uncovered(report, stricter_rules())
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
