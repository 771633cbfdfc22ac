"""Training-log metrics: parse every backend's logs into one record type, summarise, compare, plot.

Library API (what `train` and `logs` use)::

    parse_file(path, format=None, *, fields=None) -> Iterator[Record]
    parse_lines(lines, format=None, *, fields=None) -> Iterator[Record]
    detect_format(path_or_lines) -> str | None          # names: format_names()
    LiveTail(path, format=None).poll() -> list[Record]  # follow a growing log, complete lines only
    summarize(records, *, steps=None, seq_length=None, devices=None, skip_first=None, ...) -> Summary
    throughput_mindspeed(records, *, seq_length, devices, skip_first=None, ...) -> Throughput
    throughput_llamafactory / throughput_verl / throughput_mindspeed_rl / throughput_mindspeed_mm
    check_convergence(records, *, metric=None, window=0.5) -> Convergence
    compare(a_records, b_records, *, metric=None, tolerance=0.02) -> Comparison
    plot_loss(records_or_paths, out_png, *, metric=None, smoothing=0.6) -> Path   # training_loss.png
    export_records(make_records, "csv" | "jsonl" | "tensorboard", dest) -> int
    dedupe(records) -> list[Record]                     # resumed segments: later step wins

Formats (`--format`; open: `register_format(LogFormat(...))` adds one, and `throughput.register_formula`
a throughput formula): megatron (MindSpeed-LLM mcore/FSDP2, ModelLink, MindSpeed-MM, Megatron-DeepSpeed),
mindspeed_rl, llamafactory (trainer_log.jsonl), hf_console, verl, verl_jsonl, roll. Parsers stream: a file
is read in chunks and never loaded whole. Launcher prefixes
(`3: `, `[default7]: `, `[rank7]: `, `(TaskRunner pid=N) `), ANSI colours and interleaved stderr
lines are tolerated. Nothing here imports torch; matplotlib and tensorboard are imported only by
`plot_loss` and the tensorboard export.
"""

import importlib
from typing import Any

# Where each public name lives. Loaded on first use (PEP 562), so that importing one module of this
# package (the planner reads the format and formula registries) does not import all of them.
_HOME = {
    "Comparison": "compare",
    "compare": "compare",
    "Convergence": "convergence",
    "check_convergence": "convergence",
    "export_records": "export",
    "LogFormat": "formats",
    "detect_format": "formats",
    "format_names": "formats",
    "parse_file": "formats",
    "parse_lines": "formats",
    "register_format": "formats",
    "registered_formats": "formats",
    "PEAKS": "hardware",
    "flops_per_token": "hardware",
    "peak_for": "hardware",
    "ema": "plot",
    "plot_loss": "plot",
    "Record": "record",
    "dedupe": "record",
    "Summary": "summary",
    "summarize": "summary",
    "StepTable": "table",
    "LiveTail": "tail",
    "Throughput": "throughput",
    "throughput_llamafactory": "throughput",
    "throughput_mindspeed": "throughput",
    "throughput_mindspeed_mm": "throughput",
    "throughput_mindspeed_rl": "throughput",
    "throughput_verl": "throughput",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'ascendfactory.metrics' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ascendfactory.metrics.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
