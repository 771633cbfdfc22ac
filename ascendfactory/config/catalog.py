"""Model architecture facts: from an HF `config.json` when one is reachable, else from the catalog
(`ascendfactory/config/models.yaml`, `ascendfactory-cli models`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ascendfactory.errors import ConfigError, Problem

CATALOG = Path(__file__).resolve().parent / "models.yaml"  # package data: found by any install

_HF_TYPE_TO_FAMILY = {
    "llama": "llama2",
    "qwen2": "qwen25",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3-moe",
    "deepseek_v2": "deepseek2-lite",  # deepseek2 when q_lora_rank is set (DeepSeek-V2, not -Lite)
    "deepseek_v3": "deepseek3",
}


QK_NORM_MODEL_TYPES = ("qwen3", "qwen3_moe")  # HF model types whose attention norms q and k per head


@dataclass(frozen=True)
class ModelArch:
    """What validation and planning need to know about a model."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    max_pos: int
    tied: bool
    hf_model_type: str
    model_type_hf: str  # MindSpeed-LLM --model-type-hf (v2 converter)
    family: str | None  # embedded backend name table
    rope: float = 10000.0
    eps: float = 1e-6
    qkv_bias: bool = False
    head_dim: int | None = None
    vit_layers: int | None = None  # vision encoder (VLMs): HF vision_config.depth / num_hidden_layers
    vit_heads: int | None = None  # vision encoder attention heads: vision_config.num_heads
    # mixture of experts (models.yaml's header names the config.json field of each)
    experts: int = 0  # routed experts; 0 = a dense model
    topk: int = 0
    moe_ffn: int = 0
    shared_experts: int = 0
    dense_layers: int = 0  # the first layers are dense (DeepSeek first_k_dense_replace)
    norm_topk: bool = False
    aux_loss: float = 0.0
    score: str = "softmax"
    groups: int | None = None
    group_topk: int | None = None
    route_scale: float | None = None
    seq_aux: bool = False
    mtp_layers: int = 0
    # multi-head latent attention (DeepSeek)
    q_lora: int | None = None
    kv_lora: int = 0
    qk_nope: int = 0
    qk_rope: int = 0
    v_head: int = 0
    rope_scaling: dict[str, Any] | None = None
    source: str = "catalog"

    @property
    def kv_channels(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def qk_norm(self) -> bool:
        """Per-head RMSNorm of q and k before the rotary embedding (HF Qwen3 / Qwen3-MoE attention's q_norm
        and k_norm; MindSpeed-LLM's `--qk-layernorm`)."""
        return self.hf_model_type in QK_NORM_MODEL_TYPES

    @property
    def mla(self) -> bool:
        return self.kv_lora > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    @property
    def active_experts(self) -> int:
        """Experts each token passes through: the top-k routed ones and the shared ones."""
        return self.topk + self.shared_experts


@lru_cache(maxsize=1)
def load_catalog() -> dict[str, dict[str, Any]]:
    from ascendfactory.config.yamlio import load_file

    return load_file(CATALOG)


def list_models() -> list[str]:
    return list(load_catalog())


def from_catalog(name: str) -> ModelArch:
    cat = load_catalog()
    if name not in cat:
        from ascendfactory.config.suggest import did_you_mean

        raise ConfigError(
            Problem(
                key="af_model_name",
                message=f"'{name}' is not in the model catalog{did_you_mean(name, cat)}",
                fix="point backend_config.training.tokenizer-name-or-path (or "
                "model_name_or_path) at a directory with config.json, or use one of: " + ", ".join(cat),
            )
        )
    return ModelArch(name=name, **cat[name])


def from_hf_dir(path: str | Path, name: str = "") -> ModelArch | None:
    """Read `<path>/config.json`; None when there is none. Unknown model types keep family None."""
    cfg_path = Path(path) / "config.json"
    if not os.path.isfile(cfg_path):  # os.path: False for any unusable path (too long, NUL, ...)
        return None
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(
            Problem(
                key=str(cfg_path),
                message=f"not a readable HF config.json ({e})",
                fix="fix or replace the file",
            )
        ) from None
    if not isinstance(cfg, dict):
        raise ConfigError(
            Problem(key=str(cfg_path), message="is not a JSON object", fix="fix or replace the file")
        )
    mtype = cfg.get("model_type", "")
    vision_given, text_given = cfg.get("vision_config"), cfg.get("text_config")
    vision = vision_given if isinstance(vision_given, dict) else {}
    text = text_given if isinstance(text_given, dict) else {}
    cfg = {**text, **{k: v for k, v in cfg.items() if v is not None}}  # VLMs: text_config fills the LLM gaps
    heads = cfg.get("num_attention_heads") or cfg.get("n_head") or 0
    family = _HF_TYPE_TO_FAMILY.get(mtype)
    if mtype == "deepseek_v2" and cfg.get("q_lora_rank"):
        family = "deepseek2"
    return ModelArch(
        name=name or Path(path).name,
        layers=cfg.get("num_hidden_layers") or cfg.get("num_layers") or 0,
        hidden=cfg.get("hidden_size") or 0,
        ffn=cfg.get("intermediate_size") or cfg.get("ffn_hidden_size") or 0,
        heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or cfg.get("multi_query_group_num") or heads,
        vocab=cfg.get("vocab_size") or cfg.get("padded_vocab_size") or 0,
        max_pos=cfg.get("max_position_embeddings") or cfg.get("seq_length") or 0,
        tied=bool(cfg.get("tie_word_embeddings", False)),
        hf_model_type=mtype,
        model_type_hf=family or mtype,
        family=family,
        rope=float(cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or 10000.0),
        eps=float(cfg.get("rms_norm_eps") or cfg.get("layernorm_epsilon") or 1e-6),
        qkv_bias=bool(cfg.get("attention_bias", mtype == "qwen2")) or mtype == "qwen2",
        head_dim=cfg.get("head_dim")
        if cfg.get("head_dim") not in (None, (cfg.get("hidden_size") or 0) // max(heads, 1))
        else None,
        vit_layers=vision.get("depth") or vision.get("num_hidden_layers"),
        vit_heads=vision.get("num_heads") or vision.get("num_attention_heads"),
        **_moe_fields(cfg),
        source=str(cfg_path),
    )


def _moe_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The MoE and MLA facts of a config.json (the fields models.yaml's header lists); {} for dense models.
    Qwen3-MoE layers named in mlp_only_layers, or off decoder_sparse_step, are dense: counted as dense_layers
    only when they come first (what Megatron's --first-k-dense-replace expresses)."""
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0
    if not experts:
        return {}
    dense = cfg.get("first_k_dense_replace") or 0
    only = sorted(cfg.get("mlp_only_layers") or [])
    if only == list(range(len(only))) and (cfg.get("decoder_sparse_step") or 1) == 1:
        dense = max(dense, len(only))
    rope_scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    kind = (rope_scaling.get("type"), rope_scaling.get("rope_type")) if isinstance(rope_scaling, dict) else ()
    yarn = isinstance(rope_scaling, dict) and "yarn" in kind
    return dict(
        experts=int(experts),
        topk=int(cfg.get("num_experts_per_tok") or 0),
        moe_ffn=int(cfg.get("moe_intermediate_size") or 0),
        shared_experts=int(cfg.get("n_shared_experts") or 0),
        dense_layers=int(dense),
        norm_topk=bool(cfg.get("norm_topk_prob", False)),
        aux_loss=float(cfg.get("router_aux_loss_coef") or cfg.get("aux_loss_alpha") or 0.0),
        score=str(cfg.get("scoring_func") or "softmax"),
        groups=cfg.get("n_group"),
        group_topk=cfg.get("topk_group"),
        route_scale=cfg.get("routed_scaling_factor"),
        seq_aux=bool(cfg.get("seq_aux", False)),
        mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),
        q_lora=cfg.get("q_lora_rank") or None,
        kv_lora=int(cfg.get("kv_lora_rank") or 0),
        qk_nope=int(cfg.get("qk_nope_head_dim") or 0),
        qk_rope=int(cfg.get("qk_rope_head_dim") or 0),
        v_head=int(cfg.get("v_head_dim") or 0),
        rope_scaling=dict(rope_scaling) if yarn and isinstance(rope_scaling, dict) else None,
    )


def resolve_arch(model_name: str, model_dir: str | None) -> ModelArch:
    """The HF config in `model_dir` when present, else the catalog entry for `model_name`."""
    if model_dir:
        arch = from_hf_dir(model_dir, model_name)
        if arch is not None:
            return arch
    return from_catalog(model_name)


def arch_or_none(model_name: str, model_dir: object) -> ModelArch | None:
    """`resolve_arch`, or None when neither a readable config.json nor the catalog knows the model (for
    figures that are shown when they can be made, such as the memory estimate)."""
    try:
        return resolve_arch(model_name, model_dir if isinstance(model_dir, str) and model_dir else None)
    except ConfigError:
        return None
