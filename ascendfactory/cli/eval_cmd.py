"""`ascendfactory-cli eval`: evaluate the HF weights a run produced on MMLU, C-Eval and GSM8K
(lm-evaluation-harness in its own environment, `sh install.sh eval`; local files under AF_EVAL_DATA_DIR).

Results go into the run's output folder: `mmlu_test/`, `ceval_validation/`, `gsm8k_test/`, each with
`results.log` (accuracy in percent: Average, then each subject) and `results.json` (each question's
prediction), as AscendFactory writes them, plus lm-eval's own results and the `lm_eval` command that
reproduces them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ascendfactory.cli._options import JsonOpt

EXAMPLES = [
    "AF_EVAL_DATA_DIR=./eval_data ascendfactory-cli eval cfgs/quickstart.yaml --dataset mmlu",
    "ascendfactory-cli eval cfgs/multi_model_cfgs.yaml --model_name qwen2.5-7b --run_type lora --dataset all",
    "ascendfactory-cli eval exp.yaml --dataset gsm8k --model_name_or_path /models/my-merged-model",
    "ascendfactory-cli eval exp.yaml --dataset mmlu --num_fewshot 0 --batch_size 8",
]
RUN_TYPES = ("full", "lora")


def register(app: typer.Typer) -> None:
    @app.command("eval", epilog="Examples:\n\n" + "\n\n".join(EXAMPLES))
    def eval_(
        cfgs_yaml: Annotated[
            Path, typer.Argument(help="The experiment (or old-style cfgs) YAML of the run.")
        ],
        dataset: Annotated[str, typer.Option("--dataset", help="all, mmlu, ceval or gsm8k.")] = "all",
        model_name: Annotated[
            Optional[str], typer.Option("--model_name", help="The model block of an old-style cfgs file.")
        ] = None,
        run_type: Annotated[
            str, typer.Option("--run_type", help="full or lora: which experiment and which weights.")
        ] = "full",
        model_name_or_path: Annotated[
            Optional[str],
            typer.Option("--model_name_or_path", help="Evaluate these HF weights (or LoRA adapter) instead."),
        ] = None,
        num_fewshot: Annotated[
            Optional[int],
            typer.Option(
                "--num_fewshot",
                help="Examples shown before each question (default 5, at most what each dev/train file has; "
                "0: zero-shot).",
            ),
        ] = None,
        batch_size: Annotated[
            str, typer.Option("--batch_size", help="Questions scored at once: a positive integer, or auto.")
        ] = "1",
        as_json: JsonOpt = False,
    ) -> None:
        """Accuracy of a run's trained weights on local MMLU / C-Eval / GSM8K files (CPU, CUDA or NPU)."""
        from ascendfactory.cli._output import out
        from ascendfactory.errors import ConfigError, Problem
        from ascendfactory.evaluation import datasets, options, weights
        from ascendfactory.evaluation.run import evaluate

        if run_type not in RUN_TYPES:
            raise ConfigError(Problem(key="--run_type", message=f"unknown {run_type!r}", fix="full or lora"))
        datasets.selected(dataset)  # an unknown name refused before anything loads
        batch = options.batch_size(batch_size)
        if num_fewshot is not None and num_fewshot < 0:
            options.shots(datasets.BENCHMARKS["mmlu"], {}, num_fewshot)  # the negative-count error
        loaded = _load(cfgs_yaml, model_name, run_type)
        cfg = loaded.config
        if model_name_or_path:
            found = weights.given(model_name_or_path)
        else:
            found = weights.of_run(cfg.af_output_dir, _export_of(loaded), run_type)
        say = out.info if not as_json else (lambda _: None)
        results = evaluate(
            found,
            dataset,
            cfg.af_output_dir,
            cpu=cfg.accelerator == "cpu",
            say=say,
            batch_size=batch,
            num_fewshot=num_fewshot,
        )
        if as_json:
            out.json({"weights": found.__dict__, "results": [r.to_dict() for r in results]})
            return
        rows = [
            {
                "dataset": r.dataset,
                "accuracy %": "" if r.accuracy is None else f"{r.accuracy:.2f}",
                "subjects": str(len(r.subjects) or 1),
                "results": r.folder,
            }
            for r in results
        ]
        out.table(rows, title=f"eval of {found.model}" + (f" + {found.adapter}" if found.adapter else ""))
        for r in results:
            if r.zero_shot:
                out.text(f"{r.dataset}: zero-shot for {', '.join(r.zero_shot)} (no dev/train file)")


def _load(path: Path, model_name: str | None, run_type: str):
    """The experiment: a new-style file as it is; an old-style file's experiment of `model_name` whose name
    says `run_type` (`full-4k`, `4096-lora`: exactly one must)."""
    from ascendfactory.cli._experiment_args import load_from_args
    from ascendfactory.config.oldstyle import experiment_names, is_old_style, model_names
    from ascendfactory.config.yamlio import load_file
    from ascendfactory.errors import ConfigError, Problem

    data = load_file(path)
    if not (isinstance(data, dict) and is_old_style(data)):
        loaded = load_from_args([str(path)])
        if model_name and model_name != loaded.config.af_model_name:
            raise ConfigError(
                Problem(
                    key="--model_name",
                    message=f"{path} is the experiment of {loaded.config.af_model_name!r}, "
                    f"not {model_name!r}",
                    fix="leave --model_name out for a one-experiment file",
                )
            )
        return loaded
    models = model_names(data)
    if model_name not in models:
        raise ConfigError(
            Problem(
                key="--model_name",
                message=f"{model_name!r} is no model block of {path}",
                fix=", ".join(models),
            )
        )
    exps = [e for e in experiment_names(data, model_name) if run_type in e.lower()]
    if len(exps) != 1:
        raise ConfigError(
            Problem(
                key="--run_type",
                message=f"{len(exps)} experiments of {model_name} say {run_type!r}: "
                f"{', '.join(exps) or 'none'}",
                fix="give the weights with --model_name_or_path",
            )
        )
    return load_from_args([str(path), str(model_name), exps[0]])


def _export_of(loaded) -> str | None:
    """The HF weights the run's plan exports (its EXPORT step's output), or None when it has none."""
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.errors import ConfigError
    from ascendfactory.plan import Role

    try:
        step = make_plan(loaded, dry_run=True).with_role(Role.EXPORT)
    except ConfigError:
        return None
    return step.outputs[0] if step is not None and step.outputs else None
