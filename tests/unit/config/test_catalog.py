"""Model facts from an HF config.json, VLMs included (LLM fields at the top or in text_config; ViT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascendfactory.config.catalog import from_catalog, from_hf_dir

VISION = {"depth": 32, "hidden_size": 1280, "num_heads": 16}
TEXT = {"num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4}


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "qwen2_5_vl", **TEXT, "vision_config": VISION},  # transformers 4.x layout
        {"model_type": "qwen2_5_vl", "text_config": TEXT, "vision_config": VISION},  # text_config only
        {"model_type": "qwen2_5_vl", **{k: None for k in TEXT}, "text_config": TEXT, "vision_config": VISION},
    ],
    ids=["top-level", "text_config", "nulls-at-top"],
)
def test_vlm_config_gives_llm_and_vision_numbers(tmp_path: Path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    arch = from_hf_dir(tmp_path, "m")
    assert arch is not None
    assert (arch.layers, arch.hidden, arch.heads, arch.kv_heads) == (28, 3584, 28, 4)
    assert (arch.vit_layers, arch.vit_heads) == (32, 16)


def test_llm_config_has_no_vision_numbers(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", **TEXT}))
    arch = from_hf_dir(tmp_path)
    assert arch is not None and arch.vit_layers is None and arch.vit_heads is None


def test_catalog_qwen25_vl_matches_mindspeed_mm_model_json():
    """The 7B numbers of MindSpeed-MM's examples/qwen2.5vl/model_7b.json (text_decoder, vision_encoder)."""
    arch = from_catalog("qwen2.5-vl-7b")
    assert (arch.layers, arch.hidden, arch.ffn, arch.heads, arch.kv_heads, arch.vocab) == (
        28,
        3584,
        18944,
        28,
        4,
        152064,
    )
    assert (arch.vit_layers, arch.vit_heads) == (32, 16)
