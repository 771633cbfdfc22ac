"""The benchmark workbook (.xlsx, written with openpyxl), named as AscendFactory names it:
`<Framework>_train_performance_benchmark_<version>_<YYYYMMDD_HHMMSS>.xlsx` (ModelLink for mindspeed-llm,
as the product's example `ModelLink_train_performance_benchmark_...xlsx`; the other backends by their
framework's name; `Mixed` for a folder of several backends).

Sheets: `performance` (one row per run: who, every measured figure, the prediction, the baseline's figures,
each figure's ratio and flag, the verdict), `baseline` (the entries read), `method` (the formulas, the
tolerance, the files read). Cells hold numbers, not text, so a user can chart and sort them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ascendfactory.perf.baseline import FIGURES, BaselineFile
from ascendfactory.perf.report import PerfRow

FRAMEWORK_NAMES = {
    "mindspeed-llm": "ModelLink",
    "llamafactory": "LlamaFactory",
    "verl": "VeRL",
    "mindspeed-rl": "MindSpeed-RL",
    "mindspeed-mm": "MindSpeed-MM",
    "torch": "Torch",
}
RUN_COLUMNS = (
    ("run folder", "path"),
    ("backend", "backend"),
    ("model", "model"),
    ("experiment", "experiment"),
    ("seq length", "seq_length"),
    ("devices", "devices"),
    ("device", "device"),
    ("steps logged", "steps"),
    ("window", "window"),
    ("tokens/s/device", "tokens_per_s_per_device"),
    ("step time s", "step_time_s"),
    ("TFLOP/s/device", "tflops_per_device"),
    ("MFU", "mfu"),
    ("peak memory MB", "peak_memory_mb"),
    ("predicted step s", "predicted_step_s"),
    ("prediction error", "prediction_error"),
    ("throughput formula", "formula"),
    ("TFLOP/s from", "tflops_source"),
    ("MFU against", "mfu_against"),
    ("log", "log"),
    ("notes", "notes"),
)


def workbook_name(backends: list[str | None], version: str, when: float | None = None) -> str:
    names = {FRAMEWORK_NAMES.get(b or "", b or "Unknown") for b in backends} or {"Mixed"}
    framework = names.pop() if len(names) == 1 else "Mixed"
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(when))
    return f"{framework}_train_performance_benchmark_{version}_{stamp}.xlsx"


def _cell(value: Any) -> Any:
    if isinstance(value, list):
        return (
            "; ".join(str(v) for v in value)
            if value and not isinstance(value[0], int)
            else (f"{value[0]}-{value[-1]}" if value else None)
        )
    return value


def write_workbook(
    path: str | Path,
    rows: list[PerfRow],
    baseline: BaselineFile | None,
    *,
    baseline_path: str | None,
    result_dir: str,
) -> str:
    """Write the workbook atomically (a temporary file renamed): a failure leaves no half-written file."""
    from openpyxl import Workbook
    from openpyxl.styles import Font

    wb = Workbook()
    ws = wb.active
    ws.title = "performance"
    figures = list(FIGURES)
    head = [c for c, _ in RUN_COLUMNS]
    head += (
        [f"baseline {f}" for f in figures] + [f"ratio {f}" for f in figures] + [f"flag {f}" for f in figures]
    )
    head += ["baseline date", "baseline commit", "verdict"]
    ws.append(head)
    for cell in ws[1]:
        cell.font = Font(bold=True)
    for r in rows:
        run = r.run.to_dict()
        by = {c["figure"]: c for c in r.comparisons}
        line = [_cell(run[k]) for _, k in RUN_COLUMNS]
        line += [by[f]["baseline"] if f in by else None for f in figures]
        line += [by[f]["ratio"] if f in by else None for f in figures]
        line += [by[f]["flag"] if f in by else None for f in figures]
        line += [r.entry.date if r.entry else None, r.entry.commit if r.entry else None, r.verdict]
        ws.append(line)
    ws.freeze_panes = "A2"
    bs = wb.create_sheet("baseline")
    bs.append(
        ["model", "experiment", "device", "seq length", "backend", *figures, "date", "commit", "source"]
    )
    if baseline is not None:
        for model, exps in baseline.baselines.items():
            for exp, entries in exps.items():
                for e in entries:
                    bs.append(
                        [
                            model,
                            exp,
                            e.device,
                            e.seq_length,
                            e.backend,
                            *[getattr(e, f) for f in figures],
                            e.date,
                            e.commit,
                            e.source,
                        ]
                    )
    ms = wb.create_sheet("method")
    for key, value in (
        ("result folder", result_dir),
        ("baseline", baseline_path or "(none)"),
        ("tolerance", None if baseline is None else baseline.tolerance),
        ("flags", "within: |measured / baseline - 1| <= tolerance; else above or below the baseline"),
        ("verdict", "by tokens/s per device (else step time): regression when worse beyond the tolerance"),
        ("MindSpeed-LLM / torch", "tokens/s/p = GBS x seq_length / (devices x elapsed_ms) x 1000"),
        ("LLaMA-Factory", "delta total_tokens / delta elapsed_time / devices over the middle steps"),
        ("verl / MindSpeed-RL", "mean perf/throughput / e2e_tps (per device, as logged)"),
        (
            "TFLOP/s",
            "the log's own figure, else tokens/s x Megatron's num_floating_point_operations per token",
        ),
        ("MFU", "TFLOP/s / the device's dense bf16 peak (CPU: one thread's measured fp32 matmul rate)"),
        ("predicted", "the plan's step-time model (ascendfactory.speed), recorded before the run"),
    ):
        ms.append([key, value])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        wb.save(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return str(path)
