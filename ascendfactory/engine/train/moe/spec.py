"""The MoE settings of a run: the model's shape from its HF config.json, the routing and dispatch from the
Megatron / MindSpeed-LLM flags (read once, here). No torch import.

Sources (the flags' meaning and defaults):
- Megatron core_r0.8.0 `megatron/training/arguments.py` `_add_moe_args`, `transformer/moe/router.py`
  (TopKRouter), `transformer/moe/moe_utils.py`, `transformer/moe/token_dispatcher.py`.
- MindSpeed-LLM 2.1.0 `mindspeed_llm/features_manager/common/moe_router.py` (router flags),
  `training/arguments.py` `_add_deepseek_moe_args` / `_add_moe_args`, `core/transformer/moe/router.py`
  (`topk_router_routing`), `core/transformer/moe/moe_utils.py` (`topk_softmax_with_capacity`),
  `core/transformer/transformer_block.py` (which layers are MoE: `first_k_dense_replace`, `moe_layer_freq`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# HF model_type -> how its config.json names the MoE fields
MOE_MODEL_TYPES = ("qwen3_moe", "deepseek_v2")
# --moe-router-load-balancing-type values the embedded trainer implements
LOAD_BALANCING = ("aux_loss", "none", "softmax_topk")
DISPATCHERS = ("allgather", "alltoall")
DROP_POLICIES = ("probs", "position")
SCORE_FUNCTIONS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class HFMoE:
    """What an HF MoE config.json says about its experts and their routing."""

    model_type: str
    num_experts: int
    topk: int
    ffn_hidden_size: int  # moe_intermediate_size
    shared_ffn_hidden_size: int  # 0: no shared experts
    norm_topk_prob: bool
    scaling_factor: float  # DeepSeek's routed_scaling_factor (1.0 for Qwen3-MoE)
    topk_method: str  # greedy | group_limited_greedy (DeepSeek) | greedy (Qwen3-MoE)
    num_groups: int | None
    group_topk: int | None
    first_k_dense_replace: int
    moe_layer_freq: int
    aux_loss_coeff: float  # router_aux_loss_coef (Qwen3-MoE) / aux_loss_alpha (DeepSeek)
    seq_aux: bool

    @classmethod
    def from_config(cls, cfg: Any) -> HFMoE | None:
        """None for a dense model."""
        get = cfg.get if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
        model_type = get("model_type")
        if model_type == "qwen3_moe":
            experts = int(
                get("num_experts") or get("num_local_experts") or 0
            )  # transformers 5 writes the latter
            if not experts:
                return None
            step = int(get("decoder_sparse_step") or 1)
            return cls(
                model_type=model_type,
                num_experts=experts,
                topk=int(get("num_experts_per_tok")),
                ffn_hidden_size=int(get("moe_intermediate_size")),
                shared_ffn_hidden_size=0,
                norm_topk_prob=bool(get("norm_topk_prob", False)),
                scaling_factor=1.0,
                topk_method="greedy",
                num_groups=None,
                group_topk=None,
                first_k_dense_replace=step - 1,
                moe_layer_freq=step,
                aux_loss_coeff=float(get("router_aux_loss_coef") or 0.0),
                seq_aux=False,
            )
        if model_type == "deepseek_v2":
            experts = int(get("n_routed_experts") or 0)
            if not experts:
                return None
            ffn = int(get("moe_intermediate_size"))
            return cls(
                model_type=model_type,
                num_experts=experts,
                topk=int(get("num_experts_per_tok")),
                ffn_hidden_size=ffn,
                shared_ffn_hidden_size=int(get("n_shared_experts") or 0) * ffn,
                norm_topk_prob=bool(get("norm_topk_prob", False)),
                scaling_factor=float(get("routed_scaling_factor") or 1.0),
                topk_method=str(get("topk_method") or "greedy"),
                num_groups=get("n_group"),
                group_topk=get("topk_group"),
                first_k_dense_replace=int(get("first_k_dense_replace") or 0),
                moe_layer_freq=int(get("moe_layer_freq") or 1),
                aux_loss_coeff=float(get("aux_loss_alpha") or 0.0),
                seq_aux=bool(get("seq_aux", False)),
            )
        return None

    def is_moe_layer(self, layer: int, mlp_only_layers: tuple[int, ...] = ()) -> bool:
        """MindSpeed-LLM's rule (0-based layer): `layer >= first_k_dense_replace and layer % freq == 0`;
        Qwen3-MoE's `decoder_sparse_step` s is first_k_dense_replace s - 1 and freq s, plus its
        `mlp_only_layers`."""
        if layer in mlp_only_layers:
            return False
        if self.model_type == "qwen3_moe":
            return (layer + 1) % self.moe_layer_freq == 0
        return layer >= self.first_k_dense_replace and layer % self.moe_layer_freq == 0


@dataclass(frozen=True)
class MoESpec:
    """Everything the MoE layers of a run need; one instance, shared by every MoE layer."""

    num_experts: int
    topk: int
    ffn_hidden_size: int
    shared_ffn_hidden_size: int
    ep: int
    tp: int
    load_balancing: str  # aux_loss | none | softmax_topk
    aux_loss_coeff: float
    z_loss_coeff: float | None
    seq_aux: bool
    pre_softmax: bool
    score_function: str
    norm_topk_prob: bool
    scaling_factor: float | None
    num_groups: int | None
    group_topk: int | None
    capacity_factor: float | None
    pad_to_capacity: bool
    drop_policy: str
    dispatcher: str
    grouped_gemm: bool
    gating_fp32: bool
    input_jitter_eps: float | None
    layer_recompute: bool
    per_layer_logging: bool

    @property
    def num_local_experts(self) -> int:
        return self.num_experts // self.ep

    @property
    def effective_aux_coeff(self) -> float:
        """The load-balancing coefficient each TP rank applies: Megatron's alltoall dispatcher divides it by
        TP (core_r0.8.0 router.py `apply_load_balancing_loss`; MindSpeed-LLM's `apply_seq_aux_loss` too),
        as every TP rank computes the loss over the same gathered tokens; this layer always routes the
        gathered tokens, so it divides by TP with either dispatcher (the allgather dispatcher's per-rank
        partial losses sum to the same value and gradient)."""
        return self.aux_loss_coeff / self.tp

    @classmethod
    def from_args(cls, args: Any, hf: HFMoE, *, tp: int) -> MoESpec:
        """The run's settings: the model's shape from `hf`, the rest from the flags (MindSpeed-LLM's
        defaults where a flag is absent)."""
        return cls(
            num_experts=hf.num_experts,
            topk=hf.topk,
            ffn_hidden_size=hf.ffn_hidden_size,
            shared_ffn_hidden_size=hf.shared_ffn_hidden_size,
            ep=int(args.expert_model_parallel_size),
            tp=tp,
            load_balancing=args.moe_router_load_balancing_type,
            aux_loss_coeff=float(args.moe_aux_loss_coeff),
            z_loss_coeff=args.moe_z_loss_coeff,
            seq_aux=bool(args.seq_aux),
            pre_softmax=bool(args.moe_router_pre_softmax),
            score_function=args.moe_router_score_function,
            norm_topk_prob=bool(args.norm_topk_prob),
            scaling_factor=args.routed_scaling_factor,
            num_groups=args.n_group,
            group_topk=args.topk_group,
            capacity_factor=args.moe_expert_capacity_factor,
            pad_to_capacity=bool(args.moe_pad_expert_input_to_capacity),
            drop_policy=args.moe_token_drop_policy,
            dispatcher=args.moe_token_dispatcher_type,
            grouped_gemm=bool(args.moe_grouped_gemm),
            gating_fp32=bool(args.router_gating_in_fp32),
            input_jitter_eps=args.moe_input_jitter_eps,
            layer_recompute=bool(args.moe_layer_recompute),
            per_layer_logging=bool(args.moe_per_layer_logging),
        )

    def describe(self) -> str:
        extra = []
        if self.shared_ffn_hidden_size:
            extra.append(f"shared experts ffn {self.shared_ffn_hidden_size}")
        if self.capacity_factor is not None:
            pad = ", padded" if self.pad_to_capacity else ""
            extra.append(f"capacity factor {self.capacity_factor} (drop by {self.drop_policy}{pad})")
        return (
            f"MoE: {self.num_experts} experts (top-{self.topk}, ffn {self.ffn_hidden_size}), "
            f"expert parallel {self.ep} ({self.num_local_experts} per rank), {self.dispatcher} dispatcher, "
            f"router {self.load_balancing}{' + seq-aux' if self.seq_aux else ''}, "
            f"aux loss coeff {self.aux_loss_coeff}" + "".join(f", {e}" for e in extra)
        )

    def hf_routing_differences(self, hf: HFMoE) -> list[str]:
        """How the flags' routing differs from the HF model's (what transformers computes when it loads the
        trained weights): each as a sentence naming the flag. Empty when they agree."""
        out = []
        # the top-k probabilities: renormalised (HF norm_topk_prob) or the full softmax's values
        renormalised = not self.pre_softmax and self.load_balancing in ("aux_loss", "none")
        renormalised = renormalised or (self.norm_topk_prob and self.load_balancing == "aux_loss")
        if self.score_function != "softmax":
            out.append(f"--moe-router-score-function {self.score_function}: the HF model routes by softmax")
        elif renormalised != hf.norm_topk_prob:
            if hf.norm_topk_prob:
                out.append(
                    "the HF model renormalises the top-k probabilities (norm_topk_prob = true): add "
                    "--norm-topk-prob or drop --moe-router-pre-softmax"
                )
            else:
                out.append(
                    "the HF model weights the experts by their softmax probabilities, not renormalised "
                    "(norm_topk_prob = false): use --moe-router-pre-softmax without --norm-topk-prob"
                )
        scaling = self.scaling_factor if self.load_balancing == "none" and self.scaling_factor else 1.0
        if abs(scaling - hf.scaling_factor) > 1e-12 and not (hf.norm_topk_prob and hf.scaling_factor == 1.0):
            out.append(
                f"routed_scaling_factor = {hf.scaling_factor} in config.json, the flags scale by {scaling} "
                "(--routed-scaling-factor applies with --moe-router-load-balancing-type none)"
            )
        if hf.topk_method == "group_limited_greedy" and not self.group_topk:
            out.append(
                "the HF model limits each token to topk_group expert groups: add --topk-group/--n-group"
            )
        if self.capacity_factor is not None:
            out.append(
                f"--moe-expert-capacity-factor {self.capacity_factor} drops tokens the HF model never drops"
            )
        return out
