"""Fuzz `train --dry-run` with malformed experiments and count what a user would see.

    python benchmarks/fuzz_configs.py [--cases 3000] [--seed 0] [--show 5]

Prints how many generated cases (files plus override lists) ended with a traceback, a hang (> 5 s), an
unexpected exit code, or a rejection (`ConfigError`) whose problems name no key the case touched (goal: 0
of each), with a few examples of each failure. The generator and the verdict are the fuzz test's
(`tests/unit/cli/fuzz_configs.py`).
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.unit.cli.fuzz_configs import bases, cases, run_case  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=5, help="examples printed per failure kind")
    a = ap.parse_args()
    base_list = bases()
    counts: collections.Counter[str] = collections.Counter()
    overrides = 0
    seconds: list[float] = []
    examples: dict[str, list[str]] = collections.defaultdict(list)
    work = Path(tempfile.mkdtemp(prefix="af-fuzz-"))

    @settings(
        max_examples=a.cases,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data: st.DataObject) -> None:
        nonlocal overrides
        case = data.draw(cases(base_list))
        verdict = run_case(case, work)
        counts[verdict.kind] += 1
        overrides += bool(case.overrides)
        seconds.append(verdict.seconds)
        if verdict.failed and len(examples[verdict.kind]) < a.show:
            examples[verdict.kind].append(
                f"base={case.base} touched={case.touched} overrides={case.overrides}\n{verdict.message}"
            )

    random.seed(a.seed)
    one()
    total = sum(counts.values())
    print(f"cases: {total} ({len(base_list)} base files; {overrides} with command-line overrides)")
    for kind in ("ok", "rejected", "traceback", "hang", "unexpected_exit", "unnamed"):
        print(f"  {kind:16s} {counts[kind]}")
    print(f"seconds per case: median {statistics.median(seconds):.3f}, max {max(seconds):.3f}")
    for kind, shown in examples.items():
        print(f"\n--- {kind} ---")
        for text in shown:
            print(text, "\n")
    return 1 if any(counts[k] for k in ("traceback", "hang", "unexpected_exit", "unnamed")) else 0


if __name__ == "__main__":
    sys.exit(main())
