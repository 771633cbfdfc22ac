"""The keys of `backend_config` that the Megatron-style plans (`torch`, `mindspeed-llm`) read, typed.

Each model reads a section as the user wrote it, in Megatron's dash spelling (`tensor-model-parallel-size`),
and allows every other key (`extra="allow"`): those are the framework's own flags, which each backend checks
against the argument names and types of the program that receives them (mindspeed-llm's generated lists in
`backends/mindspeed_llm/keys/`, the embedded trainer's parser), and which reach argv untouched
(`run.to_flags` renders the section as written, not these models). Only the dash spelling is read: a key
written with underscores is not these fields (the name checks refuse it with a did-you-mean).

A value these models refuse becomes a Problem through `config.problems` (key, message with the value,
fix); the reading goes on with the field's default so that the checks that follow still run.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ascendfactory.parallel import parse_layer_list

MAX_WORKERS = 1024  # preprocessing processes
SEQ_LENGTH = 4096  # tokens per sample when the experiment gives none (the plan passes it: mindspeed-llm)


def _size(value: Any) -> int | None:
    """A size or a count: a whole number of 1 or more (an integer written as text is taken)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value))
        except ValueError:
            raise PydanticCustomError(
                "integer", "must be an integer (got {got})", {"got": repr(value)}
            ) from None
    if value < 1:
        raise PydanticCustomError(
            "too_small", "must be 1 or more (got {got})", {"got": value, "fix": "set {key} >= 1"}
        )
    return value


def _not_a_path(value: Any) -> PydanticCustomError:
    return PydanticCustomError(
        "path",
        "must be a path (got {got})",
        {"got": f"{type(value).__name__} {value!r:.60}", "fix": "quote it if it is a path made of digits"},
    )


def _path(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _not_a_path(value)
    return value


def is_blend_list(value: Any) -> bool:
    """A list of words Megatron's `--data-path` (nargs '*') takes as a blend: texts and numbers."""
    return (
        isinstance(value, list)
        and len(value) > 1
        and all(
            isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in value
        )
    )


def _data_path(value: Any) -> str | list[str | float] | None:
    if value is None or isinstance(value, str) or is_blend_list(value):
        return value
    raise _not_a_path(value)


def _layer_list(value: Any) -> list[int] | None:
    try:
        return parse_layer_list(value)
    except ValueError:
        raise PydanticCustomError(
            "layer_list",
            "must be comma-separated integers (got {got})",
            {"got": repr(value), "fix": "e.g. 3,5"},
        ) from None


def _workers(value: Any) -> int | None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS
    ):
        raise PydanticCustomError(
            "workers",
            "must be a whole number of processes from 1 to {most} (got {got})",
            {
                "most": MAX_WORKERS,
                "got": repr(value),
                "fix": "e.g. workers: 4 (the output is the same for every count)",
            },
        )
    return value


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


Size = Annotated[int | None, BeforeValidator(_size)]
Path = Annotated[str | None, BeforeValidator(_path)]


def _key(name: str, default: Any, description: str) -> Any:
    """A field read under Megatron's dash spelling of `name`."""
    return Field(default, alias=name.replace("_", "-"), description=description)


class PathKeys(BaseModel):
    """The keys whose value is a path (a text), in every section: a number or a list there is a mistake."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    tokenizer_name_or_path: Path = _key("tokenizer_name_or_path", None, "The HF model directory (tokenizer).")
    data_path: Annotated[str | list[str | float] | None, BeforeValidator(_data_path)] = _key(
        "data_path", None, "Preprocessed data: one prefix, or Megatron's blend (weight, prefix pairs)."
    )
    load: Path = _key("load", None, "The checkpoint to load (replaces the one the load rule chooses).")
    save: Path = _key("save", None, "Where training saves (the plan owns it: saved_checkpoints).")
    input: Path = _key("input", None, "The raw dataset to preprocess.")
    output_prefix: Path = _key("output_prefix", None, "The prefix of the preprocessed files.")
    load_dir: Path = _key("load_dir", None, "The converters' input checkpoint.")
    save_dir: Path = _key("save_dir", None, "The converters' output checkpoint.")
    hf_cfg_dir: Path = _key("hf_cfg_dir", None, "The HF config directory (mg2hf).")
    lora_load: Path = _key("lora_load", None, "A LoRA checkpoint to load.")
    tokenizer_model: Path = _key("tokenizer_model", None, "A tokenizer model file.")
    tensorboard_dir: Path = _key("tensorboard_dir", None, "TensorBoard's event folder.")


class TrainingSection(PathKeys):
    """`backend_config.training`: the sizes of the layout and the run, the stage, LoRA."""

    tensor_model_parallel_size: Size = _key("tensor_model_parallel_size", 1, "Tensor parallel size (TP).")
    pipeline_model_parallel_size: Size = _key(
        "pipeline_model_parallel_size", 1, "Pipeline parallel size (PP)."
    )
    context_parallel_size: Size = _key("context_parallel_size", 1, "Context parallel size (CP).")
    micro_batch_size: Size = _key("micro_batch_size", 1, "Samples per device per micro-batch.")
    global_batch_size: Size = _key("global_batch_size", None, "Samples per step (default: mbs x DP).")
    seq_length: Size = _key("seq_length", SEQ_LENGTH, "Tokens per sample.")
    max_position_embeddings: Size = _key(
        "max_position_embeddings", None, "Position embeddings (default: the model's)."
    )
    num_layer_list: Annotated[list[int] | None, BeforeValidator(_layer_list)] = _key(
        "num_layer_list", None, "Layers per pipeline stage (`3,5`)."
    )
    sequence_parallel: Annotated[bool, BeforeValidator(bool)] = _key(
        "sequence_parallel", False, "Sequence parallelism (any true value turns it on)."
    )
    train_iters: Size = _key("train_iters", None, "Training steps.")
    stage: Annotated[str | None, BeforeValidator(_text)] = _key(
        "stage", None, "pt or sft, when the top-level `stage` is not set."
    )
    lora_r: Any = _key("lora_r", None, "LoRA rank: any true value (or lora-target-modules) makes a LoRA run.")
    lora_target_modules: Any = _key("lora_target_modules", None, "The modules LoRA adapts.")

    @property
    def lora(self) -> bool:
        """A LoRA run (its values are checked against the framework's own argument types)."""
        return bool(self.lora_r or self.lora_target_modules)


class PreprocessSection(PathKeys):
    """`backend_config.preprocess_data`."""

    workers: Annotated[int | None, BeforeValidator(_workers)] = _key(
        "workers", None, f"Preprocessing processes, 1 to {MAX_WORKERS} (the output is the same for each)."
    )
    handler_name: Annotated[str | None, BeforeValidator(_text)] = _key(
        "handler_name", None, "The preprocessing handler (default: the stage's)."
    )


class ConvertSection(PathKeys):
    """`backend_config.convert_ckpt_hf2mg` and `convert_ckpt_mg2hf`: their paths."""
