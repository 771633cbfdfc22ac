"""`ascendfactory-cli performance`: every finished run under a folder against a baseline table.

Newer form (the product's): `performance --result_dir=DIR [--backend=B] [--baseline=YAML] [--output_dir=D]`.
Older form: `performance <cfgs_yaml> --baseline YAML --o D`: the runs are the output folders of the file's
experiments (every model and experiment of an old-style file; the one experiment of a new-style file).
Writes `<Framework>_train_performance_benchmark_<version>_<time>.xlsx` and `performance.json` into the output
folder (default: the current one), prints a table. Exit status: 0; 3 when a run is a regression against its
baseline entry (a script can test it, as `estimate`'s DOES NOT FIT); 2 for bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ascendfactory.cli._options import JsonOpt

EXAMPLES = [
    "ascendfactory-cli performance --result_dir=./outputs --backend=mindspeed-llm --output_dir=./bench",
    "ascendfactory-cli performance --result_dir=./outputs --baseline=my_performance_baseline.yaml --json",
    "ascendfactory-cli performance cfgs/multi_model_cfgs.yaml --baseline base.yaml --o ./bench  # older",
]
REGRESSION = 3
DEFAULT_BASELINE = Path(__file__).resolve().parents[1] / "perf" / "baselines" / "performance_baseline.yaml"

CfgsArg = Annotated[
    Optional[Path],
    typer.Argument(
        help="Older form: a cfgs YAML whose experiments' output folders are the runs.", show_default=False
    ),
]
ResultDirOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--result_dir", help="The parent folder of finished runs' output trees (searched 4 levels deep)."
    ),
]
BackendOpt = Annotated[
    Optional[str], typer.Option("--backend", help="Only runs of this backend (default: every backend found).")
]
BaselineOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--baseline", help="The baseline YAML (default: the shipped figures this project measured)."
    ),
]
OutputDirOpt = Annotated[
    Optional[Path],
    typer.Option("--output_dir", "--o", help="Where the .xlsx and performance.json go (default ./)."),
]


def register(app: typer.Typer) -> None:
    @app.command("performance", epilog="Examples:\n\n" + "\n\n".join(EXAMPLES))
    def performance(
        cfgs_yaml: CfgsArg = None,
        result_dir: ResultDirOpt = None,
        backend: BackendOpt = None,
        baseline: BaselineOpt = None,
        output_dir: OutputDirOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Throughput, step time, TFLOP/s and MFU per device, peak memory and the predicted step time of every
        run under a folder, each against its baseline entry (model, experiment, sequence length, device):
        within, above or below the tolerance. Writes the .xlsx and JSON; exits 3 on a regression."""
        from ascendfactory import __version__
        from ascendfactory.cli._output import out
        from ascendfactory.perf.baseline import load_baseline
        from ascendfactory.perf.report import compare_runs, payload, table_rows
        from ascendfactory.perf.runs import read_run
        from ascendfactory.perf.workbook import workbook_name, write_workbook

        folders = _run_folders(cfgs_yaml, result_dir)
        base_path = baseline or DEFAULT_BASELINE
        table = load_baseline(base_path)
        runs = [read_run(f) for f in folders]
        if backend:
            runs = [r for r in runs if (r.backend or "").lower() == backend.lower()]
        _fill_predictions(runs)
        rows = compare_runs(runs, table)
        out_dir = output_dir or Path(".")
        name = workbook_name([r.backend for r in runs] if not backend else [backend], __version__)
        data = payload(rows, table, baseline_path=str(base_path))
        xlsx = write_workbook(
            out_dir / name, rows, table, baseline_path=str(base_path), result_dir=str(result_dir or cfgs_yaml)
        )
        data["workbook"] = xlsx
        data["json"] = _write_json(out_dir / "performance.json", data)
        if as_json:
            out.json(data)
        else:
            where = result_dir or cfgs_yaml
            out.table(
                table_rows(rows),
                title=f"performance: {len(rows)} run(s) under {where} (tolerance {table.tolerance:.0%})",
                whole=("verdict",),
            )
            for r in rows:
                for note in r.run.notes:
                    out.text(f"  {r.run.model}/{r.run.experiment or r.run.path}: {note}")
            out.text(f"workbook: {xlsx}")
            out.text(f"json: {data['json']}")
            if data["regressions"]:
                out.text(
                    f"REGRESSION in {len(data['regressions'])} run(s): " + ", ".join(data["regressions"])
                )
        if data["regressions"]:
            raise typer.Exit(REGRESSION)


def _run_folders(cfgs_yaml: Path | None, result_dir: Path | None) -> list[Path]:
    from ascendfactory.errors import ConfigError, Problem
    from ascendfactory.perf.runs import find_runs

    if (cfgs_yaml is None) == (result_dir is None):
        raise ConfigError(
            Problem(
                key="--result_dir",
                message="give either --result_dir (the folder of finished runs) or a cfgs YAML (older form)",
                fix="ascendfactory-cli performance --result_dir=./outputs",
            )
        )
    if result_dir is not None:
        if not result_dir.is_dir():
            raise ConfigError(
                Problem(
                    key="--result_dir",
                    message=f"{result_dir} is not a folder",
                    fix="the parent folder of runs",
                )
            )
        found = find_runs(result_dir)
        if not found:
            raise ConfigError(
                Problem(
                    key="--result_dir",
                    message=f"no run under {result_dir} (a folder with exp-config.yaml, .af/summary.json, "
                    "trainer_log.jsonl or logs/*run_log-*.txt)",
                    fix="point it at the parent of af_output_dir folders",
                )
            )
        return found
    assert cfgs_yaml is not None
    return [Path(d) for d in experiment_output_dirs(cfgs_yaml)]


def experiment_output_dirs(path: Path) -> list[str]:
    """`af_output_dir` of every experiment of a cfgs file (old style: each model x experiment)."""
    from ascendfactory.cli._experiment_args import load_from_args
    from ascendfactory.config.oldstyle import experiment_names, is_old_style, model_names
    from ascendfactory.config.yamlio import load_file

    data = load_file(path)
    if isinstance(data, dict) and is_old_style(data):
        pairs = [[m, e] for m in model_names(data) for e in experiment_names(data, m)]
    else:
        pairs = [[]]
    dirs = []
    for names in pairs:
        dirs.append(load_from_args([str(path), *names], collect=True).config.af_output_dir)
    return list(dict.fromkeys(dirs))


def _fill_predictions(runs: list) -> None:
    """A run whose summary has no prediction (made before the time model): its exp-config.yaml re-planned
    as a dry run, the plan's time estimate taken; a run that no longer plans keeps a note saying why."""
    from ascendfactory.backends.timing import TIMED_BACKENDS
    from ascendfactory.errors import AscendFactoryError
    from ascendfactory.output_tree import OutputTree
    from ascendfactory.perf.runs import NO_PREDICTION
    from ascendfactory.speed.report import unsupported

    for run in runs:
        cfg = Path(OutputTree(run.path).exp_config)
        declined = any(n.startswith(NO_PREDICTION) for n in run.notes)  # its plan had no supported figure
        if run.predicted_step_s is not None or declined or not cfg.is_file():
            continue
        if run.backend not in TIMED_BACKENDS:
            run.notes.append(f"no prediction: no time model for backend {run.backend} yet")
            continue
        try:
            from ascendfactory.backends.planner import make_plan
            from ascendfactory.config.load import load_experiment

            timing = make_plan(load_experiment(cfg), dry_run=True).timing or {}
        except AscendFactoryError as e:
            run.notes.append(
                f"no prediction: its exp-config.yaml does not plan here ({str(e).splitlines()[0]})"
            )
            continue
        why = unsupported(timing) if timing.get("step_s") else None
        if why:
            run.notes.append(f"{NO_PREDICTION} {why}")
        elif not timing.get("step_s"):
            run.notes.append(f"no prediction: {timing.get('note') or 'no time model for this job'}")
        else:
            run.predicted_step_s = float(timing["step_s"])
            run.predicted_tokens_per_s = timing.get("tokens_per_s_per_device")
            run.calibration_error = timing.get("calibration_error")
            if run.step_time_s:
                run.prediction_error = run.predicted_step_s / run.step_time_s - 1
            if run.device is None:
                run.device = timing.get("device")


def _write_json(path: Path, data: dict) -> str:
    import json
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return str(path)
