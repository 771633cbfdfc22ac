"""Rules across pretrain_vlm.py's training flags that MindSpeed-MM 2.1.0 refuses before any device is used,
as data: MindSpeed's `validate_args_wrapper` (MindSpeed 077c4137, the commit MindSpeed-MM 2.1.0 installs:
mindspeed/arguments.py) and MindSpeed-MM's own `validate_args` (mindspeed_mm/patchs/validate_args_patch.py,
its copy of Megatron-LM core_r0.8.0's checks). Each rule was a statement of the coverage map
(tests/diffval/maps/mindspeed-mm-2.1.0.yaml) whose case we accepted and MindSpeed-MM refused; each
cites the line that refuses it.

The rules read the flags the plan hands pretrain_vlm.py (the example's, the user's, the layout's), with
argparse's defaults for the flags not given (facts/training_2.1.0.txt), and the sizes MindSpeed-MM's
validate_args copies from model.json's text_decoder (num-layers, hidden-size, num-attention-heads,
max-position-embeddings; num-experts from num_moe_experts). A rule whose flags hold a value of the wrong kind
is skipped (argparse's check refuses that value already).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ascendfactory.errors import Problem

T = "backend_config.training."
MS = "MindSpeed 077c4137 mindspeed/arguments.py:{line} (validate_args_wrapper)"
MM = "MindSpeed-MM 2.1.0 mindspeed_mm/patchs/validate_args_patch.py:{line} (validate_args)"
MEGATRON = "Megatron-LM core_r0.8.0 megatron/training/arguments.py:{line}"
ENV = "env:"  # a flags key holding the training step's environment variable (env:NCCL_ALGO)
# validate_args_patch.py:500 all_reduce_choices (deterministic mode's NCCL_ALGO)
WORLD = "@world"  # a flags key holding the devices the plan launches (NNODES x devices per node)
CALCULATOR = "Megatron-LM core_r0.8.0 megatron/core/num_microbatches_calculator.py:{line}"
SPLIT_DATA = ("train-data-path", "valid-data-path", "test-data-path")
NCCL_ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "^NVLS")


class Flags:
    """The flags as pretrain_vlm.py sees them: given (a value; true for a switch) or argparse's default."""

    def __init__(self, flags: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.flags = {k: v for k, v in flags.items() if v is not None and v is not False}
        self.defaults = defaults

    def given(self, key: str) -> bool:
        return key in self.flags

    def __getitem__(self, key: str) -> Any:
        return self.flags.get(key, self.defaults.get(key))

    def on(self, key: str) -> bool:
        """A switch (or a value) that Python reads as true. A `no-*` switch (argparse's store_false) is read
        with given(): its table default is its destination's (true)."""
        value = self[key]
        if isinstance(value, str):
            return value not in ("", "0", "0.0", "false", "False")
        return bool(value)

    def num(self, key: str) -> float:
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(key)
        return float(value)

    def has(self, key: str) -> bool:
        """Not None: given, or a default that is a value."""
        return self[key] is not None and self[key] is not False


@dataclass(frozen=True)
class Rule:
    name: str  # the rule's id (the map names it: mindspeed_mm.flag_rules:RULES[name])
    keys: tuple[str, ...]  # the flags it reads; the problem names the first of them the user set
    broken: Callable[[Flags], Any]
    message: str  # MindSpeed(-MM)'s refusal, quoted where it has words of its own
    fix: str
    source: str


def _cp(f: Flags, algo: str) -> bool:
    return f.num("context-parallel-size") > 1 and f["context-parallel-algo"] == algo


def _heads_split(f: Flags, by: float) -> bool:
    """num_attention_heads // by >= 1 and num_attention_heads % by == 0 fails."""
    heads = f.num("num-attention-heads")
    return by <= 0 or heads // by < 1 or heads % by != 0


def _ring(f: Flags) -> tuple[float, float]:
    cp, ulysses = f.num("context-parallel-size"), f.num("ulysses-degree-in-cp")
    return cp // ulysses, cp % ulysses


def _rampup_broken(f: Flags) -> bool:
    """--rampup-batch-size START INCREMENT SAMPLES, as the micro-batch calculator takes it (sample-based
    training: with train-iters validate_args refuses it first): three numbers, START and INCREMENT above 0,
    SAMPLES above 0 (0 divides by zero), global-batch-size above START by a multiple of INCREMENT (equal
    divides by zero), and every batch size of the ramp divisible by micro-batch-size x data-parallel size
    (the calculator's consistency check as training consumes samples)."""
    value = f["rampup-batch-size"]
    if value is None or f.on("train-iters"):
        return False
    if not isinstance(value, list) or len(value) != 3:
        return True
    start, increment, samples = (int(float(v)) for v in value)
    gbs = f.num("global-batch-size")
    if start <= 0 or increment <= 0 or samples <= 0 or gbs <= start or (gbs - start) % increment:
        return True
    parallel = f.num("tensor-model-parallel-size") * f.num("pipeline-model-parallel-size")
    unit = f.num("micro-batch-size") * (f.num(WORLD) // (parallel * f.num("context-parallel-size")))
    return any((start + k * increment) % unit for k in range(int((gbs - start) // increment) + 1))


def _is_zero(key: str) -> Callable[[Flags], bool]:
    def broken(f: Flags) -> bool:
        return f.has(key) and f.num(key) == 0

    return broken


def _adaptive_recompute(f: Flags) -> bool:
    return f.num("adaptive-recompute-device-size") > 0 or f.on("adaptive-recompute-device-swap")


def _noop_out_of_range(f: Flags) -> bool:
    value = f["noop-layers"]
    if not isinstance(value, str):
        return False
    layers = f.num("num-layers")
    try:
        return any(int(x) >= layers or int(x) < 0 for x in value.split(","))
    except ValueError:  # an entry that is not a number: MindSpeed's int() stops there
        return True


def _rule(
    name: str, keys: tuple[str, ...], broken: Callable[[Flags], Any], message: str, fix: str, where: str
) -> Rule:
    return Rule(name, keys, broken, message, fix, where)


RULES: tuple[Rule, ...] = (
    # -- MindSpeed's validate_args_wrapper, around MindSpeed-MM's validate_args -----------------------------
    _rule(
        "moe-coc",
        ("use-ascend-coc", "num-experts"),
        lambda f: f.has("num-experts") and f.on("num-experts") and f.on("use-ascend-coc"),
        "use-ascend-coc with a MoE model (num-experts): 'coc is not compatible with moe models'",
        "remove use-ascend-coc",
        MS.format(line=542),
    ),
    _rule(
        "moe-mc2",
        ("use-ascend-mc2", "num-experts"),
        lambda f: f.has("num-experts") and f.on("num-experts") and f.on("use-ascend-mc2"),
        "use-ascend-mc2 with a MoE model (num-experts): 'mc2 is not compatible with moe models'",
        "remove use-ascend-mc2",
        MS.format(line=544),
    ),
    _rule(
        "moe-legacy-megatron-moe",
        ("use-legacy-models", "moe-model-type"),
        lambda f: f.on("num-experts") and f.on("use-legacy-models") and f["moe-model-type"] == "megatron_moe",
        "use-legacy-models with moe-model-type megatron_moe on a MoE model: 'megatron_moe is not compatible "
        "with --use-legacy-models'",
        "remove use-legacy-models",
        MS.format(line=547),
    ),
    _rule(
        "moe-deepspeed-mcore",
        ("moe-model-type", "use-legacy-models"),
        lambda f: (
            f.on("num-experts") and not f.on("use-legacy-models") and f["moe-model-type"] == "deepspeed_moe"
        ),
        "moe-model-type deepspeed_moe without use-legacy-models: 'deepspeed_moe only support with "
        "--use-legacy-models'",
        "remove moe-model-type (megatron_moe)",
        MS.format(line=551),
    ),
    _rule(
        "ema-adamw-reuse-fp32",
        ("reuse-fp32-param", "optimizer-selection"),
        lambda f: f["optimizer-selection"] == "fused_ema_adamw" and f.on("reuse-fp32-param"),
        "reuse-fp32-param with optimizer-selection fused_ema_adamw: 'fused_ema_adamw optimizer is not "
        "compatible with reuse_fp32_param'",
        "remove reuse-fp32-param, or choose another optimizer-selection",
        MS.format(line=562),
    ),
    _rule(
        "mla-dims",
        ("multi-head-latent-attention", "kv-lora-rank", "v-head-dim", "qk-rope-head-dim", "qk-nope-head-dim"),
        lambda f: (
            f.on("multi-head-latent-attention")
            and not all(
                f.has(k) for k in ("kv-lora-rank", "v-head-dim", "qk-rope-head-dim", "qk-nope-head-dim")
            )
        ),
        "multi-head-latent-attention needs kv-lora-rank, v-head-dim, qk-rope-head-dim and qk-nope-head-dim "
        "('The parameter ... should be set when use multi_head_latent_attention')",
        "remove multi-head-latent-attention (Qwen2.5-VL has none), or give all four",
        MS.format(line=567),
    ),
    _rule(
        "yarn-original-max",
        ("rope-scaling-type", "rope-scaling-original-max-position-embeddings"),
        lambda f: (
            f["rope-scaling-type"] == "yarn" and not f.has("rope-scaling-original-max-position-embeddings")
        ),
        "rope-scaling-type yarn needs rope-scaling-original-max-position-embeddings",
        "give rope-scaling-original-max-position-embeddings, or remove rope-scaling-type",
        MS.format(line=580),
    ),
    _rule(
        "optimize-vpp-send-recv-comm",
        ("optimize-vpp-send-recv-comm",),
        lambda f: f.on("optimize-vpp-send-recv-comm") and not f.has("num-layers-per-virtual-pipeline-stage"),
        "'--optimize-vpp-send-recv-comm can only be used with pipeline with interleaving' (a virtual "
        "pipeline, which MindSpeed-MM 2.1.0 and this backend do not plan)",
        "remove optimize-vpp-send-recv-comm",
        MS.format(line=630),
    ),
    _rule(
        "zero3",
        ("enable-zero3", "use-ascend-mc2", "reuse-fp32-param", "recompute-granularity", "use-pipe-experts"),
        lambda f: (
            f.on("enable-zero3")
            and (
                f.on("use-ascend-mc2")
                or f.on("reuse-fp32-param")
                or f.has("recompute-granularity")
                or f.on("use-pipe-experts")
            )
        ),
        "enable-zero3 with use-ascend-mc2, reuse-fp32-param, recompute-granularity or use-pipe-experts: "
        "'zero3 cannot be used together with' them",
        "remove enable-zero3, or the other flag",
        MS.format(line=637),
    ),
    _rule(
        "moe-no-drop-pp",
        ("moe-no-drop", "pipeline-model-parallel-size"),
        lambda f: f.on("moe-no-drop") and f.num("pipeline-model-parallel-size") > 1,
        "moe-no-drop with pipeline-model-parallel-size above 1: '--moe-no-drop is not compatible with pp'",
        "remove moe-no-drop",
        MS.format(line=663),
    ),
    _rule(
        "param-and-grad-buffer-pad",
        ("param-and-grad-buffer-pad",),
        lambda f: f.on("param-and-grad-buffer-pad") and f.num("param-and-grad-buffer-pad") <= 0,
        "'--param-and-grad-buffer-pad must be greater than 0'",
        "give a positive param-and-grad-buffer-pad, or remove it",
        MS.format(line=666),
    ),
    _rule(
        "fused-rmsnorm-normalization",
        ("normalization", "use-fused-rmsnorm"),
        lambda f: f.on("use-fused-rmsnorm") and f["normalization"] != "RMSNorm",
        "use-fused-rmsnorm (the example's) needs normalization RMSNorm: '--use-fused-rmsnorm must enable "
        "with --normalization=RMSNorm'",
        "set normalization: RMSNorm (Qwen2.5-VL's), or use-fused-rmsnorm: false",
        MS.format(line=670),
    ),
    _rule(
        "fused-rmsnorm-nd-matmul",
        ("use-nd-matmul", "use-fused-rmsnorm"),
        lambda f: f.on("use-fused-rmsnorm") and f.on("use-nd-matmul"),
        "use-nd-matmul with use-fused-rmsnorm (the example's): 'ND_MatMul is not compatible with "
        "fused_rmsnorm'",
        "remove use-nd-matmul, or set use-fused-rmsnorm: false",
        MS.format(line=675),
    ),
    _rule(
        "fused-swiglu",
        ("swiglu", "use-fused-swiglu"),
        lambda f: f.on("use-fused-swiglu") and not f.on("swiglu"),
        "use-fused-swiglu (the example's) needs swiglu: '--use-fused-swiglu must enable with --swiglu'",
        "keep swiglu: true (Qwen2.5-VL's), or set use-fused-swiglu: false",
        MS.format(line=678),
    ),
    _rule(
        "fused-rotary-pos-emb",
        ("use-fused-rotary-pos-emb", "position-embedding-type"),
        lambda f: f.on("use-fused-rotary-pos-emb") and f["position-embedding-type"] != "rope",
        "use-fused-rotary-pos-emb needs position-embedding-type rope: '--use-fused-rotary-pos-emb must "
        "enable with--position-embedding-type=rope'",
        "set position-embedding-type: rope, or remove use-fused-rotary-pos-emb",
        MS.format(line=683),
    ),
    _rule(
        "alibi-fusion-attn-type",
        ("alibi-fusion-attn-type",),
        lambda f: f.has("alibi-fusion-attn-type") and f.num("alibi-fusion-attn-type") not in (0, 2),
        "'--alibi-fusion-attn-type only support for `0, 2`'",
        "give 0 or 2, or remove it",
        MS.format(line=687),
    ),
    _rule(
        "reuse-fp32-param-bf16",
        ("reuse-fp32-param", "bf16"),
        lambda f: f.on("reuse-fp32-param") and not f.on("bf16"),
        "reuse-fp32-param without bf16: '--reuse-fp32-param only support for `bf16`'",
        "keep bf16: true (the example's), or remove reuse-fp32-param",
        MS.format(line=689),
    ),
    _rule(
        "pipe-experts-multi-data",
        ("pipe-experts-multi-data", "use-pipe-experts"),
        lambda f: f.on("use-pipe-experts") and f.num("pipe-experts-multi-data") <= 0,
        "use-pipe-experts with pipe-experts-multi-data at most 0: '--pipe-experts-multi-data must greater "
        "than 0'",
        "give pipe-experts-multi-data of 1 or more",
        MS.format(line=692),
    ),
    _rule(
        "pipe-experts-multi-stream",
        ("pipe-experts-multi-stream", "use-pipe-experts", "sequence-parallel"),
        lambda f: (
            f.on("use-pipe-experts") and not f.on("sequence-parallel") and f.on("pipe-experts-multi-stream")
        ),
        "use-pipe-experts with pipe-experts-multi-stream needs sequence-parallel: "
        "'--pipe-experts-multi-stream "
        "can only be used with --sequence-parallel'",
        "add sequence-parallel: true, or remove pipe-experts-multi-stream",
        MS.format(line=694),
    ),
    _rule(
        "pipe-experts-experts",
        ("use-pipe-experts",),
        lambda f: f.on("use-pipe-experts") and not f.has("num-experts"),
        "use-pipe-experts on a model without experts: MindSpeed divides num_experts by "
        "expert-model-parallel-size and stops with a TypeError on none",
        "remove use-pipe-experts (Qwen2.5-VL is a dense model)",
        MS.format(line=696),
    ),
    _rule(
        "moe-alltoall-overlap-dispatcher",
        ("moe-alltoall-overlap-comm", "moe-token-dispatcher-type"),
        lambda f: f.on("moe-alltoall-overlap-comm") and f["moe-token-dispatcher-type"] != "alltoall",
        "moe-alltoall-overlap-comm needs moe-token-dispatcher-type alltoall",
        "set moe-token-dispatcher-type: alltoall, or remove moe-alltoall-overlap-comm",
        MS.format(line=702),
    ),
    _rule(
        "moe-adaptive-recompute-activation",
        ("moe-adaptive-recompute-activation", "moe-token-dispatcher-type"),
        lambda f: f.on("moe-adaptive-recompute-activation") and f["moe-token-dispatcher-type"] == "alltoall",
        "moe-adaptive-recompute-activation does not work with moe-token-dispatcher-type alltoall",
        "remove moe-adaptive-recompute-activation, or use the allgather dispatcher",
        MS.format(line=707),
    ),
    _rule(
        "moe-allgather-overlap-dispatcher",
        ("moe-allgather-overlap-comm", "moe-token-dispatcher-type"),
        lambda f: f.on("moe-allgather-overlap-comm") and f["moe-token-dispatcher-type"] != "allgather",
        "moe-allgather-overlap-comm needs moe-token-dispatcher-type allgather",
        "set moe-token-dispatcher-type: allgather, or remove moe-allgather-overlap-comm",
        MS.format(line=710),
    ),
    _rule(
        "moe-overlap-async-comm",
        ("moe-alltoall-overlap-comm", "moe-allgather-overlap-comm", "moe-permutation-async-comm"),
        lambda f: (
            (f.on("moe-alltoall-overlap-comm") or f.on("moe-allgather-overlap-comm"))
            and not f.on("moe-permutation-async-comm")
        ),
        "moe-alltoall-overlap-comm / moe-allgather-overlap-comm need moe-permutation-async-comm",
        "add moe-permutation-async-comm: true, or remove the overlap flag",
        MS.format(line=714),
    ),
    _rule(
        "moe-overlap-grouped-gemm",
        ("moe-alltoall-overlap-comm", "moe-allgather-overlap-comm", "moe-grouped-gemm"),
        lambda f: (
            (f.on("moe-alltoall-overlap-comm") or f.on("moe-allgather-overlap-comm"))
            and not f.on("moe-grouped-gemm")
        ),
        "moe-alltoall-overlap-comm / moe-allgather-overlap-comm need moe-grouped-gemm",
        "add moe-grouped-gemm: true, or remove the overlap flag",
        MS.format(line=716),
    ),
    _rule(
        "moe-alltoall-overlap-tp",
        ("moe-alltoall-overlap-comm", "tensor-model-parallel-size"),
        lambda f: (
            not (f.on("moe-tp-extend-ep") or f.on("moe-experts-pipeline-degree"))
            and f.on("moe-alltoall-overlap-comm")
            and f.num("tensor-model-parallel-size") > 1
        ),
        "moe-alltoall-overlap-comm with tensor-model-parallel-size above 1 needs moe-tp-extend-ep",
        "add moe-tp-extend-ep: true, or use tensor-model-parallel-size: 1",
        MS.format(line=718),
    ),
    _rule(
        "moe-experts-pipeline-degree",
        ("moe-experts-pipeline-degree",),
        lambda f: (
            f.on("moe-experts-pipeline-degree")
            and (
                f.num("moe-experts-pipeline-degree") < 2
                or not f.has("num-experts")
                or f.num("moe-experts-pipeline-degree") > f.num("num-experts")
                or f.num("num-experts") % f.num("moe-experts-pipeline-degree") != 0
                or f["moe-zero-memory"] != "disable"
                or f.num("tensor-model-parallel-size") <= 1
                or f.num("expert-model-parallel-size") > 1
                or f.on("moe-tp-extend-ep")
            )
        ),
        "moe-experts-pipeline-degree needs a degree of at least 2 dividing num-experts, "
        "tensor-model-parallel-size above 1, expert-model-parallel-size 1, moe-zero-memory disable and no "
        "moe-tp-extend-ep",
        "remove moe-experts-pipeline-degree (Qwen2.5-VL is a dense model)",
        MS.format(line=721),
    ),
    _rule(
        "moe-tp-extend-ep-needs",
        ("moe-tp-extend-ep", "moe-permutation-async-comm", "moe-grouped-gemm", "moe-expert-capacity-factor"),
        lambda f: (
            f.on("moe-tp-extend-ep")
            and f.has("num-experts")
            and (
                f.num("num-experts")
                % (f.num("tensor-model-parallel-size") * f.num("expert-model-parallel-size"))
                != 0
                or not (f.on("moe-permutation-async-comm") and f.on("moe-grouped-gemm"))
                or f.has("moe-expert-capacity-factor")
            )
        ),
        "moe-tp-extend-ep needs num-experts divisible by tensor-model-parallel-size x "
        "expert-model-parallel-size, moe-permutation-async-comm and moe-grouped-gemm, and no "
        "moe-expert-capacity-factor",
        "add moe-permutation-async-comm and moe-grouped-gemm (no moe-expert-capacity-factor), or remove "
        "moe-tp-extend-ep",
        MS.format(line=734),
    ),
    _rule(
        "moe-hierarchical-alltoallv",
        ("moe-hierarchical-alltoallv", "moe-alltoall-overlap-comm", "moe-tp-extend-ep"),
        lambda f: (
            f.on("moe-hierarchical-alltoallv")
            and (
                not f.on("moe-alltoall-overlap-comm")
                or not f.on("moe-tp-extend-ep")
                or f.num("tensor-model-parallel-size") <= 1
            )
        ),
        "moe-hierarchical-alltoallv needs moe-alltoall-overlap-comm, moe-tp-extend-ep and "
        "tensor-model-parallel-size above 1 (and TP within a node, EP x TP across nodes)",
        "remove moe-hierarchical-alltoallv",
        MS.format(line=744),
    ),
    _rule(
        "moe-zero-memory-num-layers",
        ("moe-zero-memory-num-layers", "moe-zero-memory"),
        lambda f: (
            f.has("moe-zero-memory-num-layers")
            and (
                f.num("moe-zero-memory-num-layers") < 0
                or f.num("moe-zero-memory-num-layers")
                > f.num("num-layers") // f.num("pipeline-model-parallel-size")
                or f["moe-zero-memory"] == "disable"
            )
        ),
        "moe-zero-memory-num-layers must be between 0 and the layers per pipeline stage, with "
        "moe-zero-memory "
        "enabled",
        "set moe-zero-memory: level0 (or level1) and a layer count per stage, or remove "
        "moe-zero-memory-num-layers",
        MS.format(line=750),
    ),
    _rule(
        "moe-zero-memory-allgather-overlap",
        ("moe-zero-memory", "moe-allgather-overlap-comm"),
        lambda f: f["moe-zero-memory"] != "disable" and f.on("moe-allgather-overlap-comm"),
        "moe-zero-memory does not support moe-allgather-overlap-comm",
        "remove one of them",
        MS.format(line=754),
    ),
    _rule(
        "moe-dynamic-padding",
        ("moe-dynamic-padding", "moe-no-drop"),
        lambda f: f.on("moe-dynamic-padding") and not f.on("moe-no-drop"),
        "moe-dynamic-padding needs moe-no-drop",
        "add moe-no-drop, or remove moe-dynamic-padding",
        MS.format(line=756),
    ),
    _rule(
        "moe-permutation-async-comm",
        ("moe-permutation-async-comm", "moe-model-type"),
        lambda f: f.on("moe-permutation-async-comm") and f["moe-model-type"] != "megatron_moe",
        "moe-permutation-async-comm needs moe-model-type megatron_moe",
        "remove moe-model-type (megatron_moe), or moe-permutation-async-comm",
        MS.format(line=758),
    ),
    _rule(
        "moe-bmm-mc2",
        ("moe-bmm-mc2", "moe-token-dispatcher-type", "moe-grouped-gemm"),
        lambda f: (
            f.on("moe-bmm-mc2")
            and (
                f["moe-model-type"] != "megatron_moe"
                or f["moe-token-dispatcher-type"] != "alltoall"
                or not f.on("moe-grouped-gemm")
                or f.on("moe-tp-extend-ep")
                or f.on("moe-alltoall-overlap-comm")
            )
        ),
        "moe-bmm-mc2 needs moe-model-type megatron_moe, moe-token-dispatcher-type alltoall and "
        "moe-grouped-gemm, without moe-tp-extend-ep or moe-alltoall-overlap-comm",
        "remove moe-bmm-mc2, or give those",
        MS.format(line=761),
    ),
    # context parallelism (the algorithm's own constraints; num-attention-heads is model.json's)
    _rule(
        "cp-alibi",
        ("position-embedding-type", "context-parallel-algo"),
        lambda f: (
            f.num("context-parallel-size") > 1
            and f["position-embedding-type"] == "alibi"
            and f["context-parallel-algo"] != "megatron_cp_algo"
        ),
        "position-embedding-type alibi with context-parallel-size above 1 needs context-parallel-algo "
        "megatron_cp_algo",
        "set context-parallel-algo: megatron_cp_algo",
        MS.format(line=769),
    ),
    _rule(
        "cp-ulysses",
        ("context-parallel-size", "seq-length", "tensor-model-parallel-size"),
        lambda f: (
            _cp(f, "ulysses_cp_algo")
            and (
                f.num("seq-length") % f.num("context-parallel-size") != 0
                or _heads_split(f, f.num("context-parallel-size") * f.num("tensor-model-parallel-size"))
            )
        ),
        "context-parallel-size with context-parallel-algo ulysses_cp_algo (the default) must divide "
        "seq-length, "
        "and context-parallel-size x tensor-model-parallel-size must divide num_attention_heads "
        "(model.json's "
        "text_decoder)",
        "choose a context-parallel-size that divides seq-length and the attention heads / TP",
        MS.format(line=771),
    ),
    _rule(
        "cp-megatron",
        ("context-parallel-size", "seq-length", "cp-window-size", "alibi-fusion-attn-type"),
        lambda f: (
            _cp(f, "megatron_cp_algo")
            and (
                f.num("seq-length") % (2 * f.num("context-parallel-size")) != 0
                or (
                    f["position-embedding-type"] == "alibi"
                    and not (f["alibi-fusion-attn-type"] == 2 and f["attention-mask-type"] == "causal")
                )
                or not (1 <= f.num("cp-window-size") < f.num("context-parallel-size"))
                or f.num("context-parallel-size") % f.num("cp-window-size") != 0
            )
        ),
        "context-parallel-algo megatron_cp_algo needs seq-length divisible by 2 x context-parallel-size, "
        "cp-window-size in [1, context-parallel-size) dividing it (and alibi-fusion-attn-type 2 with alibi)",
        "choose seq-length, context-parallel-size and cp-window-size accordingly",
        MS.format(line=776),
    ),
    _rule(
        "cp-hybrid",
        ("ulysses-degree-in-cp", "context-parallel-size", "seq-length", "cp-window-size"),
        lambda f: (
            _cp(f, "hybrid_cp_algo")
            and (
                not f.has("ulysses-degree-in-cp")
                or not (_ring(f)[0] > 1 and _ring(f)[1] == 0)
                or _heads_split(f, f.num("ulysses-degree-in-cp") * f.num("tensor-model-parallel-size"))
                or f.num("seq-length") % (2 * f.num("context-parallel-size")) != 0
                or not (1 <= f.num("cp-window-size") < _ring(f)[0])
                or _ring(f)[0] % f.num("cp-window-size") != 0
            )
        ),
        "context-parallel-algo hybrid_cp_algo needs ulysses-degree-in-cp dividing context-parallel-size (a "
        "ring "
        "of 2 or more), ulysses-degree-in-cp x tensor-model-parallel-size dividing num_attention_heads, "
        "seq-length divisible by 2 x context-parallel-size, cp-window-size in [1, ring) dividing the ring",
        "give ulysses-degree-in-cp (and cp-window-size) that fit, or another context-parallel-algo",
        MS.format(line=785),
    ),
    _rule(
        "cp-adaptive",
        ("context-parallel-size", "seq-length"),
        lambda f: _cp(f, "adaptive_cp_algo") and f.num("seq-length") % f.num("context-parallel-size") != 0,
        "context-parallel-algo adaptive_cp_algo needs seq-length divisible by context-parallel-size",
        "choose a context-parallel-size that divides seq-length",
        MS.format(line=803),
    ),
    _rule(
        "cp-hybrid-adaptive",
        ("ulysses-degree-in-cp", "context-parallel-size", "seq-length"),
        lambda f: (
            _cp(f, "hybrid_adaptive_cp_algo")
            and (
                not f.has("ulysses-degree-in-cp")
                or not (_ring(f)[0] > 1 and _ring(f)[1] == 0)
                or _heads_split(f, f.num("ulysses-degree-in-cp") * f.num("tensor-model-parallel-size"))
                or f.num("seq-length") % f.num("context-parallel-size") != 0
            )
        ),
        "context-parallel-algo hybrid_adaptive_cp_algo needs ulysses-degree-in-cp dividing "
        "context-parallel-size (a ring of 2 or more), ulysses-degree-in-cp x tensor-model-parallel-size "
        "dividing num_attention_heads and seq-length divisible by context-parallel-size",
        "give an ulysses-degree-in-cp that fits, or another context-parallel-algo",
        MS.format(line=806),
    ),
    _rule(
        "fp8",
        ("fp8-format",),
        lambda f: f.has("fp8-format"),
        "'NPU not supported FP8.'",
        "remove fp8-format",
        MS.format(line=822),
    ),
    _rule(
        "recompute-uniform",
        ("recompute-method", "recompute-activation-function", "recompute-norm"),
        lambda f: (
            f["recompute-method"] == "uniform"
            and (f.on("recompute-activation-function") or f.on("recompute-norm"))
        ),
        "recompute-method uniform is not compatible with recompute-activation-function or recompute-norm",
        "use recompute-method: block, or remove the other flag",
        MS.format(line=826),
    ),
    _rule(
        "recompute-selective",
        ("recompute-activation-function", "recompute-norm", "recompute-granularity"),
        lambda f: (
            f["recompute-granularity"] == "selective"
            and (f.on("recompute-activation-function") or f.on("recompute-norm"))
        ),
        "recompute-activation-function and recompute-norm are not compatible with recompute-granularity "
        "selective",
        "remove them, or use recompute-granularity: full",
        MS.format(line=833),
    ),
    _rule(
        "recompute-norm-legacy",
        ("recompute-norm", "use-legacy-models"),
        lambda f: f.on("recompute-norm") and f.on("use-legacy-models"),
        "'--recompute-norm is only supported with mcore models' (use-legacy-models is set)",
        "remove use-legacy-models",
        MS.format(line=838),
    ),
    _rule(
        "mcore-only-legacy-features",
        ("use-nanopipe", "adaptive-recompute-device-swap"),
        lambda f: (
            (f.on("use-nanopipe") or f.on("adaptive-recompute-device-swap")) and not f.on("use-legacy-models")
        ),
        "use-nanopipe and adaptive-recompute-device-swap are 'not available with mcore models' (MindSpeed-MM "
        "builds mcore models)",
        "remove use-nanopipe / adaptive-recompute-device-swap",
        MS.format(line=840),
    ),
    _rule(
        "adaptive-recompute",
        ("adaptive-recompute-device-size", "recompute-granularity", "recompute-method", "swap-attention"),
        lambda f: (
            _adaptive_recompute(f)
            and (
                f.has("recompute-granularity")
                or f.has("recompute-method")
                or f.on("recompute-activation-function")
                or f.on("swap-attention")
                or f.on("recompute-in-advance")
                or f.on("recompute-in-bubble")
                or f.on("memory-fragmentation")
            )
        ),
        "adaptive selective recompute (adaptive-recompute-device-size) is not compatible with "
        "recompute-granularity, recompute-method, recompute-activation-function, swap-attention, "
        "recompute-in-advance, recompute-in-bubble or memory-fragmentation",
        "remove adaptive-recompute-device-size, or the other flags",
        MS.format(line=844),
    ),
    _rule(
        "memory-fragmentation",
        ("memory-fragmentation", "use-fused-rotary-pos-emb"),
        lambda f: f.on("memory-fragmentation") and f.on("use-fused-rotary-pos-emb"),
        "memory-fragmentation is not compatible with use-fused-rotary-pos-emb",
        "remove one of them",
        MS.format(line=856),
    ),
    _rule(
        "smart-swap",
        ("smart-swap", "memory-fragmentation", "adaptive-recompute-device-size"),
        lambda f: f.on("smart-swap") and (_adaptive_recompute(f) or f.on("memory-fragmentation")),
        "smart-swap is not compatible with adaptive selective recompute or memory-fragmentation",
        "remove smart-swap, or the other flag",
        MS.format(line=859),
    ),
    _rule(
        "adaptive-memory-optimization",
        ("adaptive-memory-optimization", "ampipe-degree", "recompute-granularity", "recompute-method"),
        lambda f: (
            f.on("adaptive-memory-optimization")
            and (
                f.num("ampipe-degree") > 1
                or _adaptive_recompute(f)
                or f.has("recompute-granularity")
                or f.has("recompute-method")
                or f.on("recompute-activation-function")
                or f.on("swap-attention")
                or f.on("recompute-in-bubble")
                or f.on("memory-fragmentation")
            )
        ),
        "adaptive-memory-optimization is not compatible with ampipe-degree above 1, adaptive recompute "
        "(adaptive-recompute-device-size), "
        "recompute-granularity, recompute-method, recompute-activation-function, swap-attention, "
        "recompute-in-bubble or memory-fragmentation",
        "remove adaptive-memory-optimization, or the other flags",
        MS.format(line=862),
    ),
    _rule(
        "sparse-mode",
        ("sparse-mode", "use-flash-attn", "context-parallel-size"),
        lambda f: (
            (f.on("use-flash-attn") or f.num("context-parallel-size") > 1)
            and f.num("sparse-mode") not in (0, 2)
        ),
        "with flash attention (use-flash-attn, or context-parallel-size above 1, which turns it on) "
        "'Only supports sparse modes 0 and 2'",
        "set sparse-mode: 0 or 2",
        MS.format(line=873),
    ),
    _rule(
        "mc2-coc",
        ("use-ascend-mc2", "use-ascend-coc"),
        lambda f: f.on("use-ascend-mc2") and f.on("use-ascend-coc"),
        "use-ascend-mc2 with use-ascend-coc: '--mc2 and coc can not be used together'",
        "remove one of them",
        MS.format(line=894),
    ),
    _rule(
        "nd-matmul",
        ("use-nd-matmul", "normalization", "nd1-dim1-size", "nd2-dim1-size"),
        lambda f: (
            f.on("use-nd-matmul")
            and (
                f["normalization"] == "LayerNorm"
                or f.has("load")
                or f.has("pretrained-checkpoint")
                or f.num("tensor-model-parallel-size") % f.num("nd1-dim1-size") != 0
                or f.num("tensor-model-parallel-size") % f.num("nd2-dim1-size") != 0
            )
        ),
        "use-nd-matmul does not work with normalization LayerNorm or with weights to load (the plan loads "
        "the "
        "converted weights with load), and needs tensor-model-parallel-size divisible by nd1-dim1-size and "
        "nd2-dim1-size",
        "remove use-nd-matmul",
        MS.format(line=897),
    ),
    _rule(
        "recompute-in-advance",
        ("recompute-in-advance",),
        lambda f: f.on("recompute-in-advance"),
        "recompute-in-advance needs a virtual pipeline: 'recompute_in_advance only support pipelining with "
        "interleaving' (MindSpeed-MM 2.1.0 refuses num-layers-per-virtual-pipeline-stage)",
        "remove recompute-in-advance",
        MS.format(line=913),
    ),
    _rule(
        "recompute-in-bubble",
        ("recompute-in-bubble",),
        lambda f: f.on("recompute-in-bubble"),
        "recompute-in-bubble needs a virtual pipeline: 'recompute_in_bubble only support pipelining with "
        "interleaving' (MindSpeed-MM 2.1.0 refuses num-layers-per-virtual-pipeline-stage)",
        "remove recompute-in-bubble",
        MS.format(line=918),
    ),
    _rule(
        "noop-layers",
        ("noop-layers",),
        _noop_out_of_range,
        "noop-layers must be comma-separated layer numbers in [0, num_layers) (model.json's text_decoder "
        "num_layers)",
        "give layer numbers below num_layers, or remove noop-layers",
        MS.format(line=934),
    ),
    _rule(
        "ampipe",
        ("ampipe-degree",),
        lambda f: f.num("ampipe-degree") > 1,
        "ampipe-degree above 1 needs a MoE model with moe-model-type deepspeed_moe (use-legacy-models only), "
        "expert-model-parallel-size above 1 and use-flash-attn ('ampipe only supports MoE model', "
        "'ampipe only supports deepspeed_moe'); MindSpeed-MM builds MCore models",
        "remove ampipe-degree",
        MS.format(line=940),
    ),
    _rule(
        "tp-2d",
        ("tp-2d", "sequence-parallel", "use-fused-rmsnorm", "tp-x", "tp-y"),
        lambda f: (
            f.on("tp-2d")
            and (
                (f.on("sequence-parallel") and f.num("tensor-model-parallel-size") > 1)
                or f.on("use-fused-rmsnorm")
                or f.on("use-nanopipe")
                or f.num("ampipe-degree") > 1
                or f["context-parallel-algo"] not in ("megatron_cp_algo", "ulysses_cp_algo")
                or f.on("use-ascend-coc")
                or f.num("tensor-model-parallel-size") // f.num("tp-x") != f.num("tp-y")
                or (f.num("expert-model-parallel-size") > 1 and f["moe-token-dispatcher-type"] != "allgather")
            )
        ),
        "tp-2d does not work with sequence-parallel, use-fused-rmsnorm (the example's), use-nanopipe (with "
        "use-legacy-models), ampipe or use-ascend-coc, needs context-parallel-algo megatron_cp_algo or "
        "ulysses_cp_algo, tensor-model-parallel-size = tp-x x tp-y, and with expert parallelism the "
        "allgather moe-token-dispatcher-type",
        "remove tp-2d, or set use-fused-rmsnorm: false and tp-x x tp-y = tensor-model-parallel-size",
        MS.format(line=973),
    ),
    _rule(
        "expert-interval",
        ("expert-interval",),
        lambda f: f.num("expert-interval") <= 0 or f.num("expert-interval") > f.num("num-layers"),
        "'--expert-interval must be between 1 and num layers' (model.json's text_decoder num_layers)",
        "give an expert-interval from 1 to num_layers, or remove it",
        MS.format(line=991),
    ),
    _rule(
        "gemm-gradient-accumulation-fusion",
        ("gemm-gradient-accumulation-fusion", "moe-grouped-gemm"),
        lambda f: f.on("gemm-gradient-accumulation-fusion") and not f.on("moe-grouped-gemm"),
        "gemm-gradient-accumulation-fusion needs moe-grouped-gemm",
        "remove gemm-gradient-accumulation-fusion",
        MS.format(line=997),
    ),
    _rule(
        "reset-attention-mask",
        ("reset-attention-mask", "context-parallel-algo"),
        lambda f: (
            f.on("reset-attention-mask")
            and f["attention-mask-type"] == "causal"
            and f["context-parallel-algo"] != "megatron_cp_algo"
        ),
        "reset-attention-mask with attention-mask-type causal needs context-parallel-algo megatron_cp_algo: "
        "'accelerated eod reset mode only support ring attention'",
        "set context-parallel-algo: megatron_cp_algo, or remove reset-attention-mask",
        MS.format(line=1008),
    ),
    _rule(
        "cp-kv-cache-policy",
        ("context-parallel-kv-cache-policy", "context-parallel-size"),
        lambda f: f.has("context-parallel-kv-cache-policy") and f.num("context-parallel-size") == 1,
        "context-parallel-kv-cache-policy needs context-parallel-size above 1 (CP turns flash attention on)",
        "remove context-parallel-kv-cache-policy, or set context-parallel-size above 1",
        MS.format(line=1012),
    ),
    _rule(
        "cp-cache-interval",
        ("context-parallel-cache-interval", "context-parallel-kv-cache-policy"),
        lambda f: (
            f.num("context-parallel-cache-interval") != 0
            and (
                not f.has("context-parallel-kv-cache-policy")
                or f.num("context-parallel-cache-interval") >= f.num("num-layers")
                or f.num("context-parallel-cache-interval") < 0
            )
        ),
        "context-parallel-cache-interval needs context-parallel-kv-cache-policy and a value in [0, "
        "num_layers)",
        "remove context-parallel-cache-interval",
        MS.format(line=1021),
    ),
    _rule(
        "ulysses-allgather-kv",
        (
            "use-ulysses-allgather-kv",
            "context-parallel-size",
            "context-parallel-algo",
            "group-query-attention",
        ),
        lambda f: (
            f.on("use-ulysses-allgather-kv")
            and (
                f.num("context-parallel-size") == 1
                or f["context-parallel-algo"] != "ulysses_cp_algo"
                or not f.on("group-query-attention")
            )
        ),
        "use-ulysses-allgather-kv needs context-parallel-size above 1, context-parallel-algo ulysses_cp_algo "
        "and group-query-attention",
        "remove use-ulysses-allgather-kv, or give those",
        MS.format(line=1035),
    ),
    _rule(
        "swap-attention-lora",
        ("swap-attention", "lora-target-modules"),
        lambda f: f.on("swap-attention") and bool(f["lora-target-modules"]),
        "'swap attention is not compatible with LoRA' (lora-target-modules)",
        "remove swap-attention, or lora-target-modules",
        MS.format(line=1048),
    ),
    _rule(
        "legacy-overlap-reuse-fp32",
        ("reuse-fp32-param", "overlap-param-gather", "use-legacy-models"),
        lambda f: f.on("use-legacy-models") and f.on("overlap-param-gather") and f.on("reuse-fp32-param"),
        "with use-legacy-models, overlap-param-gather does not support reuse-fp32-param",
        "remove reuse-fp32-param (or use-legacy-models)",
        MS.format(line=1001),
    ),
    # -- Megatron-LM's parse_args, MindSpeed-MM's pretrain --------------------------------------------------
    _rule(
        "yaml-cfg-legacy",
        ("yaml-cfg", "use-legacy-models"),
        lambda f: f.has("yaml-cfg") and f.on("use-legacy-models"),
        "'Yaml config is not supported with legacy models.' (yaml-cfg with use-legacy-models)",
        "remove use-legacy-models",
        MEGATRON.format(line=65),
    ),
    _rule(
        "retro-project-dir",
        ("retro-project-dir",),
        lambda f: f.has("retro-project-dir"),
        "retro-project-dir loads a Retro project's config.json over the arguments (Megatron's "
        "load_retro_args: it must hold config.json); MindSpeed-MM trains no Retro model",
        "remove retro-project-dir",
        MEGATRON.format(line=82),
    ),
    *(
        _rule(
            f"{key}-zero",
            (key,),
            _is_zero(key),
            f"{key} is 0: 'save_interval, log_interval, and eval_interval cannot be 0' (MindSpeed-MM's "
            "pretrain)",
            f"give {key} of 1 or more",
            "MindSpeed-MM 2.1.0 mindspeed_mm/training.py:175 (pretrain)",
        )
        for key in ("save-interval", "log-interval", "eval-interval")
    ),
    _rule(
        "split-rank",
        ("pipeline-model-parallel-split-rank", "pipeline-model-parallel-size"),
        lambda f: (
            f.num("pipeline-model-parallel-size") > 1
            and f.has("pipeline-model-parallel-split-rank")
            and f.num("pipeline-model-parallel-split-rank") >= f.num("pipeline-model-parallel-size")
        ),
        "pipeline-model-parallel-split-rank must be below pipeline-model-parallel-size",
        "give a split rank below pipeline-model-parallel-size, or remove it",
        MM.format(line=133),
    ),
    _rule(
        "tp-comm-overlap",
        ("tp-comm-overlap", "sequence-parallel"),
        lambda f: f.on("tp-comm-overlap") and not f.on("sequence-parallel"),
        "tp-comm-overlap needs sequence-parallel ('Tensor parallel communication/GEMM overlap can happen "
        "only "
        "when sequence parallelism is enabled')",
        "remove tp-comm-overlap (MindSpeed turns it off on NPUs anyway)",
        MM.format(line=139),
    ),
    _rule(
        "checkpoint-activations",
        ("checkpoint-activations",),
        lambda f: f.on("checkpoint-activations"),
        "'--checkpoint-activations is no longer valid': MindSpeed-MM's validate_args exits",
        "remove it; use recompute-granularity and recompute-method",
        MM.format(line=156),
    ),
    _rule(
        "micro-batch-size",
        ("micro-batch-size",),
        lambda f: f.num("micro-batch-size") <= 0,
        "'args.micro_batch_size must be greater than 0'",
        "give a micro-batch-size of 1 or more",
        MM.format(line=186),
    ),
    _rule(
        "global-batch-size",
        ("global-batch-size",),
        lambda f: f.has("global-batch-size") and f.num("global-batch-size") <= 0,
        "'args.global_batch_size must be greater than 0'",
        "give a positive global-batch-size",
        MM.format(line=192),
    ),
    _rule(
        "overlap-param-gather",
        ("overlap-param-gather", "use-distributed-optimizer", "overlap-grad-reduce"),
        lambda f: (
            f.on("overlap-param-gather")
            and not (f.on("use-distributed-optimizer") and f.on("overlap-grad-reduce"))
        ),
        "overlap-param-gather needs use-distributed-optimizer and overlap-grad-reduce",
        "add overlap-grad-reduce: true (and use-distributed-optimizer), or remove overlap-param-gather",
        MM.format(line=226),
    ),
    _rule(
        "fp16-bf16",
        ("fp16", "bf16"),
        lambda f: f.on("fp16") and f.on("bf16"),
        "fp16 with bf16 (the example's): 'args.bf16 must be false when args.fp16 is true'",
        "remove fp16, or set bf16: false",
        MM.format(line=236),
    ),
    _rule(
        "num-dataset-builder-threads",
        ("num-dataset-builder-threads",),
        lambda f: f.num("num-dataset-builder-threads") <= 0,
        "'args.num_dataset_builder_threads should > 0'",
        "give 1 or more",
        MM.format(line=264),
    ),
    _rule(
        "lr-warmup-samples",
        ("lr-warmup-samples",),
        lambda f: f.on("train-iters") and f.num("lr-warmup-samples") != 0,
        "lr-warmup-samples with train-iters: 'expected iteration-based learning rate warmup'",
        "remove lr-warmup-samples (use lr-warmup-fraction or lr-warmup-iters)",
        MM.format(line=285),
    ),
    _rule(
        "lr-warmup-iters",
        ("lr-warmup-iters", "lr-warmup-fraction"),
        lambda f: f.on("train-iters") and f.has("lr-warmup-fraction") and f.num("lr-warmup-iters") != 0,
        "lr-warmup-iters with lr-warmup-fraction (the example's): 'can only specify one of "
        "lr-warmup-fraction "
        "and lr-warmup-iters'",
        "remove lr-warmup-iters, or set lr-warmup-fraction: null",
        MM.format(line=290),
    ),
    _rule(
        "sample-based",
        ("train-samples", "lr-decay-iters", "lr-warmup-iters", "lr-warmup-samples"),
        lambda f: (
            f.on("train-samples")
            and not f.on("train-iters")
            and (
                f.has("lr-decay-iters")
                or f.num("lr-warmup-iters") != 0
                or (f.has("lr-warmup-fraction") and f.num("lr-warmup-samples") != 0)
            )
        ),
        "sample-based training (train-samples) takes no lr-decay-iters or lr-warmup-iters, and "
        "lr-warmup-samples only without lr-warmup-fraction",
        "use lr-decay-samples / lr-warmup-fraction with train-samples",
        MM.format(line=299),
    ),
    _rule(
        "rampup-batch-size",
        ("rampup-batch-size", "global-batch-size"),
        _rampup_broken,
        "rampup-batch-size takes START INCREMENT SAMPLES (all above 0), global-batch-size above START by a "
        "multiple of INCREMENT and each batch size of the ramp divisible by micro-batch-size x data-parallel "
        "size (Megatron's micro-batch calculator)",
        "give e.g. rampup-batch-size: [START, INCREMENT, SAMPLES] that fits, or remove it",
        CALCULATOR.format(line=124),
    ),
    _rule(
        "encoder-num-layers",
        ("encoder-num-layers",),
        lambda f: f.has("encoder-num-layers"),
        "'cannot have both num-layers and encoder-num-layers specified' (num-layers comes from model.json)",
        "remove encoder-num-layers",
        MM.format(line=309),
    ),
    _rule(
        "seq-length-required",
        ("seq-length", "encoder-seq-length"),
        lambda f: not f.has("seq-length") and not f.has("encoder-seq-length"),
        "seq-length is removed (the example's is gone): 'args.encoder_seq_length must be not None when "
        "args.seq_length is None'",
        "give seq-length (the example's is 1024)",
        MM.format(line=343),
    ),
    _rule(
        "save-interval-required",
        ("save-interval",),
        lambda f: f.has("save") and not f.has("save-interval"),
        "save-interval is removed while the plan saves checkpoints (save): 'args.save_interval must is not "
        "None, when args.save is not None'",
        "give save-interval (the example's is 10000)",
        MM.format(line=353),
    ),
    _rule(
        "encoder-seq-length",
        ("encoder-seq-length",),
        lambda f: f.has("encoder-seq-length") and f.has("seq-length"),
        "'args.encoder_seq_length must be None if args.seq_length is not None' (seq-length is the example's)",
        "remove encoder-seq-length; set seq-length",
        MM.format(line=340),
    ),
    _rule(
        "seq-length-max-position",
        ("seq-length", "max-position-embeddings"),
        lambda f: f.has("seq-length") and f.num("max-position-embeddings") < f.num("seq-length"),
        "seq-length is above max_position_embeddings (model.json's text_decoder): "
        "'args.max_position_embeddings should >= args.seq_length'",
        "give a seq-length at most max_position_embeddings",
        MM.format(line=347),
    ),
    _rule(
        "decoder-seq-length",
        ("decoder-seq-length",),
        lambda f: (
            f.has("decoder-seq-length") and f.num("max-position-embeddings") < f.num("decoder-seq-length")
        ),
        "decoder-seq-length is above max_position_embeddings (model.json's text_decoder)",
        "give a decoder-seq-length at most max_position_embeddings, or remove it",
        MM.format(line=349),
    ),
    _rule(
        "fp16-lm-cross-entropy",
        ("fp16-lm-cross-entropy", "fp16"),
        lambda f: f.on("fp16-lm-cross-entropy") and not f.on("fp16"),
        "'lm cross entropy in fp16 only support in fp16 mode.' (bf16 is the example's)",
        "remove fp16-lm-cross-entropy",
        MM.format(line=356),
    ),
    _rule(
        "fp32-residual-connection",
        ("fp32-residual-connection", "bf16"),
        lambda f: f.on("fp32-residual-connection") and not (f.on("fp16") or f.on("bf16")),
        "'residual connection in fp32 only supported when using fp16 or bf16.'",
        "keep bf16: true (the example's), or remove fp32-residual-connection",
        MM.format(line=358),
    ),
    _rule(
        "moe-grouped-gemm-bf16",
        ("moe-grouped-gemm", "bf16"),
        lambda f: f.on("moe-grouped-gemm") and not f.on("bf16"),
        "'Currently GroupedGEMM for MoE only supports bf16 dtype.'",
        "keep bf16: true (the example's), or remove moe-grouped-gemm",
        MM.format(line=362),
    ),
    _rule(
        "recompute-method-selective",
        ("recompute-method", "recompute-granularity"),
        lambda f: f["recompute-granularity"] == "selective" and f.has("recompute-method"),
        "recompute-method with recompute-granularity selective: 'recompute method is not yet supported for "
        "selective recomputing granularity'",
        "remove recompute-method, or use recompute-granularity: full",
        MM.format(line=402),
    ),
    _rule(
        "cuda-device-max-connections",
        (ENV + "CUDA_DEVICE_MAX_CONNECTIONS", "sequence-parallel"),
        lambda f: (
            f[ENV + "CUDA_DEVICE_MAX_CONNECTIONS"] != "1"
            and (
                (f.on("sequence-parallel") and f.num("tensor-model-parallel-size") > 1)
                or not f.given("no-async-tensor-model-parallel-allreduce")
            )
        ),
        "env CUDA_DEVICE_MAX_CONNECTIONS must be 1 (the example's export): 'Using sequence parallelism "
        "requires setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1' (and so does the async "
        "tensor-parallel all-reduce, on unless no-async-tensor-model-parallel-allreduce)",
        "remove env.CUDA_DEVICE_MAX_CONNECTIONS (the example exports 1)",
        MM.format(line=419),
    ),
    _rule(
        "retro-add-retriever",
        ("retro-add-retriever",),
        lambda f: f.on("retro-add-retriever"),
        "retro-add-retriever needs train-samples (not train-iters), no sequence-parallel and "
        "pipeline-model-parallel-size 1, and a Retro project (retro-project-dir); MindSpeed-MM trains no "
        "Retro "
        "model",
        "remove retro-add-retriever",
        MM.format(line=435),
    ),
    _rule(
        "decoupled-lr",
        ("decoupled-lr", "decoupled-min-lr", "use-dist-ckpt"),
        lambda f: (
            (f.has("decoupled-lr") or f.has("decoupled-min-lr"))
            and (f.on("use-legacy-models") or f.on("use-dist-ckpt"))
        ),
        "decoupled-lr / decoupled-min-lr do not work with use-legacy-models or use-dist-ckpt",
        "remove decoupled-lr / decoupled-min-lr, or the other flag",
        MM.format(line=447),
    ),
    _rule(
        "rotary-interleaved",
        ("rotary-interleaved", "no-rope-fusion", "use-legacy-models"),
        lambda f: f.on("rotary-interleaved") and (not f.given("no-rope-fusion") or f.on("use-legacy-models")),
        "rotary-interleaved does not work with rope fusion (on unless no-rope-fusion) or use-legacy-models",
        "add no-rope-fusion: true, or remove rotary-interleaved",
        MM.format(line=455),
    ),
    _rule(
        "no-position-embedding",
        ("no-position-embedding", "position-embedding-type"),
        lambda f: f.given("no-position-embedding") and f["position-embedding-type"] != "rope",
        "'--no-position-embedding is deprecated, use --position-embedding-type'",
        "remove no-position-embedding; set position-embedding-type",
        MM.format(line=462),
    ),
    _rule(
        "moe-spec",
        ("spec", "num-experts"),
        lambda f: f.has("num-experts") and f.has("spec"),
        "'Model Spec must be None when using MoEs'",
        "remove spec",
        MM.format(line=468),
    ),
    _rule(
        "ep-experts-divisible",
        ("expert-model-parallel-size",),
        lambda f: (
            f.num("expert-model-parallel-size") > 1
            and f.has("num-experts")
            and (f.num("num-experts") % f.num("expert-model-parallel-size") != 0 or f.on("fp16"))
        ),
        "expert-model-parallel-size must divide num-experts, and does not work with fp16 (use bf16)",
        "choose an expert-model-parallel-size that divides num-experts",
        MM.format(line=477),
    ),
    _rule(
        "dist-ckpt-legacy",
        ("use-dist-ckpt", "use-legacy-models"),
        lambda f: f.on("use-dist-ckpt") and f.on("use-legacy-models"),
        "'--use-dist-ckpt is not supported in legacy models.'",
        "remove use-legacy-models",
        MM.format(line=484),
    ),
    _rule(
        "data-sources",
        ("mock-data", "data-path", "train-data-path", "valid-data-path", "test-data-path"),
        lambda f: (
            sum(
                (
                    f.on("mock-data"),
                    f.has("data-path") and bool(f["data-path"]),
                    any(f.has(k) and bool(f[k]) for k in SPLIT_DATA),
                )
            )
            > 1
        ),
        "give at most one of mock-data, data-path and train/valid/test-data-path (MindSpeed-MM reads "
        "data.json: "
        "none is needed)",
        "remove them",
        MM.format(line=487),
    ),
    _rule(
        "use-tp-pp-dp-mapping",
        ("use-tp-pp-dp-mapping", "context-parallel-size", "expert-model-parallel-size"),
        lambda f: f.on("use-tp-pp-dp-mapping") and f.num("expert-model-parallel-size") > 1,
        "use-tp-pp-dp-mapping does not work with expert-model-parallel-size above 1",
        "remove use-tp-pp-dp-mapping",
        MM.format(line=493),
    ),
    _rule(
        "deterministic-mode",
        ("deterministic-mode", "use-flash-attn"),
        lambda f: (
            f.on("deterministic-mode")
            and (
                f.on("use-flash-attn")
                or f.num("context-parallel-size") > 1
                or f[ENV + "NCCL_ALGO"] not in NCCL_ALGOS
            )
        ),
        "deterministic-mode needs no flash attention (use-flash-attn; context-parallel-size above 1 turns "
        "it on) "
        f"and env NCCL_ALGO set to one of {', '.join(NCCL_ALGOS)} ('Flash attention can not be used in "
        "deterministic mode.')",
        "remove deterministic-mode, or set env.NCCL_ALGO (e.g. Ring) without flash attention",
        MM.format(line=498),
    ),
)


def broken_rules(flags: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[Rule]:
    """The rules the flags break (`flags`: what the plan hands pretrain_vlm.py, model.json's sizes in)."""
    view = Flags(flags, defaults)
    out = []
    for rule in RULES:
        try:
            if rule.broken(view):
                out.append(rule)
        except (TypeError, ValueError, ZeroDivisionError):  # a value of the wrong kind: argparse refuses it
            continue
    return out


def problems(flags: Mapping[str, Any], user: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[Problem]:
    """A problem per broken rule, naming the first of its flags the user set (`user`: the user's training
    flags and env:NAME for the variables the experiment's env sets), else its first flag."""
    out = []
    for rule in broken_rules(flags, defaults):
        key = next((k for k in rule.keys if k in user), rule.keys[0])
        where = "env." + key.removeprefix(ENV) if key.startswith(ENV) else T + key
        out.append(Problem(where, f"{rule.message} [{rule.source}]", fix=rule.fix))
    return out
