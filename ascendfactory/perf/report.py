"""Runs against the baseline: one row per run (its figures, the matched entry, each figure's flag, the
verdict), rendered as the console table, the JSON and the workbook's rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascendfactory.perf.baseline import FIGURES, BaselineEntry, BaselineFile, compare_figure, match, verdict
from ascendfactory.perf.runs import RunFigures


@dataclass
class PerfRow:
    run: RunFigures
    entry: BaselineEntry | None
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    verdict: str = "no baseline"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.to_dict(),
            "baseline": None if self.entry is None else self.entry.model_dump(),
            "comparisons": self.comparisons,
            "verdict": self.verdict,
        }


def compare_runs(runs: list[RunFigures], baseline: BaselineFile | None) -> list[PerfRow]:
    rows = []
    for run in runs:
        entry = None
        if baseline is not None:
            entry = match(
                baseline,
                model=run.model,
                experiment=run.experiment,
                seq_length=run.seq_length,
                device=run.device,
                backend=run.backend,
            )
        row = PerfRow(run, entry)
        if entry is not None and baseline is not None:
            base = entry.figures()
            row.comparisons = [
                compare_figure(k, getattr(run, k), base[k], baseline.tolerance) for k in FIGURES if k in base
            ]
            row.verdict = verdict(row.comparisons)
        rows.append(row)
    return rows


def _num(v: float | None, fmt: str = ",.1f") -> str:
    return "" if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.1%}"


def table_rows(rows: list[PerfRow]) -> list[dict[str, str]]:
    """The console table: one line per run (the workbook and the JSON have every figure)."""
    out = []
    for r in rows:
        f = r.run
        tps = next((c for c in r.comparisons if c["figure"] == "tokens_per_s_per_device"), None)
        predicted = _num(f.predicted_step_s, ".3g")
        if f.prediction_error is not None:
            predicted += f" ({f.prediction_error:+.0%})"
        out.append(
            {
                "run": f"{f.model or '?'}/{f.experiment or Path(f.path).name}",
                "backend": f.backend or "",
                "device": f"{f.device or '?'} x{f.devices or '?'}",
                "seq": str(f.seq_length or ""),
                "tokens/s/dev": _num(f.tokens_per_s_per_device, ",.0f"),
                "step s": _num(f.step_time_s, ".3g"),
                "MFU": "" if f.mfu is None else f"{f.mfu:.1%}",
                "peak MB": _num(f.peak_memory_mb, ",.0f"),
                "predicted s": predicted,
                "vs baseline": "" if tps is None or tps["ratio"] is None else _pct(tps["ratio"] - 1),
                "verdict": r.verdict,
            }
        )
    return out


def payload(
    rows: list[PerfRow], baseline: BaselineFile | None, *, baseline_path: str | None
) -> dict[str, Any]:
    return {
        "baseline": baseline_path,
        "tolerance": None if baseline is None else baseline.tolerance,
        "runs": [r.to_dict() for r in rows],
        "regressions": [r.run.path for r in rows if r.verdict == "regression"],
    }
