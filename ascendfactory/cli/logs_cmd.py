"""`ascendfactory-cli logs ...`: summarise, compare, plot and export training logs of any backend.

Only typer is imported here; the parsers, matplotlib and tensorboard load inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ascendfactory.output_tree import LOSS_PLOT

SUMMARY_EXAMPLES = [
    "ascendfactory-cli logs summary out/logs/run_log-N1-7.txt --seq-length 4096 --devices 8",
    "ascendfactory-cli logs summary out/trainer_log.jsonl --devices 8 --steps 100:500 --json",
    "ascendfactory-cli logs summary run_log.txt --seq-length 4096 --devices 8 --device 910B3 "
    "--flops-per-token 4.2e10 --skip-first 5",
]
COMPARE_EXAMPLES = [
    "ascendfactory-cli logs compare torch_run/logs/*run_log-N1-1.txt lf_run/trainer_log.jsonl --metric loss "
    "--align tokens --plot both.png",
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
    "ascendfactory-cli logs export run_log.txt --to mlflow mlruns/ --project qwen-sft --run-name node0",
    "ascendfactory-cli logs export run_log.txt --to mlflow http://mlflow.internal:5000",
    "ascendfactory-cli logs export run_log.txt --to wandb runs/ && wandb sync runs/wandb/offline-run-*",
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


def distinct_names(*paths: Path) -> tuple[str, ...]:
    """Legend names that tell the files apart: the file name, with as many parent folders as it takes."""
    resolved = [p.resolve() for p in paths]
    for depth in range(1, max(len(p.parts) for p in resolved) + 1):
        names = tuple("/".join(p.parts[-depth:]) for p in resolved)
        if len(set(names)) == len(names):
            return names
    return tuple(str(p) for p in paths)


def _pair(names: tuple[str, ...]) -> tuple[str, str]:
    return names[0], names[1]


def _log_of(path: Path) -> Path:
    """A directory given for a log: the training log in it (`metrics.locate.training_log`)."""
    if not path.is_dir():
        return path
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics.locate import training_log

    found = training_log(path)
    if found is None:
        raise ConfigError(
            Problem(
                key=str(path),
                message="a directory with no training log (trainer_log.jsonl, run_log-*.txt with steps)",
                fix="give the log file, or the output directory of a run",
            )
        )
    return found


def _loss_log(path: Path) -> Path:
    """A run log without training steps (a Megatron run's rank 0): the log of the same run that has them,
    said on the console (the loss is printed on the last rank)."""
    from ascendfactory.cli._output import out
    from ascendfactory.metrics.locate import has_train_steps, loss_sibling

    if has_train_steps(path):
        return path
    sibling = loss_sibling(path)
    if sibling is None:
        return path
    out.info(f"{path.name} has no training steps: reading {sibling.name} of the same run (its last rank)")
    return sibling


def _memory_rows(by_rank: dict[int, dict[str, float]]) -> list[dict[str, str]]:
    """One row per rank: the iteration of its report and its four figures (peak = max allocated)."""
    return [
        {
            "rank": str(rank),
            "after iterations": str(int(m.get("step", 0))),
            "allocated": _fmt(m.get("allocated_mb")),
            "max allocated (peak)": _fmt(m.get("max_allocated_mb")),
            "reserved": _fmt(m.get("reserved_mb")),
            "max reserved": _fmt(m.get("max_reserved_mb")),
        }
        for rank, m in by_rank.items()
    ]


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
    from ascendfactory.metrics import detect_format, parse_file, summarize
    from ascendfactory.metrics.locate import loss_sibling, run_facts

    _set_json(json_out)
    step_range = _step_range(steps)
    peak_tflops = _peak_tflops(device, peak_tflops)
    results = []
    for given in files:
        path = _log_of(given)
        facts = run_facts(path) if seq_length is None or devices is None else {}
        for key in ("seq_length", "devices"):
            if facts.get(key) and {"seq_length": seq_length, "devices": devices}[key] is None:
                out.info(f"{key} {facts[key]} from {facts['source']}")
        records = parse_file(path, format)  # raises ConfigError for a missing file or unknown format
        fmt = format or detect_format(path)
        s = summarize(
            records,
            format=fmt,
            steps=step_range,
            seq_length=seq_length or facts.get("seq_length"),
            devices=devices or facts.get("devices"),
            skip_first=skip_first,
            flops_per_token=flops_per_token,
            peak_tflops=peak_tflops,
        )
        results.append({"file": str(path), **s.to_dict()})
        if not s.num_steps:
            sibling = loss_sibling(path)
            if sibling is not None:
                out.warn(
                    f"{path.name} has no training steps: this run prints them in {sibling.name} "
                    "(a Megatron run logs the loss on its last rank)"
                )
        if out.mode != "json":
            _print_summary(path, fmt, s)
    if out.mode == "json":
        out.json(results if len(results) != 1 else results[0])


def _step_range(steps: str | None) -> Any:
    """`--steps A:B` parsed (a ConfigError naming the flag when it is not a range)."""
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics.summary import parse_steps

    try:
        return parse_steps(steps)
    except ValueError:
        raise ConfigError(
            Problem(key="--steps", message=f"bad step range {steps!r}", fix="use A:B, A: or :B")
        ) from None


def _peak_tflops(device: str | None, peak_tflops: float | None) -> float | None:
    """The peak TFLOP/s for MFU: `--peak-tflops`, else `--device`'s bf16 peak (unknown: a ConfigError)."""
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics import peak_for
    from ascendfactory.metrics.hardware import device_names

    if not device or peak_tflops is not None:
        return peak_tflops
    peak = peak_for(device)
    if peak is None:
        raise ConfigError(
            Problem(
                key="--device",
                message=f"unknown device {device!r}",
                fix="use one of: " + ", ".join(device_names()) + " or pass --peak-tflops",
            )
        )
    return peak.bf16_tflops


def _print_summary(path: Path, fmt: str | None, s: Any) -> None:
    """One file's summary for a person: the step span, the metric table, throughput, convergence,
    checkpoints and memory by rank."""
    from ascendfactory.cli._output import out

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
    if s.memory_by_rank:
        out.table(_memory_rows(s.memory_by_rank), title="memory (MB) by rank, Megatron's report_memory")


@app.command("compare", epilog=_epilog(COMPARE_EXAMPLES))
def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Baseline log (A).")],
    b: Annotated[Path, typer.Argument(help="Log to compare (B).")],
    metric: Annotated[Optional[str], typer.Option(help="Metric to compare (default: the loss).")] = None,
    format: FormatOpt = None,
    tolerance: Annotated[float, typer.Option(help="Relative band counted as matching.")] = 0.02,
    plot: Annotated[Optional[Path], typer.Option(help="Also write a comparison PNG here.")] = None,
    rows: Annotated[bool, typer.Option(help="Include the per-step rows in --json output.")] = False,
    align: Annotated[
        str, typer.Option(help="step, or tokens (tokens seen: runs of different batch sizes or backends).")
    ] = "step",
    seq_length: Annotated[
        Optional[int], typer.Option(help="Megatron logs: tokens per sample (default: the log's arguments).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Align two runs, of any backends, by step or by tokens seen: absolute/relative difference, mean and
    max error, share within +-2%. Common names (loss, learning_rate, grad_norm, tokens_per_s, reward) work
    across backends (ascendfactory/metrics/vocabulary.py)."""
    from ascendfactory.cli._output import out
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics import parse_file
    from ascendfactory.metrics.locate import run_facts
    from ascendfactory.metrics.throughput import get_formula
    from ascendfactory.metrics.vocabulary import align as align_runs
    from ascendfactory.metrics.vocabulary import common_records

    _set_json(json_out)
    if align not in ("step", "tokens"):
        raise ConfigError(
            Problem(key="--align", message=f"unknown alignment {align!r}", fix="use step or tokens")
        )
    a, b = (_log_of(f) for f in (a, b))
    if metric is None:
        a, b = (_loss_log(f) for f in (a, b))

    def seq_of(f: Path) -> int | None:
        """--seq-length, else the log's arguments dump, else the run's exp-config.yaml (as `summary`)."""
        found = seq_length or get_formula("megatron").seq_from_log(str(f))
        if found is None and align == "tokens":
            facts = run_facts(f)
            if facts.get("seq_length"):
                out.info(f"seq_length {facts['seq_length']} of {f.name} from {facts['source']}")
            found = facts.get("seq_length")
        return found

    ra, rb = (common_records(parse_file(f, format), seq_length=seq_of(f)) for f in (a, b))
    cmp = align_runs(ra, rb, metric=metric, by=align, tolerance=tolerance)  # type: ignore[arg-type]
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
            cmp.steps,
            cmp.a,
            cmp.b,
            plot,
            metric=cmp.metric,
            labels=_pair(distinct_names(a, b)),
            tolerance=tolerance,
            x_label="tokens seen" if align == "tokens" else "step",
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
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG to write.")] = Path(LOSS_PLOT),
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
    files = [_log_of(f) for f in files]  # a run's folder or its logs/: the log with its training steps
    if not metric:
        files = [_loss_log(f) for f in files]
    tables = [table_for_plot(f, format, metric) for f in files]
    try:
        path = plot_loss(
            tables, output, metric=metric or None, smoothing=smoothing, labels=list(distinct_names(*files))
        )
    except ValueError:
        raise ConfigError(
            Problem(
                key="--metric",
                message=f"no loss or reward found in {', '.join(str(f) for f in files)}",
                fix="name a metric `logs summary` shows with --metric, or give the log of the rank that "
                "prints the loss (a Megatron run: the last rank's run_log)",
            )
        ) from None
    if out.mode == "json":
        out.json({"output": str(path), "runs": [str(f) for f in files]})
    else:
        out.text(f"plot written to {path}")


@app.command("export", epilog=_epilog(EXPORT_EXAMPLES))
def export_cmd(
    file: Annotated[Path, typer.Argument(help="Log file to export.")],
    dest: Annotated[
        str,
        typer.Argument(
            help="Output file (csv, jsonl), directory (tensorboard, wandb offline, swanlab local), or for "
            "mlflow a tracking URI or a directory that gets a SQLite store."
        ),
    ],
    to: Annotated[
        str,
        typer.Option(
            "--to", help="csv, jsonl, tensorboard, or a tracker: mlflow, wandb, swanlab, any a plugin adds."
        ),
    ] = "csv",
    project: Annotated[
        str | None,
        typer.Option("--project", help="Tracker project / MLflow experiment (default: the file's folder)."),
    ] = None,
    run_name: Annotated[
        str | None, typer.Option("--run-name", help="Tracker run name (default: the file's name).")
    ] = None,
    format: FormatOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Export parsed metrics as CSV, JSONL, TensorBoard event files (with -vs-samples twins), or a new
    MLflow / W&B (offline) / SwanLab (local) run."""
    from ascendfactory.cli._output import out
    from ascendfactory.metrics import export_records, parse_file
    from ascendfactory.metrics.export import TARGETS

    _set_json(json_out)
    parse_file(file, format)  # validates the path and format before anything is written
    run_id = None
    if to in TARGETS:
        n = export_records(lambda: parse_file(file, format), to, Path(dest))
    else:
        n, run_id = _export_to_tracker(file, dest, to, format, project=project, run_name=run_name)
    if out.mode == "json":
        out.json({"file": str(file), "to": to, "dest": str(dest), "records": n, "run_id": run_id})
    else:
        out.text(f"{n} records written to {dest} ({to}{f', run {run_id}' if run_id else ''})")


def _export_to_tracker(
    file: Path, dest: str, to: str, format: str | None, *, project: str | None, run_name: str | None
) -> tuple[int, str]:
    """A new run of the tracker `to`, its metrics named as the log format's framework names them live."""
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.metrics import detect_format, parse_file
    from ascendfactory.metrics.export import TARGETS
    from ascendfactory.metrics.formats import find_format
    from ascendfactory.trackers.export import can_export, default_name, export_spec, export_targets
    from ascendfactory.trackers.export import export_to_tracker as export

    if not can_export(to):
        raise ConfigError(
            Problem(
                key="--to",
                message=f"unknown export target {to!r}",
                fix="use one of: " + ", ".join([*TARGETS, *export_targets()]),
            )
        )
    spec = export_spec(
        to, dest, project=project or file.resolve().parent.name or "logs", run_name=run_name or file.stem
    )
    detected = format or detect_format(file)
    fmt = find_format(detected) if detected else None
    base = fmt.tracker_name if fmt is not None and fmt.tracker_name is not None else default_name
    own = _backend_tracker_names(file)

    def name(kind: str, key: str) -> str:
        return own[key] if kind == "train" and key in own else base(kind, key)

    return export(parse_file(file, format), spec, source=str(file), fmt=format, name=name)


def _backend_tracker_names(file: Path) -> dict[str, str]:
    """The names the run's backend gives values in a tracker (`Backend.tracker_names`), when the log lies in
    an output tree whose `exp-config.yaml` names a registered backend."""
    from ascendfactory.backends.registry import find_backend
    from ascendfactory.metrics.locate import run_facts

    name = run_facts(file).get("backend")
    backend = find_backend(name) if name else None
    return dict(backend.tracker_names) if backend is not None else {}


def register(cli: typer.Typer) -> None:
    """Add the `logs` command group to `cli`."""
    cli.add_typer(app, name="logs")
