"""`ascendfactory-cli config`: render a commented experiment file from the shipped templates.

`cfgs/experiments/<backend>/<exp>.yaml` holds the `backend_config` of each experiment (a jinja2 snippet with
model facts filled in); `templates/exp-config.yaml.j2` wraps it with the documented top-level keys.
"""

from __future__ import annotations

import os
from pathlib import Path

from ascendfactory.config.catalog import CFGS_DIR, REPO_ROOT, ModelArch, from_catalog, list_models
from ascendfactory.config.schema import ExperimentConfig
from ascendfactory.errors import ConfigError, Problem

TEMPLATES_DIR = REPO_ROOT / "templates"
EXPERIMENTS_DIR = CFGS_DIR / "experiments"
DEMO_MODEL_DIR = "./demo_assets/tiny-qwen2"
DEMO_DATASET = "./cfgs/data/demo_sft.jsonl"

# Run options written into every generated file, in this order, with their schema descriptions.
RUN_OPTIONS = (
    "stage",
    "ckpt_load_type",
    "user_converted_ckpt_path",
    "train_auto_resume",
    "save_total_limit",
    "convert_mg2hf_at_last",
    "hf_save_dir",
)
MEGATRON_BACKENDS = ("torch", "mindspeed-llm")
_PROMPT_TYPES = {"qwen25": "qwen", "qwen3": "qwen", "llama2": "llama3", "glm4": "glm4"}
_LF_TEMPLATES = {"qwen25": "qwen", "qwen3": "qwen3", "llama2": "llama3", "glm4": "glm4"}


def list_experiments(backend: str) -> list[str]:
    d = EXPERIMENTS_DIR / backend
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def suggest_layout(arch: ModelArch, devices: int = 8) -> tuple[int, int]:
    """A starting TP/PP for `devices` per node, by model size; TP divides heads and KV heads."""
    params_b = 12 * arch.layers * arch.hidden**2 / 1e9
    tp = 1 if params_b < 3 else 2 if params_b < 10 else 4 if params_b < 40 else 8
    pp = 1 if params_b < 10 else 2 if params_b < 40 else 4
    while tp > 1 and (arch.heads % tp or arch.kv_heads % tp or devices % tp):
        tp //= 2
    while pp > 1 and (arch.layers % pp or devices % (tp * pp)):
        pp //= 2
    return tp, pp


def render_experiment(*, backend: str, model_name: str, exp_name: str, output_file: str) -> str:
    """The full commented yaml text. Raises ConfigError naming the valid choices."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    from ascendfactory.backends import get_backend, list_supported_backends

    names = [b.name for b in list_supported_backends()]
    if backend not in names:
        raise ConfigError(
            Problem("--backend", f"unknown backend '{backend}'", fix="use one of: " + ", ".join(names))
        )
    get_backend(backend)
    exps = list_experiments(backend)
    if exp_name not in exps:
        raise ConfigError(
            Problem(
                "--exp_name",
                f"backend '{backend}' has no experiment '{exp_name}'",
                fix="use one of: " + ", ".join(exps),
            )
        )
    if model_name not in list_models():
        from_catalog(model_name)  # raises with the list and a suggestion
    arch = from_catalog(model_name)
    is_demo = model_name == "tiny-demo"
    devices = 2 if is_demo else 8
    tp, pp = (1, 1) if is_demo else suggest_layout(arch, devices)
    dp = devices // (tp * pp)
    env = Environment(
        loader=FileSystemLoader([str(TEMPLATES_DIR), str(EXPERIMENTS_DIR)]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )
    values = dict(
        model_name=model_name,
        model_dir=DEMO_MODEL_DIR if is_demo else f"/path/to/{model_name}",
        dataset=DEMO_DATASET if is_demo else "/path/to/dataset.jsonl",
        tp=tp,
        pp=pp,
        gbs=max(8, dp) * 1 if is_demo else 8 * dp * 1,
        prompt_type=_PROMPT_TYPES.get(arch.model_type_hf, "empty"),
        lf_template=_LF_TEMPLATES.get(arch.model_type_hf, "default"),
    )
    backend_config = env.get_template(f"{backend}/{exp_name}.yaml").render(**values).rstrip() + "\n"
    fields = ExperimentConfig.model_fields
    doc = {k: f.description or "" for k, f in fields.items()}
    stage = "sft" if backend in MEGATRON_BACKENDS + ("llamafactory", "mindspeed-mm") else exp_name
    run_options = []
    if backend in MEGATRON_BACKENDS:
        defaults = {
            "stage": stage,
            "ckpt_load_type": 1,
            "user_converted_ckpt_path": "null",
            "train_auto_resume": "false",
            "save_total_limit": 0,
            "convert_mg2hf_at_last": "true",
            "hf_save_dir": "null",
        }
        run_options = [(k, defaults[k], fields[k].description) for k in RUN_OPTIONS]
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
        doc=doc,
        run_options=run_options,
        backend_config=backend_config,
    )


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
