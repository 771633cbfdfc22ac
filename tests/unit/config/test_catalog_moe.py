"""The mixture-of-experts models of the catalog: their config.json facts, read the same from a config.json,
and the parameter counts the model cards publish."""

from __future__ import annotations

import json

import pytest

from ascendfactory.config.catalog import from_catalog, from_hf_dir
from ascendfactory.memory.shape import shape_from_arch

MOE = ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v2-lite-16b", "deepseek-v3-671b", "deepseek-r1-671b")


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [  # the model cards: "30.5B in total and 3.3B activated", 235B / 22B, 15.7B (V2-Lite), 671B / 37B
        ("qwen3-30b-a3b", 30.5e9, 3.3e9),
        ("qwen3-235b-a22b", 235e9, 22e9),
        ("deepseek-v2-lite-16b", 15.7e9, None),
        ("deepseek-v3-671b", 671e9, 37e9),
    ],
)
def test_parameter_counts_match_the_model_cards(name, total, active):
    shape = shape_from_arch(from_catalog(name))
    assert shape.params(divisible_by=1) == pytest.approx(total, rel=0.01)
    if active:
        assert shape.active_params(divisible_by=1) == pytest.approx(active, rel=0.03)
    assert shape.active_params() < shape.params() / 5  # the point of a MoE


def test_facts_of_each_family():
    q = from_catalog("qwen3-30b-a3b")
    facts = (q.experts, q.topk, q.moe_ffn, q.shared_experts, q.dense_layers, q.mla)
    assert facts == (128, 8, 768, 0, 0, False)
    assert q.family == "qwen3-moe" and q.model_type_hf == "qwen3-moe" and q.norm_topk
    lite = from_catalog("deepseek-v2-lite-16b")
    assert (lite.experts, lite.topk, lite.shared_experts, lite.dense_layers) == (64, 6, 2, 1)
    assert (lite.q_lora, lite.kv_lora, lite.qk_nope, lite.qk_rope, lite.v_head) == (None, 512, 128, 64, 128)
    assert lite.rope_scaling and lite.rope_scaling["mscale"] == 0.707 and lite.moe_layers == 26
    v3, r1 = from_catalog("deepseek-v3-671b"), from_catalog("deepseek-r1-671b")
    assert {**v3.__dict__, "name": ""} == {**r1.__dict__, "name": ""}  # R1: V3's config.json
    assert (v3.q_lora, v3.score, v3.groups, v3.group_topk, v3.route_scale, v3.mtp_layers) == (
        1536,
        "sigmoid",
        8,
        4,
        2.5,
        1,
    )


@pytest.mark.parametrize("family", ["qwen3-moe", "deepseek2-lite", "deepseek3"])
def test_a_config_json_gives_the_same_fields(tmp_path, family):
    from transformers import AutoConfig

    from tests.support.tiny_model import hub_config_keys, tiny_config

    tiny_config(family).save_pretrained(tmp_path)
    hub_config_keys(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    arch = from_hf_dir(tmp_path)
    assert arch is not None and arch.family == family and arch.experts == 4 and arch.topk == 2
    assert arch.moe_ffn == cfg["moe_intermediate_size"]
    if family != "qwen3-moe":
        assert (arch.kv_lora, arch.qk_nope, arch.qk_rope, arch.v_head) == (32, 16, 8, 16)
        assert arch.shared_experts == 2 and arch.dense_layers == 1
    else:  # transformers 5 writes num_local_experts; the Hub's num_experts is read too
        del cfg["num_experts"]
        (tmp_path / "config.json").write_text(json.dumps(cfg))
        assert from_hf_dir(tmp_path).experts == 4  # type: ignore[union-attr]
    assert AutoConfig.from_pretrained(tmp_path).model_type == cfg["model_type"]


def test_every_moe_model_is_listed_with_its_experts(capsys):
    from ascendfactory.cli.app import main

    assert main(["models", "--json"]) == 0
    rows = {r["model"]: r for r in json.loads(capsys.readouterr().out)}
    for name in MOE:
        assert rows[name]["experts"] == from_catalog(name).experts and rows[name]["topk"]
    assert "experts" not in rows["qwen2.5-7b"]


@pytest.mark.parametrize(
    ("name", "family"), [("tiny-qwen3-moe", "qwen3_moe"), ("tiny-deepseek2-lite", "deepseek_v2_lite")]
)
def test_the_tiny_moe_demos_are_in_the_catalog_as_the_demo_builder_writes_them(tmp_path, name, family):
    """The MoE quickstarts name them: they resolve without the demo folder, with the facts its config.json
    gives when it is there (the config `make_demo_model` saves; its vocabulary is the demo tokenizer's, as
    tiny-demo's)."""
    from ascendfactory.engine.demo import _config, _normalize_json

    _config(family, from_catalog("tiny-demo").vocab, bos_id=0, eos_id=2, pad_id=0).save_pretrained(tmp_path)
    _normalize_json(tmp_path)
    built = from_hf_dir(tmp_path, name)
    assert built is not None
    assert {**built.__dict__, "source": ""} == {**from_catalog(name).__dict__, "source": ""}
