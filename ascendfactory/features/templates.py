"""`ascendfactory-cli config`: render a commented experiment file from a backend's templates.

`<backend package>/experiments/<exp>.yaml` holds the `backend_config` of each experiment (a jinja2 snippet
with model facts filled in); `exp-config.yaml.j2` beside this module wraps it with the documented top-level
keys and the backend's run options.
"""

from __future__ import annotations

import os
from pathlib import Path

from ascendfactory.backends.registry import get_backend
from ascendfactory.config.catalog import from_catalog, list_models
from ascendfactory.config.schema import ExperimentConfig
from ascendfactory.errors import ConfigError, Problem
from ascendfactory.parallel import suggest_ep, suggest_layout

WRAPPER_DIR = Path(__file__).resolve().parent
DEMO_MODEL = "tiny-demo"
DEMO_MODEL_DIR = "./demo_assets/tiny-qwen2"
DEMO_DATASET = "./cfgs/data/demo_sft.jsonl"


def render_experiment(*, backend: str, model_name: str, exp_name: str, output_file: str) -> str:
    """The full commented yaml text. Raises ConfigError naming the valid choices."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    chosen = get_backend(backend, key="--backend")
    exps = chosen.experiments()
    if exp_name not in exps:
        raise ConfigError(
            Problem(
                "--exp_name",
                f"backend '{backend}' has no experiment '{exp_name}'",
                fix="use one of: " + ", ".join(exps),
            )
        )
    arch = from_catalog(model_name)  # raises with the list and a suggestion
    unsupported = chosen.model_problem(arch, exp_name)
    if unsupported:
        offered = [m for m in list_models() if chosen.model_problem(from_catalog(m), exp_name) is None]
        raise ConfigError(
            Problem("--af_model_name", unsupported, fix=f"backend '{backend}' takes: " + ", ".join(offered))
        )
    is_demo = model_name == DEMO_MODEL
    devices = 2 if is_demo else 8
    tp, pp = (1, 1) if is_demo else suggest_layout(arch, devices)
    dp = devices // (tp * pp)
    ep = suggest_ep(arch, dp)
    env = Environment(
        loader=FileSystemLoader([str(WRAPPER_DIR), str(chosen.experiments_dir)]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    values = dict(
        model_name=model_name,
        model_dir=DEMO_MODEL_DIR if is_demo else f"/path/to/{model_name}",
        dataset=DEMO_DATASET if is_demo else "/path/to/dataset.jsonl",
        tp=tp,
        pp=pp,
        dp=dp,
        ep=ep,
        gbs=max(8, dp) if is_demo else 8 * dp,
        seq_length=min(4096, arch.max_pos or 4096),  # the "4k" experiments, within the model's positions
        **chosen.template_values(arch, devices=devices, tp=tp, pp=pp),
    )
    backend_config = env.get_template(f"{exp_name}.yaml").render(**values).rstrip() + "\n"
    fields = ExperimentConfig.model_fields
    doc = {k: f.description or "" for k, f in fields.items()}
    comments = chosen.run_option_comments
    run_options = [(k, v, comments.get(k) or fields[k].description) for k, v in chosen.run_options.items()]
    output_dir = (
        f"./outputs/{model_name}-{exp_name}" if is_demo else f"/path/to/save_dir/{model_name}-{exp_name}"
    )
    return env.get_template("exp-config.yaml.j2").render(
        backend=backend,
        model_name=model_name,
        exp_name=exp_name,
        output_dir=output_dir,
        output_file=output_file,
        master_port=29500 if is_demo else 6000,
        npus_per_node=devices,
        nnodes=values.get("nnodes", 1),
        doc=doc,
        run_options=run_options,
        backend_config=backend_config,
    )


DEMO_EXPERIMENT = "tiny-sft"  # the template written for the demo model (its sizes, a minute on CPU)


def suggested_experiment(backend: str, model_name: str) -> str:
    """The experiment `config` offers first for `model_name`: the demo template for the demo model where the
    backend has it (the 4k templates are sized for real models), else the first in name order."""
    exps = get_backend(backend, key="--backend").experiments()
    if model_name == DEMO_MODEL and DEMO_EXPERIMENT in exps:
        return DEMO_EXPERIMENT
    return exps[0]


def offered_models(backend: str, experiment: str | None = None) -> list[str]:
    """The catalog models `config` offers for `backend` (the ones its programs can run), in `experiment`'s
    template when given."""
    chosen = get_backend(backend, key="--backend")
    return [m for m in list_models() if chosen.model_problem(from_catalog(m), experiment) is None]


def write_experiment(text: str, path: str, *, force: bool) -> None:
    """Write atomically; refuse to overwrite unless `force`."""
    target = Path(path)
    if target.exists() and not force:
        raise ConfigError(
            Problem(
                "--output_file_path",
                f"{target} already exists",
                fix="choose another path, or pass --force to overwrite it",
            )
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
