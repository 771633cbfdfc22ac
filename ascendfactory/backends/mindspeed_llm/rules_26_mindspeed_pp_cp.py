"""MindSpeed-LLM 26.1.0 rules read from MindSpeed 26.1.0_core_r0.12.1's features for pipeline and context
parallelism and its megatron_basic
(mindspeed/features_manager/{pipeline_parallel,context_parallel,megatron_basic}/), as data: each a
statement of the 26.1.0 coverage map (tests/diffval/maps/) that refuses a job our other rules accepted.
`rules.py` adds them to its table; the record and the source texts are `rule_types.py`'s.

26.1.0's context-parallel algorithm defaults to megatron_cp_algo (MindSpeed-LLM 26.1.0
mindspeed_llm/features_manager/context_parallel/context_parallel_feature.py register_args), not 2.1.0's
ulysses_cp_algo that `rule_types.DEFAULTS` holds, so these rules read the flag through `_algo`.
"""

from __future__ import annotations

import re
from typing import Any

from ascendfactory.backends.mindspeed_llm.rule_types import MS26, V26, Flags, Rule

CP = MS26 + "context_parallel/"
PP = MS26 + "pipeline_parallel/"


def _int(f: Flags, key: str) -> int:
    return int(f.num(key))


def _algo(f: Flags) -> str:
    """The context-parallel algorithm 26.1.0 runs: the flag, else its default megatron_cp_algo."""
    return str(f.flags.get("context-parallel-algo", "megatron_cp_algo"))


def _cp(f: Flags) -> int:
    return _int(f, "context-parallel-size")


def _hybrid_ring(f: Flags) -> int | None:
    """hybrid_cp_algo's ring: context-parallel-size / ulysses-degree-in-cp when that is a whole number above 1
    (ContextParallelFeature.validate_args refuses anything else first); None otherwise."""
    if not f.given("ulysses-degree-in-cp"):
        return None
    uly = _int(f, "ulysses-degree-in-cp")
    if uly == 0:
        return None
    ring, rest = divmod(_cp(f), uly)
    return ring if ring > 1 and rest == 0 else None


def _window_broken(f: Flags) -> bool:
    """Double-ring attention's cp-window-size: in [1, ring) and dividing the ring (the ring: CP under
    megatron_cp_algo, CP / ulysses-degree-in-cp under hybrid_cp_algo)."""
    if _cp(f) <= 1:
        return False
    if _algo(f) == "megatron_cp_algo":
        ring: int | None = _cp(f)
    elif _algo(f) == "hybrid_cp_algo":
        ring = _hybrid_ring(f)
    else:
        return False
    if ring is None:
        return False  # the ulysses-degree-in-cp rule
    window = _int(f, "cp-window-size")
    return not 1 <= window < ring or ring % window != 0


def _ulysses_split(f: Flags) -> int | None:
    """How far the attention heads are split besides TP: by CP under ulysses_cp_algo, by
    ulysses-degree-in-cp under hybrid_cp_algo (None: no such split, or a degree its own rule refuses)."""
    if _cp(f) <= 1:
        return None
    if _algo(f) == "ulysses_cp_algo":
        return _cp(f)
    if _algo(f) == "hybrid_cp_algo" and _hybrid_ring(f) is not None:
        return _int(f, "ulysses-degree-in-cp")
    return None


def _heads_broken(f: Flags) -> bool:
    split = _ulysses_split(f)
    if split is None:
        return False
    width = split * _int(f, "tensor-model-parallel-size")
    if width < 1:
        return False  # a TP below 1: the layout check refuses it
    head, rest = divmod(_int(f, "num-attention-heads"), width)
    return not (head >= 1 and rest == 0)


def _noop_range_broken(f: Flags) -> bool:
    """NoopLayersFeature.post_validate_args: each layer number in [0, num-layers) (its text checked by the
    other noop-layers rule)."""
    if not f.given("noop-layers"):
        return False
    items = str(f["noop-layers"]).split(",")
    if not all(x.isdigit() for x in items):
        return False  # the noop-layers text rule
    return any(int(x) >= _int(f, "num-layers") for x in items)


# -- pipeline-model-parallel-layout: the grammar of MindSpeed 26.1.0_core_r0.12.1
# mindspeed/core/pipeline_parallel/pipeline_model_parallel_layout/layout.py parse_str_to_list: commas are
# cosmetic; `(group)*n` and then `x*n` repeat; `|` splits stages; a stage's characters are layers, each of
# E (embedding), L (loss), t (transformer layer) or m (MTP layer).
LAYOUT_LAYERS = frozenset("ELtm")
_GROUP_TIMES = re.compile(r"\(([^)]+)\)\*(\d+)")
_CHAR_TIMES = re.compile(r"(.)\*(\d+)")


def layout_stages(text: str) -> list[str] | None:
    """The stages a layout text describes (each a string of layer letters), or None when the layout
    feature refuses its characters."""
    unrolled = text.replace(",", "")
    for pattern in (_GROUP_TIMES, _CHAR_TIMES):
        unrolled = pattern.sub(lambda m: m.group(1) * int(m.group(2)), unrolled)
    stages = unrolled.split("|")
    if any(ch not in LAYOUT_LAYERS for stage in stages for ch in stage):
        return None
    return stages


def _layout_broken(f: Flags) -> bool:
    """PipelineModelParallelLayoutFeature: its grammar; the flags it cannot be used with; the stage count a
    multiple of PP; with more stages than PP (a virtual pipeline: Megatron's validate_args sees
    stages / PP as num-virtual-stages-per-pipeline-rank) PP above 1 (above 2 without overlapped p2p
    communication) and no optimize-send-recv-comm."""
    if not f.given("pipeline-model-parallel-layout"):
        return False
    stages = layout_stages(str(f["pipeline-model-parallel-layout"]))
    if stages is None:
        return True
    pp = _int(f, "pipeline-model-parallel-size")
    if pp < 1:
        return False  # the layout check refuses it
    if (
        f["schedules-method"] == "dualpipev"
        or any(
            f.given(k)
            for k in (
                "pipeline-num-transformer-layers",
                "noop-layers",
                "recompute-in-bubble",
                "recompute-in-advance",
                "num-virtual-stages-per-pipeline-rank",
            )
        )
        # at PP 2 MindSpeed-LLM's TrainingBasicFeature hides the flag from the layout feature's pre-validation
        or (f.given("num-layers-per-virtual-pipeline-stage") and pp != 2)
        or len(stages) % pp != 0
    ):
        return True
    if len(stages) // pp > 1:
        return (
            f.given("optimize-send-recv-comm")
            or pp <= 1
            or (f.given("no-overlap-p2p-communication") and pp <= 2)
        )
    return False


# -- pipeline-num-transformer-layers: UnalignedPipelineFeature's nested lists ("[[2],[1,1]]": per pipeline
# stage, the layers of each virtual stage), read as MindSpeed 26.1.0_core_r0.12.1
# mindspeed/features_manager/pipeline_parallel/unaligned_pineline_feature.py parse_string_to_array reads
# them: only numbers, `*`, `[` and `]` count; `x*n` repeats the item before it.
_TOKENS = re.compile(r"\d+|\*|\[|\]")


def stage_layers(text: str) -> Any:
    """The value the feature reads from the text (raises where its parser raises)."""
    tokens = _TOKENS.findall(text)

    def items() -> list[Any]:
        out: list[Any] = []
        while tokens:
            token = tokens.pop(0)
            if token == "[":
                out.append(items())
            elif token == "]":
                return out
            elif token == "*":
                times = int(tokens.pop(0))
                last = out.pop()
                out.extend([last] * times)
            else:
                out.append(int(token))
        return out

    top = items()
    return top[0] if top else []


def _virtual_stages(f: Flags) -> int | None:
    """Megatron's virtual_pipeline_model_parallel_size (None without a virtual pipeline; MegatronBasicFeature
    turns 1 into None)."""
    pp = _int(f, "pipeline-model-parallel-size")
    if f.given("num-virtual-stages-per-pipeline-rank"):
        size = _int(f, "num-virtual-stages-per-pipeline-rank")
    elif f.given("num-layers-per-virtual-pipeline-stage"):
        per_virtual = _int(f, "num-layers-per-virtual-pipeline-stage")
        if pp < 1 or per_virtual < 1:
            return None  # refused by the layout check and Megatron's own rules
        size = _int(f, "num-layers") // pp // per_virtual
    else:
        return None
    return None if size == 1 else size


def _stage_layers_broken(f: Flags) -> bool:
    if not f.given("pipeline-num-transformer-layers"):
        return False
    if f.given("noop-layers") or f.given("num-layer-list"):
        return True
    try:
        stages = stage_layers(str(f["pipeline-num-transformer-layers"]))
    except (IndexError, ValueError):
        return True
    if not isinstance(stages, list) or len(stages) == 0:
        return True
    if len(stages) != _int(f, "pipeline-model-parallel-size"):
        return True
    virtual = _virtual_stages(f)
    total = 0
    for stage in stages:
        if not isinstance(stage, list):
            return True  # len() of a number: a TypeError there
        if (virtual is None and len(stage) != 1) or (virtual is not None and len(stage) != virtual):
            return True
        for num in stage:
            if not isinstance(num, int):
                return True  # a list compared with 0: a TypeError there
            total += num
    return total > _int(f, "num-layers")


RULES: tuple[Rule, ...] = (
    Rule(
        "cp-window-size",
        _window_broken,
        "must be in [1, ring size) and divide the ring size (context-parallel-size under megatron_cp_algo, "
        "26.1.0's default context-parallel-algo; context-parallel-size / ulysses-degree-in-cp under "
        "hybrid_cp_algo)",
        "set cp-window-size: 1 (the default), or a proper divisor of the ring size",
        CP + "context_parallel_feature.py ContextParallelFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "ulysses-degree-in-cp",
        lambda f: _cp(f) > 1 and _algo(f) == "hybrid_cp_algo" and _hybrid_ring(f) is None,
        "context-parallel-algo hybrid_cp_algo needs ulysses-degree-in-cp dividing context-parallel-size "
        "into a ring of 2 or more",
        "set ulysses-degree-in-cp to a divisor of context-parallel-size at most half of it, or "
        "context-parallel-algo: megatron_cp_algo",
        CP + "context_parallel_feature.py ContextParallelFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "num-attention-heads",
        _heads_broken,
        "with context parallelism must be a multiple of tensor-model-parallel-size x the ulysses degree "
        "(context-parallel-size under ulysses_cp_algo, ulysses-degree-in-cp under hybrid_cp_algo)",
        "set num-attention-heads to such a multiple (or remove it: it is read from the model), or lower "
        "tensor-model-parallel-size / the ulysses degree",
        CP + "ulysses_context_parallel.py and context_parallel_feature.py validate_args",
        versions=V26,
    ),
    Rule(
        "position-embedding-type",
        lambda f: _cp(f) > 1 and f["position-embedding-type"] == "alibi",
        "alibi is not supported with context parallelism (context-parallel-size above 1)",
        "use another position-embedding-type, or set context-parallel-size: 1",
        CP + "context_parallel_feature.py ContextParallelFeature.validate_args (and MindSpeed-LLM 26.1.0's)",
        versions=V26,
    ),
    Rule(
        "attention-mask-type",
        lambda f: (
            _cp(f) > 1
            and _algo(f) == "kvallgather_cp_algo"
            and f.flags.get("attention-mask-type") == "general"
        ),
        "general is not supported by context-parallel-algo kvallgather_cp_algo (causal only)",
        "set attention-mask-type: causal (the default), or another context-parallel-algo",
        CP + "context_parallel_feature.py ContextParallelFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "context-parallel-kv-cache-policy",
        lambda f: (
            bool(f["context-parallel-kv-cache-policy"])
            and _cp(f) > 1
            # the other algorithms' validate_args turn use_flash_attn on before this check
            and _algo(f) == "kvallgather_cp_algo"
            and not f.given("use-flash-attn")
        ),
        "needs use-flash-attn (under context-parallel-algo kvallgather_cp_algo, which does not turn it on)",
        "set use-flash-attn: true, or remove context-parallel-kv-cache-policy",
        CP + "context_parallel_kv_cache.py ContextParallelKvCacheFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "use-ulysses-allgather-kv",
        lambda f: (
            f.given("use-ulysses-allgather-kv")
            and _cp(f) > 1
            and _algo(f) == "ulysses_cp_algo"
            and not f.given("group-query-attention")
        ),
        "needs group-query-attention",
        "set group-query-attention: true (with num-query-groups), or remove use-ulysses-allgather-kv",
        CP + "context_parallel_kv_cache.py ContextParallelKvCacheFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "noop-layers",
        _noop_range_broken,
        "each layer number must be in [0, num-layers)",
        "give layer numbers from 0 to num-layers - 1, e.g. noop-layers: '0'",
        PP + "noop_layers.py NoopLayersFeature.post_validate_args",
        versions=V26,
    ),
    Rule(
        "recompute-in-bubble",
        lambda f: (
            f.given("recompute-in-bubble")
            and any(
                f.given(k)
                for k in (
                    "optimize-send-recv-comm",
                    "swap-attention",
                    "no-overlap-p2p-communication",
                    "no-align-grad-reduce",
                )
            )
        ),
        "cannot be used with optimize-send-recv-comm, swap-attention, no-overlap-p2p-communication or "
        "no-align-grad-reduce",
        "remove recompute-in-bubble, or those flags",
        PP + "ripipe_schedules_feature.py RiPipeSchedulesBubbleFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "recompute-in-advance",
        lambda f: (
            f.given("recompute-in-advance")
            and (
                f["recompute-method"] == "uniform"
                or not f.given("recompute-num-layers")
                or f.num("recompute-num-layers") == 0
                or _int(f, "pipeline-model-parallel-size") <= 1
                or not f.given("num-layers-per-virtual-pipeline-stage")
                or f.given("optimize-send-recv-comm")
                or f.given("no-align-grad-reduce")
            )
        ),
        "needs recompute-num-layers, a recompute-method other than uniform and the interleaved pipeline "
        "(pipeline-model-parallel-size 2 or more with num-layers-per-virtual-pipeline-stage); it cannot be "
        "used with optimize-send-recv-comm or no-align-grad-reduce",
        "remove recompute-in-advance, or set those flags",
        PP + "ripipe_schedules_feature.py RiPipeSchedulesAdvanceFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "pipeline-model-parallel-layout",
        _layout_broken,
        "must be stages of the layers E (embedding), t (transformer layer), m (MTP layer) and L (loss) split "
        "by '|' (with (...)*n and x*n repeats), a multiple of pipeline-model-parallel-size stages; more "
        "stages than that (a virtual pipeline) need pipeline-model-parallel-size above 1 (above 2 with "
        "no-overlap-p2p-communication) and no optimize-send-recv-comm; it cannot be used with "
        "schedules-method dualpipev, pipeline-num-transformer-layers, noop-layers, recompute-in-bubble, "
        "recompute-in-advance, num-virtual-stages-per-pipeline-rank or (unless "
        "pipeline-model-parallel-size is 2) num-layers-per-virtual-pipeline-stage",
        "write the layout in that grammar (e.g. 'Et|tL' for 2 layers on 2 stages), or remove it",
        PP + "pipeline_model_parallel_layout_feature.py (pre_validate_args, validate_args) and "
        "mindspeed/core/pipeline_parallel/pipeline_model_parallel_layout/layout.py parse_str_to_list",
        versions=V26,
    ),
    Rule(
        "pipeline-num-transformer-layers",
        _stage_layers_broken,
        "must be one list per pipeline stage (pipeline-model-parallel-size of them) of the layers of each "
        "virtual stage (one item without a virtual pipeline), e.g. '[[1],[1]]', summing to at most "
        "num-layers; it cannot be used with noop-layers or num-layer-list",
        "write it so, or remove pipeline-num-transformer-layers",
        PP + "unaligned_pineline_feature.py UnalignedPipelineFeature.validate_args",
        versions=V26,
    ),
)
