"""The MoE flags: MindSpeed-LLM's MoE example scripts parse; Megatron's and MindSpeed-LLM's rules refuse
what they refuse, naming the flag; the architecture check compares the MoE shape with config.json; the
expert-parallel groups are Megatron's."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from train_testlib import REQUIRED_ARGV

from ascendfactory.engine.train import arch, flags
from ascendfactory.errors import ConfigError

MOE = [*REQUIRED_ARGV, "--num-experts", "4", "--moe-router-topk", "2"]
LB = "--moe-router-load-balancing-type"


def problems(argv: list[str]) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        flags.parse_args(argv)
    return {p.key: p.message for p in e.value.problems}


def test_moe_flags_are_honoured_not_refused():
    args, ignored = flags.parse_args(
        [*MOE, "--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall",
         "--moe-aux-loss-coeff", "0.001", "--moe-grouped-gemm", "--moe-permutation-async-comm",
         "--spec", "mindspeed_llm.tasks.models.spec.qwen3_spec", "layer_spec", "--norm-topk-prob"]
    )  # fmt: skip
    assert (args.num_experts, args.expert_model_parallel_size, args.moe_grouped_gemm) == (4, 2, True)
    assert sorted(ignored) == ["--moe-permutation-async-comm", "--spec"]
    assert "--moe-tp-extend-ep" in flags.REFUSED and "--num-experts" in flags.ARCHITECTURE


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        (["--expert-model-parallel-size", "2", "--fp16"], "--expert-model-parallel-size", "fp16"),
        (["--expert-model-parallel-size", "3"], "--expert-model-parallel-size", "multiple of expert"),
        (["--moe-expert-capacity-factor", "1"], "--moe-expert-capacity-factor", "alltoall token dispatcher"),
        (["--moe-pad-expert-input-to-capacity"], "--moe-pad-expert-input-to-capacity", "must be set"),
        (["--first-k-dense-replace", "1"], "--moe-layer-freq", "set together"),
        ([LB, "sinkhorn"], LB, "not supported"),
        (["--expert-model-parallel-size", "2", "--use-distributed-optimizer"], "--use-distributed-optimizer",
         "does not shard expert-parallel"),
        (["--topk-group", "1"], "--topk-group", "load-balancing-type none"),
        (["--moe-tp-extend-ep"], "--moe-tp-extend-ep", "not supported"),
    ],
)  # fmt: skip
def test_rules_name_the_flag(extra, key, words):
    found = problems([*MOE, *extra])
    assert key in found and words in found[key], found


def test_a_negative_capacity_factor_means_no_dropping():
    args, _ = flags.parse_args([*MOE, "--moe-expert-capacity-factor", "-1"])
    assert args.moe_expert_capacity_factor is None  # Megatron's TransformerConfig


def test_unused_routing_flags_are_named():
    from ascendfactory.engine.train.moe import flags as moe_flags

    args, _ = flags.parse_args([*MOE, "--seq-aux", "--routed-scaling-factor", "2.5"])
    assert moe_flags.unused(args) == ["--seq-aux", "--routed-scaling-factor"]
    args, _ = flags.parse_args([*MOE, "--seq-aux", "--moe-router-load-balancing-type", "none"])
    assert moe_flags.unused(args) == []


EXAMPLES = [
    "qwen3_moe/tune_qwen3_30b_a3b_4K_full_ptd.sh",
    "qwen3_moe/pretrain_qwen3_30b_a3b_4K_ptd.sh",
    "deepseek2_lite/tune_deepseek2_lite_16b_full_ptd.sh",
    "deepseek2_lite/pretrain_deepseek2_lite_16b_ptd_8p.sh",
]
LAUNCHER = {"--nproc_per_node", "--nnodes", "--node_rank", "--master_addr", "--master_port"}


@pytest.mark.skipif(
    not os.environ.get("AF_MINDSPEED_LLM_DIR"), reason="needs AF_MINDSPEED_LLM_DIR (a checkout)"
)
@pytest.mark.parametrize("script", EXAMPLES)
def test_mindspeed_llm_moe_examples_name_only_known_flags(script):
    """Every flag of MindSpeed-LLM's own MoE example scripts is one this trainer knows (honoured, checked
    against config.json, ignored with its reason, or refused by name): none is 'not a flag'."""
    text = (Path(os.environ["AF_MINDSPEED_LLM_DIR"]) / "examples" / "mcore" / script).read_text()
    used = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9_-]*)", text)) - LAUNCHER
    assert used - set(flags.known_flags()) == set()


class _Cfg:
    """A config.json as transformers reads it (attributes)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def qwen3_moe(**kw) -> _Cfg:
    base = dict(
        model_type="qwen3_moe", num_hidden_layers=4, hidden_size=64, intermediate_size=96,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0,
        hidden_act="silu", vocab_size=256, tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
    )  # fmt: skip
    return _Cfg(**{**base, **kw})


def arch_problems(argv: list[str], cfg: _Cfg) -> dict[str, str]:
    args, _ = flags.parse_args([*REQUIRED_ARGV, *argv])
    with pytest.raises(ConfigError) as e:
        arch.check_architecture(args, cfg)
    return {p.key: p.message for p in e.value.problems}


def test_the_moe_shape_must_match_config_json():
    shape = ["--num-experts", "8", "--moe-router-topk", "2", "--ffn-hidden-size", "8192"]
    args, _ = flags.parse_args(
        [*REQUIRED_ARGV, *shape, "--first-k-dense-replace", "0", "--moe-layer-freq", "1"]
    )
    arch.check_architecture(args, qwen3_moe())  # ffn-hidden-size: unused by a model of MoE layers only
    found = arch_problems(["--num-experts", "16", "--moe-router-topk", "4", "--moe-intermediate-size", "64",
                           "--first-k-dense-replace", "1", "--moe-layer-freq", "1"], qwen3_moe())  # fmt: skip
    assert {
        "--num-experts",
        "--moe-router-topk",
        "--moe-intermediate-size",
        "--first-k-dense-replace",
    } <= set(found)
    assert "make layers [1, 2, 3] MoE, config.json layers [0, 1, 2, 3]" in found["--first-k-dense-replace"]


def test_moe_with_tp_needs_sequence_parallelism_and_ep_needs_experts():
    found = arch_problems(["--tensor-model-parallel-size", "2"], qwen3_moe())
    assert "sequence parallelism" in found["--sequence-parallel"]
    found = arch_problems(["--expert-model-parallel-size", "3"], qwen3_moe())
    assert "multiple of expert model parallel_size (8 % 3)" in found["--expert-model-parallel-size"]
    dense = qwen3_moe(model_type="qwen3", num_experts=0)
    found = arch_problems(["--expert-model-parallel-size", "2"], dense)
    assert "expert model parallelism" in found["--expert-model-parallel-size"]


def test_deepseek_mla_and_yarn_flags_match_config_json():
    ds = _Cfg(
        model_type="deepseek_v2", num_hidden_layers=3, hidden_size=64, intermediate_size=96,
        num_attention_heads=4, num_key_value_heads=4, head_dim=8, rms_norm_eps=1e-6, hidden_act="silu",
        vocab_size=256, tie_word_embeddings=False, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, n_shared_experts=2, first_k_dense_replace=1, norm_topk_prob=False,
        routed_scaling_factor=1.0, topk_method="greedy", kv_lora_rank=32, q_lora_rank=None,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        rope_parameters={"rope_type": "yarn", "factor": 8.0, "rope_theta": 10000.0, "mscale": 0.707},
    )  # fmt: skip
    ok = ["--multi-head-latent-attention", "--kv-lora-rank", "32", "--qk-rope-head-dim", "8",
          "--qk-layernorm", "--rope-scaling-type", "yarn", "--rope-scaling-factor", "8",
          "--n-shared-experts", "2", "--first-k-dense-replace", "1", "--moe-layer-freq", "1"]  # fmt: skip
    args, _ = flags.parse_args([*REQUIRED_ARGV, *ok])
    arch.check_architecture(args, ds)
    bad = ["--kv-lora-rank", "512", "--rope-scaling-factor", "40", "--rope-scaling-beta-fast", "32"]
    found = arch_problems([*bad, "--tensor-model-parallel-size", "2", "--sequence-parallel"], ds)
    assert set(found) == {"--kv-lora-rank", "--rope-scaling-factor", "--tensor-model-parallel-size",
                          "--rope-scaling-beta-fast"}  # fmt: skip


def test_expert_groups_are_megatrons():
    """Data-parallel rank d = j x EP + e: expert-parallel group j, data-modulo-expert group e."""
    import torch.distributed as dist

    from ascendfactory.engine.train.parallel import ParallelDims, expert_groups

    made: list[list[int]] = []

    class FakeDist:
        @staticmethod
        def get_rank() -> int:
            return 6  # pp 0, dp 3, tp 0 of (pp 2, dp 4, tp 2)

        @staticmethod
        def new_group(ranks):
            made.append(list(ranks))
            return tuple(ranks)

    dims = ParallelDims(tp=2, pp=2, dp=4, world_size=16, micro_batch_size=1, global_batch_size=4, ep=2)
    saved = dist.get_rank, dist.new_group
    dist.get_rank, dist.new_group = FakeDist.get_rank, FakeDist.new_group  # type: ignore[assignment]
    try:
        groups = expert_groups(dims)
    finally:
        dist.get_rank, dist.new_group = saved  # type: ignore[assignment]
    assert groups.ep_group == (4, 6) and groups.ep_rank == 1
    assert groups.expert_dp_group == (2, 6) and groups.expert_dp == 2
    assert [0, 2] in made and [8, 10] in made and [9, 11] in made and len(made) == 16
