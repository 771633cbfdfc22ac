"""`run_all.sh`'s summary: every part's JSON (rc, wall time, figures) and the text lines in one file.

    python benchmarks/gpu/summarize.py RES_DIR SUMMARY_JSON OUTPUTS_DIR

RES_DIR holds `<part>.json` (rc / wall_s of each part, written by run_all.sh) and `bench_<part>.json`
(benchmarks/bench_gpu.py's figures). From OUTPUTS_DIR (the quickstarts' output trees) each run's last
logged iteration line and `.af/summary.json` are added, so the quickstarts' losses and throughput come back
without the whole tree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return {"unreadable": f"{type(e).__name__}: {e}"}


def last_lines(folder: Path, marker: str, count: int) -> list[str]:
    """The last `count` lines holding `marker` over the run's log files."""
    found: list[str] = []
    for log in sorted(folder.glob("*")) if folder.is_dir() else []:
        if log.is_file():
            found += [x.strip() for x in log.read_text(errors="replace").splitlines() if marker in x]
    return found[-count:]


def main(argv: list[str]) -> int:
    res, dest, outputs = Path(argv[0]), Path(argv[1]), Path(argv[2])
    parts = {p.stem: read(p) for p in sorted(res.glob("*.json")) if not p.name.startswith("bench_")}
    figures = {p.stem[len("bench_") :]: read(p) for p in sorted(res.glob("bench_*.json"))}
    runs = {}
    for tree in sorted(outputs.glob("*")) if outputs.is_dir() else []:
        runs[tree.name] = {
            "iterations": last_lines(tree / "logs", "elapsed time per iteration", 3),
            "summary": read(tree / ".af" / "summary.json")
            if (tree / ".af" / "summary.json").exists()
            else None,
        }
    text = [
        f"{name}: rc {p.get('rc')}, {p.get('wall_s')} s" for name, p in parts.items() if isinstance(p, dict)
    ]
    for f in figures.values():
        if isinstance(f, dict):
            text += f.get("text", [])
    summary = {"parts": parts, "figures": figures, "runs": runs, "text": text}
    dest.write_text(json.dumps(summary, indent=1, default=str))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
