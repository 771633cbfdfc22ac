"""Checks of the files a MindSpeed-MM run reads: the HF model directory, the dataset files, the environment.

On a real run what is missing is a Problem; on a dry run a warning (the cluster's paths may not exist here).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from typing import Any

from ascendfactory.backends.base import PlanContext
from ascendfactory.backends.mindspeed_mm.read import DATASET_DIR_KEY, MODEL_DIR_KEY, get
from ascendfactory.checkpoints.megatron import TRACKER
from ascendfactory.errors import Problem

INDEX = "model.safetensors.index.json"
ENV_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"


def hf_dir_problems(key: str, hf_dir: str, *, needs_index: bool) -> list[Problem]:
    """A problem (named `key`) for each thing `hf_dir` lacks (mm-convert's HfConfig checks, plus the index
    mm_to_hf lays the output out by, plus the tracker of a converted directory given by mistake)."""
    if not os.path.isdir(hf_dir):
        return [
            Problem(key, f"directory {hf_dir} does not exist", "point it at the Hugging Face model directory")
        ]
    out: list[Problem] = []
    if os.path.exists(os.path.join(hf_dir, TRACKER)) or os.path.isdir(os.path.join(hf_dir, "release")):
        out.append(
            Problem(
                key,
                f"{hf_dir} is a converted MindSpeed-MM checkpoint ({TRACKER} / release/), not the HF model",
                "point it at the original Hugging Face directory (the converted one is "
                "convert_ckpt_hf2mg.cfg.mm_dir)",
            )
        )
        return out
    if not os.path.isfile(os.path.join(hf_dir, "config.json")):
        out.append(
            Problem(
                key, f"No config.json in {hf_dir} (mm-convert's check)", "use the complete HF model directory"
            )
        )
    if not glob.glob(os.path.join(hf_dir, "*.safetensors")):
        out.append(
            Problem(
                key,
                f"No *.safetensors files found in {hf_dir} (mm-convert's check)",
                "download the weights into it",
            )
        )
    if needs_index and not os.path.isfile(os.path.join(hf_dir, INDEX)):
        out.append(
            Problem(
                key,
                f"no {INDEX} in {hf_dir}: mm_to_hf lays the converted weights out by it "
                f"('safetensors.index.json not in {hf_dir}')",
                "use the HF directory as downloaded (with its index), or set convert_ckpt_mg2hf: null",
            )
        )
    return out


def input_findings(
    ctx: PlanContext,
    *,
    data: Mapping[str, Any],
    training: Mapping[str, Any],
    hf_dir: str,
    hf2mg_hf_dir: Any,
    needs_index: bool,
) -> list[Problem]:
    """A problem for every input the run cannot read."""
    found = hf_dir_problems("backend_config." + MODEL_DIR_KEY, hf_dir, needs_index=needs_index)
    tokenizer = training.get("tokenizer-name-or-path")
    if isinstance(tokenizer, str) and tokenizer and not os.path.exists(os.path.expanduser(tokenizer)):
        # MindSpeed 077c4137 mindspeed/arguments.py:521 (validate_args_wrapper): '... not exists!'
        found.append(
            Problem(
                "backend_config.training.tokenizer-name-or-path",
                f"{tokenizer} does not exist (MindSpeed stops at start-up: '{tokenizer} not exists!')",
                "point it at the tokenizer directory, or remove it (the HF directory has the processor)",
            )
        )
    if isinstance(hf2mg_hf_dir, str) and os.path.abspath(hf2mg_hf_dir) != hf_dir:
        found += hf_dir_problems(
            "backend_config.convert_ckpt_hf2mg.cfg.hf_config.hf_dir",
            os.path.abspath(hf2mg_hf_dir),
            needs_index=False,
        )
    dataset_dir = get(data, DATASET_DIR_KEY.split(".", 1)[1])
    if isinstance(dataset_dir, str) and not os.path.isdir(dataset_dir):
        found.append(
            Problem(
                "backend_config." + DATASET_DIR_KEY,
                f"directory {dataset_dir} does not exist",
                "point it at the root the dataset's relative image/video paths are joined to",
            )
        )
    dataset = get(data, "dataset_param.basic_parameters.dataset")
    for path in str(dataset or "").split(","):
        if path and not os.path.exists(path):
            found.append(
                Problem(
                    "backend_config.data.dataset_param.basic_parameters.dataset",
                    f"{path} does not exist",
                    "point it at the json dataset (several: comma-separated, no spaces)",
                )
            )
    return found


def environment_problems(ctx: PlanContext, *, tp: int, cp: int, generation: str) -> list[Problem]:
    """MindSpeed-MM (master) requires CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP; the plan exports it,
    unless the experiment's env sets another value."""
    value = ctx.config.env.extra_vars().get(ENV_CONNECTIONS)
    if value is None or value == "1" or (tp == 1 and cp == 1):
        return []
    quoted = (
        " ('Using tensor model parallelism or context parallelism require setting the environment variable "
        "CUDA_DEVICE_MAX_CONNECTIONS to 1')"
        if generation == "master"
        else ""
    )
    return [
        ctx.problem(
            f"env.{ENV_CONNECTIONS}",
            f"is {value}, but TP={tp} / CP={cp} needs 1{quoted}",
            fix=f"remove env.{ENV_CONNECTIONS} (the plan exports 1, as MindSpeed-MM's scripts do)",
        )
    ]
