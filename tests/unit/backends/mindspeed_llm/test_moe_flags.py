"""The MoE and MLA training flags of the catalog's MoE models, in each MindSpeed-LLM version's spelling, and
the converter options the plan hands MindSpeed-LLM's converters (as its examples: test_moe_golden.py)."""

from __future__ import annotations

from ascendfactory.backends.common.megatron.moe_flags import moe_flags
from ascendfactory.backends.mindspeed_llm.converters import hf2mg_options, mg2hf_options
from ascendfactory.backends.mindspeed_llm.model_flags import architecture_flags
from ascendfactory.config.catalog import from_catalog
from tests.unit.backends.mindspeed_llm.test_mindspeed_golden import GOLDEN, plan_json, site, step

__all__ = ["site"]  # the golden tests' fixture: a fake checkout, run from the repository root


def test_dense_models_get_no_moe_flags():
    assert moe_flags(from_catalog("qwen2.5-7b")) == {}
    dense = architecture_flags(from_catalog("qwen3-8b"), tp=1, pp=1, seq_length=4096)
    assert not any(k.startswith(("moe-", "num-experts", "spec")) for k in dense)


def test_qwen3_moe_flags_by_version():
    arch = from_catalog("qwen3-30b-a3b")
    old = architecture_flags(arch, tp=1, pp=1, seq_length=4096)
    new = architecture_flags(arch, tp=1, pp=1, seq_length=4096, version="26.1.0")
    for flags in (old, new):
        assert flags["num-experts"] == 128 and flags["moe-router-topk"] == 8 and flags["norm-topk-prob"]
        assert flags["spec"] == ["mindspeed_llm.tasks.models.spec.qwen3_spec", "layer_spec"]
        assert flags["qk-layernorm"] and flags["kv-channels"] == 128
    assert old["moe-intermediate-size"] == 768 and old["moe-token-dispatcher-type"] == "alltoall"
    assert "moe-ffn-hidden-size" not in old and "first-k-dense-replace" not in old
    assert new["moe-ffn-hidden-size"] == 768 and new["moe-token-dispatcher-type"] == "alltoall_seq"
    assert (new["first-k-dense-replace"], new["moe-layer-freq"]) == (-1, -1)


def test_deepseek_flags_by_version():
    lite = from_catalog("deepseek-v2-lite-16b")
    old = moe_flags(lite, "2.1.0")
    assert (
        old["multi-head-latent-attention"]
        and old["qk-nope-head-dim"] == 128
        and old["qk-rope-head-dim"] == 64
    )
    assert (old["first-k-dense-replace"], old["n-shared-experts"], old["topk-group"]) == (1, 2, 1)
    assert old["rope-scaling-beta-fast"] == 32 and old["rope-scaling-type"] == "yarn"
    assert old["q-lora-rank"] is None and old["n-group"] is None and not old["norm-topk-prob"]
    v3 = moe_flags(from_catalog("deepseek-v3-671b"), "26.1.0")
    assert v3["multi-latent-attention"] and v3["qk-head-dim"] == 128 and v3["qk-pos-emb-head-dim"] == 64
    assert (
        v3["moe-router-num-groups"],
        v3["moe-router-group-topk"],
        v3["moe-router-topk-scaling-factor"],
    ) == (
        8,
        4,
        2.5,
    )
    assert v3["moe-router-score-function"] == "sigmoid" and v3["moe-router-enable-expert-bias"]
    assert v3["beta-fast"] == 32 and v3["q-lora-rank"] == 1536
    flags = architecture_flags(from_catalog("deepseek-v3-671b"), tp=1, pp=1, seq_length=4096)
    assert flags["kv-channels"] is None and flags["qk-layernorm"] is True  # MLA: its own head dims


def test_converter_options_carry_ep_and_the_expert_layout():
    arch = from_catalog("deepseek-v2-lite-16b")
    common = dict(arch=arch, model_dir="/hf", save_dir="/mg", tp=1, pp=1, num_layer_list=None)
    v2 = hf2mg_options("v2", **common, training={"expert-model-parallel-size": 8})
    assert (v2["target-expert-parallel-size"], v2["moe-grouped-gemm"], v2["model-type-hf"]) == (
        8,
        True,
        "deepseek2-lite",
    )
    assert "spec" not in v2
    v1 = hf2mg_options("v1", **common, training={"moe-grouped-gemm": False})
    assert v1["spec"][0].endswith("deepseek_spec") and v1["target-expert-parallel-size"] == 1
    assert v1["moe-grouped-gemm"] is False
    back = mg2hf_options(
        "v2", arch=arch, load_dir="/s", save_dir="/o", model_dir="/hf", lora=None, training={}
    )
    assert back["moe-grouped-gemm"] is True and "target-expert-parallel-size" not in back
    dense = hf2mg_options("v2", **{**common, "arch": from_catalog("qwen2.5-7b")}, training={})
    assert "moe-grouped-gemm" not in dense and "target-expert-parallel-size" not in dense


def test_msrl_model_entry_carries_the_moe_keys():
    from ascendfactory.backends.common.mindspeed_rl_experiment.read import model_entry

    entry = model_entry(from_catalog("qwen3-30b-a3b"))
    assert entry["num_experts"] == 128 and entry["moe_ffn_hidden_size"] == 768 and entry["qk_layernorm"]
    assert entry["moe_token_dispatcher_type"] == "alltoall_seq"
    assert "num_experts" not in model_entry(from_catalog("qwen2.5-7b"))


def test_one_router_group_is_a_plain_top_k_at_26_1_0(site, tmp_path):
    """DeepSeek-V2-Lite (n_group 1, topk_group 1): 2.1.0's examples pass --topk-group 1 alone (read only by
    group_limited_greedy); core_v0.12.1 refuses --moe-router-group-topk without --moe-router-num-groups, so
    26.1.0 gets neither, and its plan of the model is not refused."""
    lite = from_catalog("deepseek-v2-lite-16b")
    assert moe_flags(lite, "2.1.0")["topk-group"] == 1
    new = {k: v for k, v in moe_flags(lite, "26.1.0").items() if v is not None}
    assert "moe-router-group-topk" not in new and "moe-router-num-groups" not in new
    text = (GOLDEN / "deepseek-v2-lite-16b-tune-full-26.1.0.yaml").read_text()
    kept = [line for line in text.splitlines() if "moe-router-group-topk" not in line]
    kept = [line for line in kept if "moe-router-num-groups" not in line]
    assert len(kept) == len(text.splitlines()) - 2
    cfg = tmp_path / "lite.yaml"
    cfg.write_text("\n".join(kept) + "\n")
    train = step(plan_json(cfg), "train")["argv"]
    assert "--moe-router-group-topk" not in train and "--multi-latent-attention" in train


def test_yarn_models_get_the_factor_times_the_original_length_as_max_positions():
    """2.1.0's _validate_yarn: max-position-embeddings / rope-scaling-original-max-position-embeddings must
    equal rope-scaling-factor (the DeepSeek examples pass 163840 = 40 x 4096); a dense model keeps the
    sequence length."""
    for version in ("2.1.0", "26.1.0"):
        lite = architecture_flags(
            from_catalog("deepseek-v2-lite-16b"), tp=1, pp=1, seq_length=4096, version=version
        )
        assert (lite["max-position-embeddings"], lite["seq-length"]) == (163840, 4096)
    dense = architecture_flags(from_catalog("qwen3-8b"), tp=1, pp=1, seq_length=4096)
    assert dense["max-position-embeddings"] == 4096
