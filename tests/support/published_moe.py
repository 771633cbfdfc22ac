"""Published peak memory of mixture-of-experts training runs, with the layout each script passes: the memory
estimate is checked against them (tests/unit/memory/test_moe_memory.py, benchmarks/bench_memory_estimate.py
`published`). Source: modelscope/ms-swift's Megatron-SWIFT example scripts (each case names its file), whose
comments give the nvidia-smi reading per GPU."""

from __future__ import annotations

from ascendfactory.config.catalog import from_catalog
from ascendfactory.memory.megatron import MegatronJob
from ascendfactory.memory.shape import ModelShape, shape_from_arch

QWEN15_MOE = ModelShape(  # Qwen/Qwen1.5-MoE-A2.7B config.json (Hub): 60 experts of 1408 (top 4), shared 5632
    name="qwen1.5-moe-a2.7b",
    layers=24,
    hidden=2048,
    ffn=5632,
    heads=16,
    kv_heads=16,
    vocab=151936,
    tied=False,
    qkv_bias=True,
    experts=60,
    moe_topk=4,
    moe_ffn=1408,
    shared_ffn=5632,
)


def published() -> list[tuple[str, MegatronJob, float]]:
    """(label, job, device-level GiB): ms-swift's Megatron-SWIFT examples, bf16, flash attention, the
    distributed optimizer (ms-swift's default), the layouts their scripts pass. ms-swift builds Megatron's
    GPTModel over the HF `vocab_size` as `--padded-vocab-size` (its `swift/megatron/model/config.py`
    `config_mapping`, 'padded_vocab_size': ['vocab_size'], unchanged from ad907793e to ea766ff5b), so the
    vocabulary is not padded (`vocab_divisible_by=1`; 151936 is a multiple of every TP size used here)."""
    q30 = shape_from_arch(from_catalog("qwen3-30b-a3b"))
    common = dict(distributed_optimizer=True, vocab_divisible_by=1)
    return [
        (  # examples/train/megatron/moe/moe.sh: "pp2ep4: 7 * 73GiB"
            "Qwen1.5-MoE-A2.7B PP2 EP4, 8192 packed, selective",
            MegatronJob(
                shape=QWEN15_MOE, pp=2, dp=4, ep=4, mbs=1, gbs=16, seq=8192, recompute="selective", **common
            ),
            73,
        ),
        (  # same script: "tp2ep4: 8 * 65GiB"
            "Qwen1.5-MoE-A2.7B TP2 EP4 SP, 8192 packed, selective",
            MegatronJob(
                shape=QWEN15_MOE,
                tp=2,
                dp=4,
                ep=4,
                mbs=1,
                gbs=16,
                seq=8192,
                recompute="selective",
                sequence_parallel=True,
                **common,
            ),
            65,
        ),
        (  # examples/megatron/lora/moe.sh: "2 * 62GiB", LoRA r8 on every linear layer
            "Qwen3-30B-A3B LoRA EP2, MBS 8 x 2048, full recompute",
            MegatronJob(
                shape=q30, dp=2, ep=2, mbs=8, gbs=16, seq=2048, recompute="full", lora_rank=8, **common
            ),
            62,
        ),
        # examples/train/megatron/moe/qwen3_moe.sh: "Megatron-LM: 9.6s/it; 16 * 60GiB", added at ms-swift
        # ad907793e (2025-04-29; the same figure in its Qwen3 best-practice doc as memory in use, on 2 nodes
        # x 8 A800 80GiB). That ms-swift cloned Megatron-LM core_r0.11.0 (`swift/megatron/init.py`,
        # `init_megatron_env`) and logged no memory figure of its own (`swift/megatron/train/patcher.py`
        # writes loss, grad norm and lr); the script set no PYTORCH_CUDA_ALLOC_CONF then. No counter is
        # named; the same table's ZeRO-3 figure, "16 * 80GiB", is the whole card, so the column reads the
        # device (or the allocator's reserve, which Megatron's `report_memory` prints beside max allocated:
        # core_v0.11.0 megatron/training/utils.py line 221), not `max_memory_allocated`. The comment stayed
        # word for word through four later changes of the script (expandable_segments at 44a561a1f, TP2 ->
        # PP2 and aux-loss 0.01 -> 1e-3 at 37c5319fa, moe_permute_fusion at 9f2b67606): not measured again.
        (
            "Qwen3-30B-A3B full TP2 EP8 SP, 16 GPUs, 8192 packed, full recompute",
            MegatronJob(
                shape=q30,
                tp=2,
                dp=8,
                ep=8,
                mbs=1,
                gbs=16,
                seq=8192,
                recompute="full",
                sequence_parallel=True,
                **common,
            ),
            60,
        ),
    ]
