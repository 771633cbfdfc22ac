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

from ascendfactory.metrics.compare import Comparison, compare
from ascendfactory.metrics.convergence import Convergence, check_convergence
from ascendfactory.metrics.export import export_records
from ascendfactory.metrics.formats import (
    LogFormat,
    detect_format,
    format_names,
    parse_file,
    parse_lines,
    register_format,
    registered_formats,
)
from ascendfactory.metrics.hardware import PEAKS, flops_per_token, peak_for
from ascendfactory.metrics.plot import ema, plot_loss
from ascendfactory.metrics.record import Record, dedupe
from ascendfactory.metrics.summary import Summary, summarize
from ascendfactory.metrics.table import StepTable
from ascendfactory.metrics.tail import LiveTail
from ascendfactory.metrics.throughput import (
    Throughput,
    throughput_llamafactory,
    throughput_mindspeed,
    throughput_mindspeed_mm,
    throughput_mindspeed_rl,
    throughput_verl,
)

__all__ = [
    "LogFormat",
    "PEAKS",
    "Comparison",
    "Convergence",
    "LiveTail",
    "Record",
    "StepTable",
    "Summary",
    "Throughput",
    "check_convergence",
    "compare",
    "dedupe",
    "detect_format",
    "ema",
    "export_records",
    "flops_per_token",
    "format_names",
    "register_format",
    "registered_formats",
    "parse_file",
    "parse_lines",
    "peak_for",
    "plot_loss",
    "summarize",
    "throughput_llamafactory",
    "throughput_mindspeed",
    "throughput_mindspeed_mm",
    "throughput_mindspeed_rl",
    "throughput_verl",
]
