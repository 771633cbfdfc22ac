"""Which HF weights `eval` evaluates, for a run of an experiment.

In order: `--model_name_or_path` (an HF model folder, or a LoRA adapter folder with `adapter_config.json`,
whose base model it names); else the HF weights the run wrote, as its plan names them (the EXPORT step's
output: `ckpt_converted_mg2hf/` or `hf_save_dir` for the Megatron backends, `lora_merged/` for a
LLaMA-Factory LoRA run); else LLaMA-Factory's training output itself (the full model, or with
`--run_type lora` the adapter on its base model). A folder must hold `config.json` and a tokenizer; what is
missing is named with the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ascendfactory.errors import ConfigError, Problem

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class Weights:
    model: str  # the HF model folder (the base model for an adapter)
    adapter: str | None  # a LoRA adapter folder (peft), or None
    source: str  # how it was found


def _adapter_base(adapter: Path) -> str | None:
    try:
        cfg = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    base = cfg.get("base_model_name_or_path")
    return str(base) if base else None


def is_model(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def check_model(folder: Path, key: str) -> None:
    if not folder.is_dir():
        raise ConfigError(
            Problem(key=key, message=f"{folder} does not exist", fix="the folder of HF weights")
        )
    if not is_model(folder):
        raise ConfigError(
            Problem(
                key=key, message=f"{folder} has no config.json", fix="an HF model folder (save_pretrained)"
            )
        )
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise ConfigError(
            Problem(
                key=key,
                message=f"{folder} has no tokenizer ({', '.join(TOKENIZER_FILES)})",
                fix="copy the tokenizer files of the base model into it",
            )
        )


def given(path: str) -> Weights:
    """`--model_name_or_path`: a model folder, or an adapter folder on the base model it names."""
    folder = Path(path).expanduser().resolve()
    if (folder / "adapter_config.json").is_file():
        base = _adapter_base(folder)
        if not base:
            raise ConfigError(
                Problem(
                    key="--model_name_or_path",
                    message=f"{folder}/adapter_config.json names no base_model_name_or_path",
                    fix="give the merged model folder instead",
                )
            )
        check_model(Path(base), "base_model_name_or_path")
        return Weights(str(Path(base).resolve()), str(folder), "--model_name_or_path (adapter)")
    check_model(folder, "--model_name_or_path")
    return Weights(str(folder), None, "--model_name_or_path")


def of_run(output_dir: str, export: str | None, run_type: str) -> Weights:
    """The weights a run left in `output_dir`; `export`: its plan's EXPORT step output (or None)."""
    out = Path(output_dir).resolve()
    tried = []
    if export:
        tried.append(export)
        if is_model(Path(export)):
            check_model(Path(export), "hf weights")
            return Weights(str(Path(export).resolve()), None, "the run's exported HF weights")
    if run_type == "lora" and (out / "adapter_config.json").is_file():
        base = _adapter_base(out)
        if base and is_model(Path(base)):
            check_model(Path(base), "base_model_name_or_path")
            return Weights(str(Path(base).resolve()), str(out), "the run's LoRA adapter on its base model")
        tried.append(f"{out}/adapter_config.json's base model {base}")
    if run_type == "full" and is_model(out):
        check_model(out, "af_output_dir")
        return Weights(str(out), None, "the run's output folder (full fine-tune)")
    tried.append(str(out / ("adapter_config.json" if run_type == "lora" else "config.json")))
    raise ConfigError(
        Problem(
            key="--model_name_or_path",
            message=f"no HF weights of this run (--run_type {run_type}); looked for: {', '.join(tried)}",
            fix="train it first (with the final mg2hf conversion / LoRA merge on), or give "
            "--model_name_or_path",
        )
    )
