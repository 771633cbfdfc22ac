"""MindSpeed-LLM's and Megatron-LM's mixture-of-experts rules across training flags, as data (the same `Rule`
records as `rules.py`, which checks them with its own): each names the flag a user sets to break it, says why
in the framework's terms and cites the code that refuses it. The layout rules that need the world size
(EP divides the data-parallel size, the experts divide by EP) are `parallel.validate_layout`'s.

Sources at the pins the backend plans for: Megatron-LM core_r0.8.0 megatron/training/arguments.py
`validate_args` and megatron/core/transformer/transformer_config.py `TransformerConfig.__post_init__`;
MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py `_validate_transformer_block_build_layers`;
MindSpeed 2c085cc9 mindspeed/arguments.py `validate_args_wrapper`; for MindSpeed-LLM 26.1.0 the same Megatron
files at core_v0.12.1, its TransformerBlockFeature and MindSpeed 26.1.0's tp_extend_ep feature (a rule's
`versions` and per-version `source`).
"""

from __future__ import annotations

from ascendfactory.backends.mindspeed_llm.rule_types import LLM, LLM26, MEGATRON, MS26, V21, Flags, Rule

# per MindSpeed-LLM version (`Rule.source` mapping): 26.1.0 moved these checks into features' validate_args
MINDSPEED = {
    "2.1.0": "MindSpeed 2c085cc9 mindspeed/arguments.py validate_args_wrapper",
    "26.1.0": MS26 + "moe/tp_extend_ep.py validate_args",
}
BLOCK = {
    "2.1.0": LLM + " _validate_transformer_block_build_layers",
    "26.1.0": LLM26 + "transformer/transformer_block.py validate_args",
}
CONFIG = "Megatron-LM {megatron} megatron/core/transformer/transformer_config.py __post_init__"
BALANCING_WITH_CAPACITY = ("aux_loss", "none")


def _moe(f: Flags) -> bool:
    return f.given("num-experts") and f["num-experts"] != 0


def _first_k(f: Flags) -> float:
    return f.num("first-k-dense-replace") if f.given("first-k-dense-replace") else 0.0


PARALLEL_CONFIG = "Megatron-LM {megatron} megatron/core/model_parallel_config.py __post_init__"


MOE_RULES: tuple[Rule, ...] = (
    Rule(
        "num-experts",
        lambda f: (
            _moe(f)
            and f.num("expert-model-parallel-size") > 1
            and f.num("num-experts") % f.num("expert-model-parallel-size") != 0
        ),
        "is not a multiple of expert-model-parallel-size",
        "choose an expert-model-parallel-size that divides num-experts",
        MEGATRON + " (Number of experts should be a multiple of expert model parallel_size)",
    ),
    Rule(
        "sequence-parallel",
        lambda f: (
            f.num("expert-model-parallel-size") > 1
            and f.num("tensor-model-parallel-size") > 1
            and not f.given("sequence-parallel")
        ),
        "must be set when expert and tensor parallelism are combined",
        "set sequence-parallel: true, or tensor-model-parallel-size: 1",
        PARALLEL_CONFIG
        + " (When using expert parallelism and tensor parallelism, sequence parallelism must be used)",
    ),
    Rule(
        "expert-model-parallel-size",
        lambda f: f.num("expert-model-parallel-size") > 1 and f.given("fp16"),
        "expert parallelism is not supported with fp16 training",
        "train in bf16 (bf16: true, no fp16), or set expert-model-parallel-size: 1",
        MEGATRON + " (Expert parallelism is not supported with fp16 training)",
    ),
    Rule(
        "moe-grouped-gemm",
        lambda f: f.given("moe-grouped-gemm") and not f.given("bf16"),
        "grouped GEMM for MoE supports bf16 only",
        "set bf16: true, or moe-grouped-gemm: false (the plan fills it for MoE models)",
        MEGATRON + " (Currently GroupedGEMM for MoE only supports bf16 dtype)",
    ),
    Rule(
        "moe-expert-capacity-factor",
        lambda f: (
            f.given("moe-expert-capacity-factor")  # a negative factor too: it becomes None after this test
            # allgather is refused first (rules.py); 26.1.0's MoERouter checks the balancing type under
            # alltoall_seq too (mindspeed_llm/features_manager/moe/moe_router.py _validate_moe_args), and
            # core_r0.8.0 after refusing any dispatcher but alltoall
            and f["moe-token-dispatcher-type"] != "allgather"
            and f["moe-router-load-balancing-type"] not in BALANCING_WITH_CAPACITY
        ),
        "works only with moe-router-load-balancing-type aux_loss or none",
        "set moe-router-load-balancing-type: aux_loss (or none), or remove moe-expert-capacity-factor",
        CONFIG,
    ),
    *(
        Rule(
            key,
            lambda f, key=key, other=other: _moe(f) and f.given(key) and not f.given(other),
            f"needs {other}: first-k-dense-replace and moe-layer-freq are set together",
            f"set {other} too (the DeepSeek examples pass both), or remove {key}",
            LLM + " _validate_transformer_block_build_layers",
            versions=V21,  # 26.1.0's TransformerBlockFeature does not check it
        )
        for key, other in (
            ("first-k-dense-replace", "moe-layer-freq"),
            ("moe-layer-freq", "first-k-dense-replace"),
        )
    ),
    Rule(
        "first-k-dense-replace",
        lambda f: _moe(f) and _first_k(f) > 0 and f.num("num-layers") <= _first_k(f),
        "must be less than num-layers (at least one MoE layer)",
        "lower first-k-dense-replace",
        BLOCK,
    ),
    Rule(
        "first-k-dense-replace",
        lambda f: (
            _moe(f)
            and _first_k(f) > 0
            and f.num("pipeline-model-parallel-size") > 1
            and _first_k(f) >= f.num("num-layers") // f.num("pipeline-model-parallel-size")
        ),
        "with pipeline parallelism the dense first layers must not fill a whole pipeline stage",
        "lower pipeline-model-parallel-size, or first-k-dense-replace",
        BLOCK,
    ),
    Rule(
        "moe-tp-extend-ep",
        lambda f: (
            f.given("moe-tp-extend-ep")
            and _moe(f)
            and f.num("num-experts")
            % (f.num("tensor-model-parallel-size") * f.num("expert-model-parallel-size"))
            != 0
        ),
        "needs num-experts divisible by tensor-model-parallel-size x expert-model-parallel-size",
        "choose TP and EP whose product divides num-experts, or remove moe-tp-extend-ep",
        MINDSPEED,
    ),
    Rule(
        "moe-tp-extend-ep",
        lambda f: (
            f.given("moe-tp-extend-ep")
            and (
                not (f.given("moe-permutation-async-comm") and f.given("moe-grouped-gemm"))
                or f.given("moe-expert-capacity-factor")
            )
        ),
        "needs moe-permutation-async-comm and moe-grouped-gemm, and no moe-expert-capacity-factor",
        "set those two (the plan fills them for MoE models) and remove moe-expert-capacity-factor, or remove "
        "moe-tp-extend-ep",
        MINDSPEED,
    ),
)
