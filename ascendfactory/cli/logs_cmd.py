"""`ascendfactory-cli logs ...`: summarise, compare, plot and export training logs of any backend.

Only typer is imported here; the parsers, matplotlib and tensorboard load inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

SUMMARY_EXAMPLES = [
    "ascendfactory-cli logs summary out/logs/run_log-N1-7.txt --seq-length 4096 --devices 8",
    "ascendfactory-cli logs summary out/trainer_log.jsonl --devices 8 --steps 100:500 --json",
    "ascendfactory-cli logs summary run_log.txt --seq-length 4096 --devices 8 --device 910B3 "
    "--flops-per-token 4.2e10 --skip-first 5",
]
COMPARE_EXAMPLES = [
    "ascendfactory-cli logs compare npu/run_log.txt gpu/run_log.txt",
    "ascendfactory-cli logs compare a.log b.log --metric 'lm loss' --plot diff.png --json",
]
PLOT_EXAMPLES = [
    "ascendfactory-cli logs plot out/logs/run_log.txt -o training_loss.png",
    "ascendfactory-cli logs plot a.log b.log --metric 'lm loss' --smoothing 0.8 -o both.png",
    "ascendfactory-cli logs plot verl_run.log --metric critic/score/mean --metric response_length/mean",
]
EXPORT_EXAMPLES = [
    "ascendfactory-cli logs export run_log.txt --to tensorboard tb/ && tensorboard --logdir tb/",
    "ascendfactory-cli logs export trainer_log.jsonl --to csv metrics.csv",
]

app = typer.Typer(
    help="Read training logs of every backend: summary, compare, plot, export.", no_args_is_help=True
)

FormatOpt = Annotated[
    Optional[str],
    typer.Option(
        "--format",
        help="Log format; detected from the first lines when left out. A registered format's name: megatron, "
        "mindspeed_rl, llamafactory, verl and the others a backend registers (an unknown name lists them).",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


_BOOKKEEPING = ("epoch", "percentage", "elapsed_time", "remaining_time")


def _epilog(examples: list[str]) -> str:
    return "Examples:\n\n" + "\n\n".join(examples)


def _set_json(json_out: bool) -> None:
    from ascendfactory.cli._output import out

    out.mode = "json" if json_out else "human"


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else str(v)


@app.command("summary", epilog=_epilog(SUMMARY_EXAMPLES))
def summary(
    files: Annotated[list[Path], typer.Argument(help="Log files (run_log, trainer_log.jsonl, ...).")],
    format: FormatOpt = None,
    steps: Annotated[Optional[str], typer.Option(help="Step range A:B (inclusive; A: or :B open).")] = None,
    seq_length: Annotated[
        Optional[int], typer.Option(help="Sequence length (MindSpeed-LLM tokens/s/p).")
    ] = None,
    devices: Annotated[Optional[int], typer.Option(help="Number of devices (NPUs/GPUs) in the job.")] = None,
    skip_first: Annotated[Optional[int], typer.Option(help="Warm-up steps left out of throughput.")] = None,
    flops_per_token: Annotated[Optional[float], typer.Option(help="Model training FLOPs per token.")] = None,
    device: Annotated[
        Optional[str], typer.Option(help="Device for MFU: 910B1..910B4, 910C, A100, H100.")
    ] = None,
    peak_tflops: Annotated[
        Optional[float], typer.Option(help="Peak TFLOP/s per device (overrides --device).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Per-metric count/min/max/mean over a step range, throughput and a convergence verdict."""
    from ascendfactory.cli._output import out
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics import detect_format, parse_file, peak_for, summarize
    from ascendfactory.metrics.hardware import device_names
    from ascendfactory.metrics.summary import parse_steps

    _set_json(json_out)
    try:
        step_range = parse_steps(steps)
    except ValueError:
        raise ConfigError(
            Problem(key="--steps", message=f"bad step range {steps!r}", fix="use A:B, A: or :B")
        ) from None
    if device and peak_tflops is None:
        peak = peak_for(device)
        if peak is None:
            raise ConfigError(
                Problem(
                    key="--device",
                    message=f"unknown device {device!r}",
                    fix="use one of: " + ", ".join(device_names()) + " or pass --peak-tflops",
                )
            )
        peak_tflops = peak.bf16_tflops
    results = []
    for path in files:
        records = parse_file(path, format)  # raises ConfigError for a missing file or unknown format
        fmt = format or detect_format(path)
        s = summarize(
            records,
            format=fmt,
            steps=step_range,
            seq_length=seq_length,
            devices=devices,
            skip_first=skip_first,
            flops_per_token=flops_per_token,
            peak_tflops=peak_tflops,
        )
        results.append({"file": str(path), **s.to_dict()})
        if out.mode == "json":
            continue
        span = f"steps {s.steps[0]}-{s.steps[1]}" if s.steps else "no training steps"
        out.text(
            f"{path}  [{fmt or 'unknown format'}]  {span} ({s.num_steps} logged"
            + (f" of {s.total_steps})" if s.total_steps else ")")
        )
        rows = [
            {
                "metric": k,
                "count": v.count,
                "min": _fmt(v.min),
                "max": _fmt(v.max),
                "mean": _fmt(v.mean),
                "last": _fmt(v.last),
            }
            for k, v in {
                **s.stats,
                **{f"eval: {k}": v for k, v in s.eval_stats.items() if k not in _BOOKKEEPING},
            }.items()
        ]
        out.table(rows, columns=["metric", "count", "min", "max", "mean", "last"])
        for t in s.throughput:
            used = f"steps {t.steps_used[0]}-{t.steps_used[-1]}" if t.steps_used else "no steps"
            value = "n/a" if t.value is None else f"{t.value:,.1f} {t.unit}"
            out.text(f"throughput {t.metric}: {value}  ({t.formula}; {used}, skipped {len(t.steps_skipped)})")
            extra = {
                k: v
                for k, v in t.details.items()
                if k in ("tflops_per_device", "mfu", "samples_per_s", "tokens_per_s") and v is not None
            }
            if extra:
                out.text("  " + ", ".join(f"{k}={_fmt(v)}" for k, v in extra.items()))
            if t.note:
                out.warn(t.note)
        c = s.convergence
        out.text(f"convergence: {c.message}", style="green" if c.ok else "red")
        if s.checkpoints:
            out.text(f"checkpoints saved at: {', '.join(map(str, s.checkpoints))}")
    if out.mode == "json":
        out.json(results if len(results) != 1 else results[0])


@app.command("compare", epilog=_epilog(COMPARE_EXAMPLES))
def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Baseline log (A).")],
    b: Annotated[Path, typer.Argument(help="Log to compare (B).")],
    metric: Annotated[Optional[str], typer.Option(help="Metric to compare (default: the loss).")] = None,
    format: FormatOpt = None,
    tolerance: Annotated[float, typer.Option(help="Relative band counted as matching.")] = 0.02,
    plot: Annotated[Optional[Path], typer.Option(help="Also write a comparison PNG here.")] = None,
    rows: Annotated[bool, typer.Option(help="Include the per-step rows in --json output.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Align two runs by step: absolute/relative difference, mean and max error, share within +-2%."""
    from ascendfactory.cli._output import out
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics import compare, parse_file

    _set_json(json_out)
    cmp = compare(parse_file(a, format), parse_file(b, format), metric=metric, tolerance=tolerance)
    if not cmp.steps:
        raise ConfigError(
            Problem(
                key="--metric",
                message=f"no common steps with metric {cmp.metric!r}",
                fix="pick a metric both logs have (see `logs summary`) with --metric",
            )
        )
    if plot is not None:
        from ascendfactory.metrics.plot import plot_comparison

        plot_comparison(
            cmp.steps, cmp.a, cmp.b, plot, metric=cmp.metric, labels=(a.name, b.name), tolerance=tolerance
        )
    data = {"a": str(a), "b": str(b), **cmp.to_dict(rows=rows), "plot": str(plot) if plot else None}
    if out.mode == "json":
        out.json(data)
        return
    st = cmp.stats()
    out.table([{"statistic": k, "value": _fmt(v)} for k, v in st.items()], title=f"{cmp.metric}: A={a} B={b}")
    out.text(f"{st['within_tolerance']:.1%} of {st['aligned_steps']} steps within +-{tolerance:.0%}")
    if plot is not None:
        out.text(f"plot written to {plot}")


@app.command("plot", epilog=_epilog(PLOT_EXAMPLES))
def plot_cmd(
    files: Annotated[list[Path], typer.Argument(help="One or more logs; all runs go on one chart.")],
    metric: Annotated[
        Optional[list[str]],
        typer.Option(help="Metric(s) to plot (default: loss; RL: score and response length)."),
    ] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG to write.")] = Path("training_loss.png"),
    smoothing: Annotated[float, typer.Option(help="TensorBoard-style EMA weight in [0, 1).")] = 0.6,
    format: FormatOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Raw and EMA-smoothed curves as a PNG (several runs on one chart)."""
    from ascendfactory.cli._output import out
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics.plot import plot_loss, table_for_plot

    _set_json(json_out)
    if not 0 <= smoothing < 1:
        raise ConfigError(
            Problem(key="--smoothing", message=f"{smoothing} is outside [0, 1)", fix="e.g. 0.6")
        )
    tables = [table_for_plot(f, format, metric) for f in files]
    try:
        path = plot_loss(
            tables, output, metric=metric or None, smoothing=smoothing, labels=[f.name for f in files]
        )
    except ValueError as e:
        raise ConfigError(
            Problem(key="--metric", message=str(e), fix="name a metric shown by `logs summary`")
        ) from e
    if out.mode == "json":
        out.json({"output": str(path), "runs": [str(f) for f in files]})
    else:
        out.text(f"plot written to {path}")


@app.command("export", epilog=_epilog(EXPORT_EXAMPLES))
def export_cmd(
    file: Annotated[Path, typer.Argument(help="Log file to export.")],
    dest: Annotated[Path, typer.Argument(help="Output file (csv, jsonl) or directory (tensorboard).")],
    to: Annotated[str, typer.Option("--to", help="csv, jsonl or tensorboard.")] = "csv",
    format: FormatOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Export parsed metrics as CSV, JSONL or TensorBoard event files (with -vs-samples twins)."""
    from ascendfactory.cli._output import out
    from ascendfactory.metrics import export_records, parse_file

    _set_json(json_out)
    parse_file(file, format)  # validates the path and format before anything is written
    n = export_records(lambda: parse_file(file, format), to, dest)
    if out.mode == "json":
        out.json({"file": str(file), "to": to, "dest": str(dest), "records": n})
    else:
        out.text(f"{n} records written to {dest} ({to})")
