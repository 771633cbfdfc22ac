"""MindSpeed-LLM's two checkpoint converters: which one runs, and their flags for hf->mg and mg->hf.

v1 `convert_ckpt.py` (MindSpeed-LLM 1.x .. 26.1.0) and v2 `convert_ckpt_v2.py` (2.2.0 on; the only one on
master). The choice, in order:

1. `backend_config.converter: v1 | v2` when set;
2. else the installed MindSpeed-LLM: v2 when `convert_ckpt_v2.py` exists in its directory, else v1;
3. else (directory not found, dry run): the one the targeted version's example scripts run
   (`versions.Release.converter`: v1 for 2.1.0, v2 for 26.1.0).

Output locations differ: v1 mg->hf writes into `<save-dir>/mg2hf/` and reads the HF config (and, unless
`--load-hf-from-config`, the HF weights) from `<save-dir>`; v2 writes into `--save-dir` itself and copies
the config from `--hf-cfg-dir`. The backend evens this out (`mindspeed_llm/programs/v1_mg2hf_output.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.mindspeed_llm.programs import PROGRAMS_DIR
from ascendfactory.backends.mindspeed_llm.versions import Release
from ascendfactory.config.catalog import ModelArch

SCRIPTS = {"v1": "convert_ckpt.py", "v2": "convert_ckpt_v2.py"}
# stages the HF config, moves <save-dir>/mg2hf/ up; run by path in MindSpeed-LLM's environment
V1_OUTPUT_TOOL = os.path.join(PROGRAMS_DIR, "v1_mg2hf_output.py")
NAMES_KIND = {"v1": "convert_v1", "v2": "convert_v2"}
# --model-type-hf: the catalog holds the v2 spelling; v1 converts Qwen2/2.5 and Llama as llama2
# (with --add-qkv-bias for Qwen), per the MindSpeed-LLM 2.1.0 examples.
V1_MODEL_TYPE_HF = {"qwen25": "llama2", "llama2": "llama2", "qwen3": "qwen3", "glm4": "glm4"}
# MoE conversions, as the MoE examples run them (2.1.0 examples/mcore/qwen3_moe/
# ckpt_convert_qwen3_moe_hf2mcore.sh, deepseek2_lite/convert_ckpt_deepseek2_lite_hf2mcore.sh; 26.1.0's files):
# the expert parallel size and the grouped-GEMM layout of the training run, and for v1 the model's --spec.
# v1 --params-dtype takes bf16 / fp16; anything else leaves the model in fp32 (models.py).
_DTYPE_FLAGS = (("bf16", "bf16"), ("fp16", "fp16"))


@dataclass(frozen=True)
class ConverterChoice:
    version: str  # v1 | v2
    reason: str

    @property
    def script(self) -> str:
        return SCRIPTS[self.version]

    @property
    def names_kind(self) -> str:
        return NAMES_KIND[self.version]


def choose_converter(explicit: Any, mindspeed_dir: str | None, release: Release) -> ConverterChoice:
    """Rules 1-3 above. `explicit` must already be validated (None, 'v1' or 'v2'); `release`: the
    MindSpeed-LLM version the experiment targets."""
    if explicit in SCRIPTS:
        return ConverterChoice(explicit, f"backend_config.converter: {explicit}")
    if mindspeed_dir and os.path.isdir(mindspeed_dir):
        if os.path.isfile(os.path.join(mindspeed_dir, SCRIPTS["v2"])):
            return ConverterChoice("v2", f"{SCRIPTS['v2']} found in {mindspeed_dir}")
        return ConverterChoice("v1", f"{SCRIPTS['v2']} not in {mindspeed_dir} (MindSpeed-LLM <= 2.1.0)")
    return ConverterChoice(
        release.converter,
        f"MindSpeed-LLM directory not found: {SCRIPTS[release.converter]}, which MindSpeed-LLM "
        f"{release.version}'s example scripts run; set backend_config.converter to choose",
    )


# v1 --model-type-hf values whose model is built from 2.1.0's deepseek_spec.py (multi-head latent attention)
V1_MLA_FAMILIES = frozenset({"deepseek2", "deepseek2-lite"})


def v1_model_type(arch: ModelArch) -> str:
    return V1_MODEL_TYPE_HF.get(arch.model_type_hf, arch.model_type_hf)


def _v1_qkv_bias(arch: ModelArch) -> bool:
    return arch.qkv_bias and v1_model_type(arch) == "llama2"


def _tokenizer_model(model_dir: str) -> str:
    """v1 requires --tokenizer-model: tokenizer.json (as in the examples), else a lone tokenizer.model."""
    json_path = os.path.join(model_dir, "tokenizer.json")
    sp_path = os.path.join(model_dir, "tokenizer.model")
    return sp_path if not os.path.exists(json_path) and os.path.exists(sp_path) else json_path


def params_dtype(training: dict[str, Any]) -> str:
    return next((name for key, name in _DTYPE_FLAGS if training.get(key)), "fp32")


def moe_options(version: str, arch: ModelArch, training: dict[str, Any], *, save: bool) -> dict[str, Any]:
    """The converter flags of a MoE model ({} for a dense one): hf->mg writes the training run's expert
    parallel size (`save`); both directions name the grouped-GEMM layout the training run uses (the plan fills
    `moe-grouped-gemm` for MoE models, `model_flags.moe_flags`); v1 builds the model from its --spec."""
    if not arch.moe:
        return {}
    from ascendfactory.backends.mindspeed_llm.model_flags import moe_flags

    out: dict[str, Any] = {}
    if version == "v1":
        out["spec"] = moe_flags(arch)["spec"]
    if save:
        out["target-expert-parallel-size"] = training.get("expert-model-parallel-size") or 1
    elif version == "v1":
        out["target-expert-parallel-size"] = 1
        # v1 mg->hf builds its Megatron model in --params-dtype, fp16 unless given (2.1.0 loader_mg.py
        # add_arguments), and Megatron core_r0.8.0's validate_args refuses fp16 with the checkpoint's expert
        # parallelism ("Expert parallelism is not supported with fp16 training", arguments.py); the MoE
        # mcore2hf examples pass the training dtype (ckpt_convert_qwen3_moe_mcore2hf.sh: --params-dtype bf16)
        out["params-dtype"] = params_dtype(training)
    out["moe-grouped-gemm"] = bool(training.get("moe-grouped-gemm", True))
    return out


def hf2mg_options(
    version: str,
    *,
    arch: ModelArch,
    model_dir: str,
    save_dir: str,
    tp: int,
    pp: int,
    num_layer_list: list[int] | None,
    training: dict[str, Any],
) -> dict[str, Any]:
    layers = ",".join(map(str, num_layer_list)) if num_layer_list else None
    if version == "v1":
        return {
            "use-mcore-models": True,
            "model-type": "GPT",
            "load-model-type": "hf",
            "save-model-type": "mg",
            "target-tensor-parallel-size": tp,
            "target-pipeline-parallel-size": pp,
            "num-layer-list": layers,
            "add-qkv-bias": _v1_qkv_bias(arch),
            "load-dir": model_dir,
            "save-dir": save_dir,
            "tokenizer-model": _tokenizer_model(model_dir),
            "model-type-hf": v1_model_type(arch),
            "params-dtype": params_dtype(training),
            **moe_options(version, arch, training, save=True),
        }
    return {
        "load-model-type": "hf",
        "save-model-type": "mg",
        "target-tensor-parallel-size": tp,
        "target-pipeline-parallel-size": pp,
        "num-layer-list": layers,
        "load-dir": model_dir,
        "save-dir": save_dir,
        "model-type-hf": arch.model_type_hf,
        **moe_options(version, arch, training, save=True),
    }


def mg2hf_options(
    version: str,
    *,
    arch: ModelArch,
    load_dir: str,
    save_dir: str,
    model_dir: str,
    lora: dict[str, Any] | None,
    training: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`lora`: None, or {lora-load: <LoRA training output>, lora-r, lora-alpha, lora-target-modules}.
    `training`: the training section (a MoE model's grouped-GEMM layout).

    v1 `save_dir` must hold the HF config files (prepared by the plan); `--load-hf-from-config` builds the
    HF model from that config instead of loading the original weights.
    """
    lora = lora or {}
    lora_shape = {k: lora.get(k) for k in ("lora-r", "lora-alpha", "lora-target-modules")}
    if version == "v1":
        return {
            "use-mcore-models": True,
            "model-type": "GPT",
            "model-type-hf": v1_model_type(arch),
            "load-model-type": "mg",
            "save-model-type": "hf",
            "target-tensor-parallel-size": 1,
            "target-pipeline-parallel-size": 1,
            "add-qkv-bias": _v1_qkv_bias(arch),
            **lora_shape,
            "load-dir": load_dir,
            "lora-load": lora.get("lora-load"),
            "save-dir": save_dir,
            "load-hf-from-config": True,
            **moe_options(version, arch, training or {}, save=False),
        }
    # the order of v26.1.0's examples/mcore/qwen25/ckpt_convert_qwen25_mcore2hf{,_lora}.sh
    return {
        "load-model-type": "mg",
        "save-model-type": "hf",
        **lora_shape,
        "load-dir": load_dir,
        "lora-load": lora.get("lora-load"),
        "save-dir": save_dir,
        "hf-cfg-dir": model_dir,
        "model-type-hf": arch.model_type_hf,
        **moe_options(version, arch, training or {}, save=False),
    }


# MindSpeed-LLM 26.1.0's convert_ckpt_v2.py mg->hf (mindspeed_llm/tasks/checkpoint/convert_mg2hf.py, the
# `unpack` branch) splits the fused QKV per query group only when configs/checkpoint/model_cfg.json gives
# the family `qkv_split: per_group`, while its hf->mg (convert_hf2mg.py `qkv_concatenate_weight`) always
# writes it per group: for these catalog families with more than one query group, its own hf->mg->hf round
# trip returns scrambled q/k/v projections (tests/integration/test_convert_matches_mindspeed_v2.py shows it,
# and that `python -m ascendfactory.engine.convert` returns the original tensors). qwen25 has per_group.
V2_MG2HF_UNGROUPED_QKV = frozenset({"qwen3", "qwen3-moe", "llama2", "glm4"})


def v2_mg2hf_warning(arch: ModelArch) -> str | None:
    """Why convert_ckpt_v2.py's mg->hf of `arch` writes wrong attention weights, or None."""
    if arch.model_type_hf not in V2_MG2HF_UNGROUPED_QKV or arch.kv_heads <= 1:
        return None
    return (
        f"MindSpeed-LLM 26.1.0's convert_ckpt_v2.py mg->hf splits the fused QKV of model-type-hf "
        f"{arch.model_type_hf} as [Q; K; V] while its hf->mg writes it per query group (model_cfg.json has "
        "no qkv_split: per_group for it): the HF weights it writes back have scrambled q/k/v projections. "
        "Convert the checkpoints back with `python -m ascendfactory.engine.convert` (the same flags: its "
        "hf->mg is identical to convert_ckpt_v2.py's and its mg->hf returns the original tensors)"
    )


def mg2hf_command(
    version: str, *, python: str, converter: list[str], hf_dir: str, out_dir: str
) -> tuple[list[str], list[str]]:
    """(argv, notes) of an mg->hf conversion whose HF model lands in `out_dir` with either converter.

    `converter` is the converter's own argv (`python convert_ckpt.py ...`). v1 reads the HF config from
    `--save-dir` and writes `<save-dir>/mg2hf/`: it runs under `V1_OUTPUT_TOOL`, which stages the config
    first and moves the weights up afterwards.
    """
    notes = [f"converter {version}"]
    if version != "v1":
        return converter, notes
    notes.append(
        "v1 writes <save-dir>/mg2hf/: the HF config is staged into save-dir first and the weights are "
        "moved up afterwards, so save-dir holds the HF model"
    )
    argv = [
        python,
        V1_OUTPUT_TOOL,
        "--stage-hf-config",
        hf_dir,
        "--collect-mg2hf",
        out_dir,
        "--",
        *converter,
    ]
    return argv, notes
