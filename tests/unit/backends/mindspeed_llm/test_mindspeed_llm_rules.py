"""MindSpeed-LLM / Megatron-LM rules across training flags (backends/mindspeed_llm/rules.py): each rule
refuses its own example and passes the same flags with the fix applied; a broken rule stops the plan naming
its key. Each rule was a case the differential harness found (we accepted, MindSpeed-LLM refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ascendfactory.backends.mindspeed_llm.rules import RULES, broken_rules
from ascendfactory.errors import ConfigError

# The flags a plan of the shipped full-4k template hands posttrain_gpt.py (the tiny demo model).
BASE: dict[str, Any] = {
    "use-mcore-models": True,
    "tensor-model-parallel-size": 1,
    "pipeline-model-parallel-size": 1,
    "num-layers": 2,
    "hidden-size": 64,
    "num-attention-heads": 4,
    "seq-length": 512,
    "max-position-embeddings": 512,
    "swiglu": True,
    "normalization": "RMSNorm",
    "position-embedding-type": "rope",
    "micro-batch-size": 1,
    "global-batch-size": 8,
    "train-iters": 10,
    "lr": 1.25e-6,
    "min-lr": 1.25e-7,
    "use-fused-rmsnorm": True,
    "use-fused-swiglu": True,
    "use-fused-rotary-pos-emb": True,
    "overlap-grad-reduce": True,
    "no-gradient-accumulation-fusion": True,
    "variable-seq-lengths": True,
    "save-interval": 10,
    "data-path": "/data/alpaca",
    "save": "/out/saved_checkpoints",
}
OFF = None  # in an example: the flag removed
MOE = {"num-experts": 8, "moe-token-dispatcher-type": "alltoall"}

# rule key -> (flags that break it, the same with the fix)
EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "batch-size": ({"batch-size": 4}, {}),
    "warmup": ({"warmup": 0.01}, {"lr-warmup-fraction": 0.01}),
    "model-parallel-size": ({"model-parallel-size": 2}, {"tensor-model-parallel-size": 2}),
    "train-samples": ({"train-samples": 8}, {"train-samples": 8, "train-iters": OFF}),
    "lr-decay-samples": ({"lr-decay-samples": 8}, {"lr-decay-iters": 8}),
    "lr-warmup-samples": ({"lr-warmup-samples": 8}, {"lr-warmup-samples": 0}),
    "rampup-batch-size": ({"rampup-batch-size": [1, 1, 8]}, {}),
    "lr-warmup-iters": ({"lr-warmup-fraction": 0.01, "lr-warmup-iters": 5}, {"lr-warmup-iters": 5}),
    "encoder-num-layers": ({"encoder-num-layers": 2}, {}),
    "encoder-seq-length": ({"encoder-seq-length": 512}, {}),
    "min-lr": ({"min-lr": 0.1}, {"min-lr": 1e-7}),
    "weight-decay-incr-style": (
        {"weight-decay-incr-style": "cosine"},
        {"weight-decay-incr-style": "cosine", "start-weight-decay": 0.0, "end-weight-decay": 0.1},
    ),
    "start-weight-decay": ({"start-weight-decay": 0.1}, {"weight-decay": 0.1}),
    "end-weight-decay": ({"end-weight-decay": 0.1}, {"weight-decay": 0.1}),
    "expert-model-parallel-size": (
        {"expert-model-parallel-size": 2},
        {"expert-model-parallel-size": 2, **MOE},
    ),
    "train-data-path": ({"train-data-path": ["/d/train"]}, {}),
    "valid-data-path": ({"valid-data-path": ["/d/valid"]}, {}),
    "test-data-path": ({"test-data-path": ["/d/test"]}, {"test-data-path": []}),  # [] is no data source
    "num-layers-per-virtual-pipeline-stage": (
        {"num-layers-per-virtual-pipeline-stage": 1},
        {"num-layers-per-virtual-pipeline-stage": 1, "pipeline-model-parallel-size": 2},
    ),
    "defer-embedding-wgrad-compute": (
        {"defer-embedding-wgrad-compute": True, "pipeline-model-parallel-size": 2},
        {
            "defer-embedding-wgrad-compute": True,
            "pipeline-model-parallel-size": 2,
            "no-gradient-accumulation-fusion": OFF,
        },
    ),
    "output-layer-slice-num": (
        {"output-layer-slice-num": 0},
        {"output-layer-slice-num": 2, "padded-vocab-size": 960},
    ),
    "neat-pack": ({"neat-pack": True}, {"neat-pack": True, "reset-position-ids": True}),
    "moe-alltoall-overlap-comm": (
        {"moe-alltoall-overlap-comm": True},
        {"moe-alltoall-overlap-comm": True, "moe-permutation-async-comm": True, "moe-grouped-gemm": True},
    ),
    "moe-allgather-overlap-comm": (
        {"moe-allgather-overlap-comm": True},
        {"moe-allgather-overlap-comm": True, "moe-permutation-async-comm": True, "moe-grouped-gemm": True},
    ),
    "moe-zero-memory-num-layers": (
        {"moe-zero-memory-num-layers": 1},
        {"moe-zero-memory-num-layers": 1, "moe-zero-memory": "level0"},
    ),
    "first-k-dense-replace": (
        {"first-k-dense-replace": 1},
        {"first-k-dense-replace": 1, "moe-layer-freq": 1, **MOE},
    ),
    "moe-layer-freq": ({"moe-layer-freq": 1}, {"moe-layer-freq": 1, "first-k-dense-replace": 1, **MOE}),
    "schedules-method": (
        {"schedules-method": "dualpipev"},
        {"schedules-method": "dualpipev", "moe-fb-overlap": True, **MOE, "overlap-grad-reduce": OFF},
    ),
    "swiglu": ({"swiglu": False}, {"swiglu": False, "use-fused-swiglu": OFF}),
    "tp-2d": ({"tp-2d": True}, {"tp-2d": True, "use-fused-rmsnorm": OFF}),
    "use-fused-ring-attention-update": (
        {"use-fused-ring-attention-update": True},
        {"use-fused-ring-attention-update": True, "context-parallel-size": 2},
    ),
    "moe-router-load-balancing-type": (
        {"moe-router-load-balancing-type": "group_limited_greedy"},
        {"moe-router-load-balancing-type": "group_limited_greedy", "topk-group": 2},
    ),
    "dist-ckpt-strictness": ({"dist-ckpt-strictness": "1"}, {"dist-ckpt-strictness": "log_all"}),
    "micro-batch-size": ({"micro-batch-size": OFF}, {}),
    "save-interval": ({"save-interval": OFF}, {}),
    "hidden-size": ({"hidden-size": 66}, {"hidden-size": 66, "kv-channels": 16}),
    "tp-comm-overlap": ({"tp-comm-overlap": True}, {"tp-comm-overlap": True, "sequence-parallel": True}),
    "yaml-cfg": ({"yaml-cfg": "/nonexistent/megatron.yaml"}, {}),
    "retro-project-dir": ({"retro-project-dir": "/nonexistent/retro"}, {}),
    "retro-add-retriever": ({"retro-add-retriever": True}, {}),
    "normalization": (
        {"normalization": "LayerNorm"},
        {"normalization": "LayerNorm", "use-fused-rmsnorm": OFF},
    ),
    "position-embedding-type": (
        {"position-embedding-type": "none"},
        {"position-embedding-type": "none", "use-fused-rotary-pos-emb": OFF},
    ),
    "use-glm-rope": ({"use-glm-rope": True}, {"use-glm-rope": True, "use-fused-rotary-pos-emb": OFF}),
    "use-fused-mlp": ({"use-fused-mlp": True}, {"use-fused-mlp": True, "lora-fusion": True}),
    "multi-head-latent-attention": (
        {"multi-head-latent-attention": True},
        {
            "multi-head-latent-attention": True,
            "kv-lora-rank": 8,
            "v-head-dim": 16,
            "qk-rope-head-dim": 8,
            "qk-nope-head-dim": 8,
        },
    ),
    "mla-fa-divide-qk": ({"mla-fa-divide-qk": True}, {"mla-fa-divide-qk": True, "reset-position-ids": True}),
    "rope-scaling-type": (
        {"rope-scaling-type": "yarn"},
        {"rope-scaling-type": "yarn", "rope-scaling-original-max-position-embeddings": 256},
    ),
    "num-experts": (
        {**MOE, "moe-token-dispatcher-type": "allgather"},
        {**MOE, "moe-token-dispatcher-type": "allgather", "num-experts": 0},
    ),
    "recompute-granularity": (
        {"recompute-granularity": "full"},
        {"recompute-granularity": "full", "recompute-method": "uniform"},
    ),
    "num-dataset-builder-threads": ({"num-dataset-builder-threads": 0}, {"num-dataset-builder-threads": 2}),
    "moe-expert-capacity-factor": (
        {"moe-expert-capacity-factor": 1.0},
        {"moe-expert-capacity-factor": 1.0, **MOE},
    ),
    "num-layers": ({"num-layers": -1}, {"num-layers": 4}),
    "moe-fb-overlap": (
        {"moe-fb-overlap": True, **MOE},
        {"moe-fb-overlap": True, **MOE, "overlap-grad-reduce": OFF},
    ),
    "rotary-interleaved": (
        {"rotary-interleaved": True},
        {"rotary-interleaved": True, "no-rope-fusion": True},
    ),
    "deterministic-mode": (
        {"deterministic-mode": True, "use-flash-attn": True},
        {"deterministic-mode": True},
    ),
    "num-attention-heads": ({"num-attention-heads": 0}, {"num-attention-heads": 2}),
    "init-method-xavier-uniform": ({"init-method-xavier-uniform": True}, {}),
    "enable-recompute-layers-per-pp-rank": (
        {"enable-recompute-layers-per-pp-rank": True},
        {
            "enable-recompute-layers-per-pp-rank": True,
            "pipeline-model-parallel-size": 2,
            "num-layers-per-virtual-pipeline-stage": 1,
            "recompute-granularity": "full",
            "recompute-method": "block",
        },
    ),
    "fp16-lm-cross-entropy": ({"fp16-lm-cross-entropy": True}, {"fp16-lm-cross-entropy": True, "fp16": True}),
    "fp16": ({"fp16": True, "bf16": True}, {"fp16": True}),
    "timing-log-level": ({"timing-log-level": 8}, {"timing-log-level": 2}),
    "enable-share-memory": (
        {"enable-share-memory": True},
        {"enable-share-memory": True, "reset-position-ids": True},
    ),
    "moe-pad-expert-input-to-capacity": (
        {"moe-pad-expert-input-to-capacity": True},
        {"moe-pad-expert-input-to-capacity": True, "moe-expert-capacity-factor": 1.0},
    ),
    "recompute-in-advance": (
        {"recompute-in-advance": True},
        {
            "recompute-in-advance": True,
            "recompute-num-layers": 1,
            "pipeline-model-parallel-size": 2,
            "num-layers-per-virtual-pipeline-stage": 1,
        },
    ),
    "moe-zero-memory": (
        {"moe-zero-memory": "level1"},
        {"moe-zero-memory": "level1", "moe-alltoall-overlap-comm": True},
    ),
    "checkpoint-activations": ({"checkpoint-activations": True}, {"recompute-activations": True}),
    "history-turns": ({"history-turns": -1}, {"history-turns": 0}),
    "hf-chat-template": ({"hf-chat-template": True, "prompt-type": "qwen"}, {"hf-chat-template": True}),
    "decoder-seq-length": ({"decoder-seq-length": 1024}, {"decoder-seq-length": 512}),
    "distribute-saved-activations": (
        {"distribute-saved-activations": True},
        {
            "distribute-saved-activations": True,
            "tensor-model-parallel-size": 2,
            "recompute-granularity": "full",
            "recompute-method": "uniform",
        },
    ),
}


def flags_with(change: dict[str, Any]) -> dict[str, Any]:
    out = dict(BASE)
    for key, value in change.items():
        if value is OFF:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def test_the_base_flags_break_no_rule() -> None:
    assert broken_rules(BASE) == []


def test_every_rule_has_an_example() -> None:
    assert sorted(r.key for r in RULES) == sorted(EXAMPLES)


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_rule_refuses_its_example_and_passes_the_fix(key: str) -> None:
    bad, good = EXAMPLES[key]
    assert key in [r.key for r in broken_rules(flags_with(bad))]
    assert key not in [r.key for r in broken_rules(flags_with(good))]


def test_a_rule_on_a_key_already_refused_is_skipped_and_a_wrong_kind_does_not_crash() -> None:
    assert broken_rules(flags_with({"output-layer-slice-num": 0}), skip={"output-layer-slice-num"}) == []
    assert broken_rules(flags_with({"num-layers": "many"})) == []


def test_a_broken_rule_stops_the_plan_naming_its_key(tmp_path: Path) -> None:
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.config.load import load_experiment
    from tests.diffval.backends import ADAPTERS

    tree = ADAPTERS["mindspeed-llm"].bases(tmp_path)[0].tree
    tree.pop("scripts_dir", None)
    tree["backend_config"]["training"]["neat-pack"] = True
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError) as err:
        make_plan(load_experiment(path), dry_run=True)
    problem = next(p for p in err.value.problems if p.key == "backend_config.training.neat-pack")
    assert (
        "reset-position-ids" in problem.message and "mindspeed_llm/training/arguments.py" in problem.message
    )
