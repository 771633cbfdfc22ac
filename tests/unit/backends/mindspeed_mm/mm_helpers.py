"""Stand-ins for what a mindspeed-mm plan looks at: a Qwen2.5-VL HF directory, a MindSpeed-MM checkout."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from ascendfactory.plan import Plan

# Qwen/Qwen2.5-VL-7B-Instruct config.json (Hugging Face hub): the fields the plan reads.
QWEN25_VL_7B: dict[str, Any] = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "model_type": "qwen2_5_vl",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 128000,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "vision_config": {"depth": 32, "hidden_size": 1280, "num_heads": 16, "out_hidden_size": 3584},
}


def make_hf_dir(
    root: Path, config: dict[str, Any] | None = None, *, weights: bool = True, index: bool = True
) -> Path:
    """An HF model directory with what mm-convert checks (config.json, *.safetensors) and the index."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config or QWEN25_VL_7B), encoding="utf-8")
    if weights:
        (root / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 8)
    if index:
        (root / "model.safetensors.index.json").write_text('{"weight_map": {}}', encoding="utf-8")
    return root


def make_mm_checkout(root: Path, generation: str = "2.1.0", *, megatron_minor: int | None = None) -> Path:
    """An empty-file stand-in for a MindSpeed-MM checkout of `generation` with a copied megatron/."""
    for name in ("pretrain_vlm.py", "checkpoint/convert_cli.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("", encoding="utf-8")
    if generation == "master":
        marker = root / "mindspeed_mm" / "configs" / "validate_params.json"
        marker.parent.mkdir(parents=True)
        marker.write_text("{}", encoding="utf-8")
    minor = megatron_minor if megatron_minor is not None else (8 if generation == "2.1.0" else 12)
    info = root / "megatron" / "core" / "package_info.py"
    info.parent.mkdir(parents=True)
    info.write_text(f"MAJOR = 0\nMINOR = {minor}\nPATCH = 0\n", encoding="utf-8")
    return root


BASE: dict[str, Any] = {
    "backend": "mindspeed-mm",
    "af_model_name": "qwen2.5-vl-7b",
    "exp_name": "t",
    "af_output_dir": "OUT",
    "env": {"NPUS_PER_NODE": 8},
    "backend_config": {
        "data": {
            "dataset_param": {
                "preprocess_parameters": {"model_name_or_path": "HF"},
                "basic_parameters": {"dataset_dir": "DATA", "dataset": "DATA/train.json"},
            }
        },
        "training": {
            "tensor-model-parallel-size": 1,
            "pipeline-model-parallel-size": 4,
            "global-batch-size": 16,
        },
    },
}


def merge(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    for k, v in src.items():
        nested = isinstance(v, dict) and v and isinstance(dst.get(k), dict)
        dst[k] = merge(dst[k], v) if nested else v
    return dst


def tree_for(tmp_path: Path, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """BASE with `changes` merged in; the placeholders OUT, HF and DATA become paths under tmp_path."""
    tree = merge(copy.deepcopy(BASE), copy.deepcopy(changes or {}))
    text = json.dumps(tree)
    for name in ("OUT", "HF", "DATA"):
        text = text.replace(f'"{name}', f'"{tmp_path / name}')
    return json.loads(text)


def plan_for(
    tmp_path: Path,
    changes: dict[str, Any] | None = None,
    *,
    dry_run: bool = True,
    environ: dict[str, str] | None = None,
) -> Plan:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree_for(tmp_path, changes)), encoding="utf-8")
    return make_plan(
        load_experiment(path), dry_run=dry_run, environ=dict(os.environ if environ is None else environ)
    )


def problems_of(tmp_path: Path, changes: dict[str, Any], **kw: Any) -> list[tuple[str, str]]:
    """(key, 'message | fix') of every problem the plan reports."""
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, changes, **kw)
    return [(p.key, f"{p.message} | {p.fix}") for p in e.value.problems]


def real_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generation: str = "2.1.0") -> dict[str, str]:
    """What a real run needs here: a checkout (AF_MINDSPEED_MM_DIR), the toolkit sourced, the HF directory
    and the dataset. Returns the environment to plan with."""
    checkout = make_mm_checkout(tmp_path / "MindSpeed-MM", generation)
    make_hf_dir(tmp_path / "HF")
    (tmp_path / "DATA").mkdir()
    (tmp_path / "DATA" / "train.json").write_text("[]", encoding="utf-8")
    monkeypatch.setenv("AF_MINDSPEED_MM_DIR", str(checkout))
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest")
    return dict(os.environ)
