"""MindSpeed-LLM 26.1.0 rules read from MindSpeed 26.1.0_core_r0.12.1's features for experts, tensor
parallelism, memory, optimizers, recomputation and the tokenizer
(mindspeed/features_manager/{moe,tensor_parallel,memory,optimizer,recompute,fusions,tokenizer}/), as data:
each a statement of the 26.1.0 coverage map (tests/diffval/maps/) that refuses a job our other rules
accepted. `rules.py` adds them to its table; the record and the source texts are `rule_types.py`'s.
"""

from __future__ import annotations

import re

from ascendfactory.backends.mindspeed_llm.rule_types import MS26, V26, Flags, Rule, together, without

FB = MS26 + "moe/fb_overlap.py MoEFwdBwdOverlapFeature"
MC2 = MS26 + "moe/moe_alltoall_mc2.py MoEAlltoAllMC2Feature.validate_args"


def layout_stages(layout: str) -> list[str]:
    """The chunks of --pipeline-model-parallel-layout, its repeats written out (`(tt)*2`, `t*3`), as
    fb_overlap.py _get_pipeline_model_parallel_layout_stage_count expands them: one per `|`."""
    text = str(layout).replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    return text.split("|")


def fb_overlap_virtual(f: Flags) -> bool:
    """fb_overlap.py _has_virtual_pipeline: with a layout, its chunks are a whole number of virtual stages
    per pipeline rank, more than one; without, num-layers-per-virtual-pipeline-stage is given."""
    if f.given("pipeline-model-parallel-layout"):
        stages, pp = (
            len(layout_stages(f["pipeline-model-parallel-layout"])),
            int(f.num("pipeline-model-parallel-size")),
        )
        return stages % pp == 0 and stages // pp > 1
    return f.given("num-layers-per-virtual-pipeline-stage")


def _fb(f: Flags) -> bool:
    """moe-fb-overlap given, outside the dualpipev schedule (whose own checks are the schedule's)."""
    return f.given("moe-fb-overlap") and f["schedules-method"] != "dualpipev"


def _fb_vpp_batches_broken(f: Flags) -> bool:
    """validate_args: in a virtual pipeline, global-batch-size // (micro-batch-size x PP x DP) above 1."""
    if not (f.given("moe-fb-overlap") and f.given("num-layers-per-virtual-pipeline-stage")):
        return False
    pp, tp, cp = (
        f.num(k)
        for k in ("pipeline-model-parallel-size", "tensor-model-parallel-size", "context-parallel-size")
    )
    dp = max(f.world_size // max(int(tp * pp * cp), 1), 1)
    return not f.num("global-batch-size") // (f.num("micro-batch-size") * pp * dp) > 1


def _fb_noop_broken(f: Flags) -> bool:
    """post_validate_args: noop-layers with moe-fb-overlap (not dualpipev) must lie in the last virtual
    stage: the first noop layer of the set at or above num-layers - num-layers-per-virtual-pipeline-stage
    (without a virtual pipeline that subtraction fails: refused too); with a layout, refused outright."""
    if not (_fb(f) and f.given("noop-layers")):
        return False
    if f.given("pipeline-model-parallel-layout") or not f.given("num-layers-per-virtual-pipeline-stage"):
        return True
    noop: set[int] = set()  # built as NoopLayersFeature.post_validate_args builds it, so that its first
    for x in str(f["noop-layers"]).split(
        ","
    ):  # element is the one fb_overlap.py reads (not always the least)
        noop.add(int(x))
    return list(noop)[0] < f.num("num-layers") - f.num("num-layers-per-virtual-pipeline-stage")


def _fb_empty_chunk(f: Flags) -> bool:
    """_validate_pipeline_model_parallel_layout_for_fb_overlap: each layout chunk holds a decoder layer."""
    if not (f.given("moe-fb-overlap") and f.given("pipeline-model-parallel-layout")):
        return False
    return any("t" not in chunk for chunk in layout_stages(f["pipeline-model-parallel-layout"]))


def _mc2_broken(f: Flags) -> bool:
    """MoEAlltoAllMC2Feature.validate_args beyond its dispatcher check (rules.py's rule of the key)."""
    if not f.given("moe-alltoall-mc2"):
        return False
    others = (
        "use-ascend-mc2",
        "moe-alltoall-overlap-comm",
        "moe-allgather-overlap-comm",
        "moe-fb-overlap",
        "moe-tp-extend-ep",
    )
    if any(f.given(k) for k in others):
        return True
    dispatcher = f["moe-token-dispatcher-type"]
    if dispatcher == "alltoall_seq":
        return f.num("tensor-model-parallel-size") != 1
    if dispatcher == "alltoall":
        etp = f.num(
            "expert-tensor-parallel-size"
            if f.given("expert-tensor-parallel-size")
            else "tensor-model-parallel-size"
        )
        return etp != 1 or f.given("moe-expert-capacity-factor")
    return False


RULES: tuple[Rule, ...] = (
    Rule(
        "moe-fb-overlap",
        together("moe-fb-overlap", "use-legacy-models"),
        "cannot be used with use-legacy-models (the forward-backward overlap is written for MCore models)",
        "remove use-legacy-models, or moe-fb-overlap",
        FB + ".validate_args",
        versions=V26,
    ),
    Rule(
        "moe-fb-overlap",
        _fb_vpp_batches_broken,
        "in a virtual pipeline (num-layers-per-virtual-pipeline-stage) needs global-batch-size // "
        "(micro-batch-size x pipeline-model-parallel-size x data-parallel size) above 1",
        "raise global-batch-size to more than twice micro-batch-size x pipeline-model-parallel-size x the "
        "data-parallel size, or remove moe-fb-overlap",
        FB + ".validate_args",
        versions=V26,
    ),
    Rule(
        "moe-fb-overlap",
        _fb_noop_broken,
        "with noop-layers (outside schedules-method dualpipev) needs a virtual pipeline "
        "(num-layers-per-virtual-pipeline-stage, no pipeline-model-parallel-layout) whose last virtual stage "
        "holds every noop layer (each at least num-layers - num-layers-per-virtual-pipeline-stage)",
        "move the noop-layers into the last virtual stage, or remove noop-layers or moe-fb-overlap",
        FB + ".post_validate_args",
        versions=V26,
    ),
    Rule(
        "moe-fb-overlap",
        _fb_empty_chunk,
        "needs a decoder layer (t) in every chunk of pipeline-model-parallel-layout",
        "move a decoder layer (t) into each chunk of pipeline-model-parallel-layout, or remove "
        "moe-fb-overlap",
        FB + "._validate_pipeline_model_parallel_layout_for_fb_overlap",
        versions=V26,
    ),
    Rule(
        "moe-alltoall-mc2",
        _mc2_broken,
        "cannot be used with use-ascend-mc2, moe-alltoall-overlap-comm, moe-allgather-overlap-comm, "
        "moe-fb-overlap or moe-tp-extend-ep; with moe-token-dispatcher-type alltoall_seq it needs "
        "tensor-model-parallel-size 1, with alltoall expert-tensor-parallel-size 1 and no "
        "moe-expert-capacity-factor (dropless)",
        "remove those flags (or set tensor-model-parallel-size / expert-tensor-parallel-size 1), or remove "
        "moe-alltoall-mc2",
        MC2,
        versions=V26,
    ),
    Rule(
        "moe-alltoall-overlap-comm",
        lambda f: (
            f.given("moe-alltoall-overlap-comm")
            and f["moe-token-dispatcher-type"] == "alltoall_seq"
            and f.num("tensor-model-parallel-size") > 1
            and not f.given("moe-tp-extend-ep")
        ),
        "with moe-token-dispatcher-type alltoall_seq and tensor-model-parallel-size above 1 needs "
        "moe-tp-extend-ep",
        "set moe-tp-extend-ep: true, or remove moe-alltoall-overlap-comm",
        MS26 + "moe/moe_alltoall_overlap.py MoEAlltoAllOverLapFeature.validate_args",
        versions=V26,
    ),
    Rule(
        "swap-optimizer",
        without("swap-optimizer", "use-distributed-optimizer"),
        "needs use-distributed-optimizer (it swaps the distributed optimizer's shards)",
        "set use-distributed-optimizer: true, or remove swap-optimizer",
        MS26 + "optimizer/swap_optimizer_feature.py SwapOptimizerFeature.validate_args",
        versions=V26,
    ),
)
