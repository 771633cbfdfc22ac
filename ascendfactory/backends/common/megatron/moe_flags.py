"""The mixture-of-experts and multi-head latent attention flags of a MindSpeed-LLM training run (Qwen3-MoE,
DeepSeek-V2/V3), from the model's HF config facts, in the spelling of the MindSpeed-LLM version that runs
them. Shared by the `mindspeed-llm` backend (`mindspeed_llm/model_flags.py`) and MindSpeed-RL's model entry
(`common/mindspeed_rl_experiment/read.py`, whose actor is MindSpeed-LLM 26.x's Megatron model: MindSpeed-RL
2.3.0's configs/model/qwen3_30b_a3b.yaml and deepseekv3_671b.yaml use these names)."""

from __future__ import annotations

from typing import Any

from ascendfactory.config.catalog import ModelArch


def _number(value: float) -> float | int:
    """40.0 -> 40 (as the example scripts write them); other floats unchanged."""
    return int(value) if float(value).is_integer() else value


# The MoE / MLA flag names that differ between the versions this backend plans for, read from each version's
# examples and argument lists (keys/training_<version>.txt): 2.1.0 examples/mcore/qwen3_moe/
# tune_qwen3_30b_a3b_4K_full_ptd.sh, deepseek2_lite/tune_deepseek2_lite_16b_full_ptd.sh and deepseek3/
# pretrain_deepseek3_671b_4k_ptd.sh; 26.1.0's files of the same names (Megatron core 0.12 spellings).
SPELLING: dict[str, dict[str, str]] = {
    "2.1.0": {
        "expert-ffn": "moe-intermediate-size",
        "mla": "multi-head-latent-attention",
        "qk-nope": "qk-nope-head-dim",
        "qk-rope": "qk-rope-head-dim",
        "beta-fast": "rope-scaling-beta-fast",
        "beta-slow": "rope-scaling-beta-slow",
        "groups": "n-group",
        "group-topk": "topk-group",
        "route-scale": "routed-scaling-factor",
        "dispatcher": "alltoall",
    },
    "26.1.0": {
        "expert-ffn": "moe-ffn-hidden-size",
        "mla": "multi-latent-attention",
        "qk-nope": "qk-head-dim",
        "qk-rope": "qk-pos-emb-head-dim",
        "beta-fast": "beta-fast",
        "beta-slow": "beta-slow",
        "groups": "moe-router-num-groups",
        "group-topk": "moe-router-group-topk",
        "route-scale": "moe-router-topk-scaling-factor",
        "dispatcher": "alltoall_seq",
    },
}
# --spec of each MoE family (every MoE example passes it; Megatron's own MoE spec is not used)
SPECS = {
    "qwen3_moe": "mindspeed_llm.tasks.models.spec.qwen3_spec",
    "deepseek": "mindspeed_llm.tasks.models.spec.deepseek_spec",
}
# --moe-router-load-balancing-type of each family's examples (same files): Qwen3-MoE aux_loss; DeepSeek-V2
# pai_megatron_aux_loss (the pretrain scripts of both versions); DeepSeek-V3's aux-loss-free routing
# (sigmoid scores and an expert bias): 2.1.0 noaux_tc, 26.1.0 none.
ROUTER_BALANCING = {
    "2.1.0": {"qwen3_moe": "aux_loss", "deepseek_v2": "pai_megatron_aux_loss", "deepseek_v3": "noaux_tc"},
    "26.1.0": {"qwen3_moe": "aux_loss", "deepseek_v2": "pai_megatron_aux_loss", "deepseek_v3": "none"},
}


def moe_flags(arch: ModelArch, version: str = "2.1.0") -> dict[str, Any]:
    """The flags of a mixture-of-experts model, from its HF config facts (the catalog or config.json), spelt
    as `version` spells them; {} for a dense model. Also the expert execution every MoE example passes
    (grouped GEMM, asynchronous permutation, the all-to-all dispatcher, which MindSpeed-LLM requires with
    variable-seq-lengths): plan defaults, a user's value wins. Not filled: the expert parallel size (the
    layout's), multi-token prediction (`mtp-num-layers`: the converters this plan runs leave DeepSeek-V3's
    MTP layer out) and the examples' tuning switches."""
    if not arch.moe:
        return {}
    names = SPELLING.get(version, SPELLING["2.1.0"])
    deepseek = arch.hf_model_type.startswith("deepseek")
    flags: dict[str, Any] = {
        "spec": [SPECS["deepseek" if deepseek else "qwen3_moe"], "layer_spec"],
        "num-experts": arch.experts,
        "moe-router-topk": arch.topk,
        names["expert-ffn"]: arch.moe_ffn,
        "norm-topk-prob": arch.norm_topk,
        "moe-router-load-balancing-type": ROUTER_BALANCING.get(version, ROUTER_BALANCING["2.1.0"])[
            arch.hf_model_type
        ],
        "moe-aux-loss-coeff": arch.aux_loss or None,
        "moe-grouped-gemm": True,
        "moe-permutation-async-comm": True,
        "moe-token-dispatcher-type": names["dispatcher"],
    }
    if not deepseek:
        if version != "2.1.0":  # 26.1.0's Qwen3-MoE examples: every layer a MoE layer, said explicitly
            flags |= {"moe-layer-freq": -1, "first-k-dense-replace": -1}
        return flags
    grouped = bool(arch.groups and arch.groups > 1)
    flags |= {
        "first-k-dense-replace": arch.dense_layers,
        "moe-layer-freq": 1,
        "n-shared-experts": arch.shared_experts or None,
        names["mla"]: arch.mla,
        "q-lora-rank": arch.q_lora,
        "kv-lora-rank": arch.kv_lora,
        names["qk-nope"]: arch.qk_nope,
        names["qk-rope"]: arch.qk_rope,
        "v-head-dim": arch.v_head,
        "qk-layernorm": True,  # the latent norms (q_a_layernorm, kv_a_layernorm)
        names["groups"]: arch.groups if grouped else None,
        # 2.1.0 reads --topk-group only for group_limited_greedy (its examples pass it alone); core_v0.12.1's
        # TransformerConfig.__post_init__ refuses --moe-router-group-topk without --moe-router-num-groups, and
        # one group is a plain top-k (DeepSeek-V2-Lite's n_group 1)
        names["group-topk"]: arch.group_topk if grouped or version == "2.1.0" else None,
        names["route-scale"]: arch.route_scale,
        "seq-aux": arch.seq_aux,
    }
    if arch.score != "softmax":
        flags["moe-router-score-function"] = arch.score
    if arch.hf_model_type == "deepseek_v3":  # e_score_correction_bias: Megatron's expert bias
        flags["moe-router-enable-expert-bias"] = True
    scaling = arch.rope_scaling or {}
    if scaling:
        flags |= {
            names["beta-fast"]: scaling.get("beta_fast"),
            names["beta-slow"]: scaling.get("beta_slow"),
            "rope-scaling-factor": _number(scaling["factor"]) if "factor" in scaling else None,
            "rope-scaling-mscale": scaling.get("mscale"),
            "rope-scaling-mscale-all-dim": scaling.get("mscale_all_dim"),
            "rope-scaling-original-max-position-embeddings": scaling.get("original_max_position_embeddings"),
            "rope-scaling-type": "yarn",
        }
    return flags
