"""The record of a MindSpeed-LLM rule across training flags (`Rule`), the view of the flags it reads
(`Flags`: given, or the framework's default), and the source texts rules cite: shared by `rules.py` and
`moe_rules.py`, which hold the rules themselves as data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.mindspeed_llm.versions import RELEASES, Release

# argparse defaults of the flags the rules read (Megatron-LM core_r0.8.0 megatron/training/arguments.py,
# MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py and features_manager/common/moe_router.py)
DEFAULTS: dict[str, Any] = {
    "lr-warmup-iters": 0,
    "lr-warmup-samples": 0,
    "min-lr": 0.0,
    "weight-decay-incr-style": "constant",
    "expert-model-parallel-size": 1,
    "context-parallel-size": 1,
    "pipeline-model-parallel-size": 1,
    "tensor-model-parallel-size": 1,
    "output-layer-slice-num": 1,
    "moe-zero-memory": "disable",
    "moe-token-dispatcher-type": "allgather",
    "overlap-p2p-comm": True,
    "position-embedding-type": "learned_absolute",
    "normalization": "LayerNorm",
    "moe-router-load-balancing-type": "aux_loss",
    "padded-base-length": 128,
    "num-dataset-builder-threads": 1,
    "encoder-tensor-model-parallel-size": 0,  # core_v0.12.1
    "encoder-pipeline-model-parallel-size": 0,
    "transformer-impl": "transformer_engine",  # core_v0.12.1 (26.1.0's plan passes local)
    # MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py _add_cp_args / _add_instruction_finetune_args,
    # features_manager/common/moe_router.py
    "context-parallel-algo": "ulysses_cp_algo",
    "cp-window-size": 1,
    "cp-attention-mask-type": "causal",
    "pad-to-multiple-of": 8,
    "moe-router-score-function": "softmax",
    "lora-target-modules": [],
    "shared-expert-gate-output-dimension": 1,
    "tokenizer-padding-side": "right",
    "wgrad-deferral-limit": 0,
    "tp-x": 1,
    "tp-y": 1,
}
# {megatron}: the version's Megatron-LM tag (a rule's source is formatted for the version that broke it)
MEGATRON = "Megatron-LM {megatron} megatron/training/arguments.py validate_args"
LLM = "MindSpeed-LLM 2.1.0 mindspeed_llm/training/arguments.py"
LLM26 = "MindSpeed-LLM 26.1.0 mindspeed_llm/features_manager/"  # each feature's validate_args
MS26 = "MindSpeed 26.1.0_core_r0.12.1 mindspeed/features_manager/"
ALL = tuple(RELEASES)
V21 = ("2.1.0",)  # rules 26.1.0 no longer enforces (its judge accepts their examples)
V26 = ("26.1.0",)


class Flags:
    """The training flags as the program sees them: given (a value; true for a switch) or the default."""

    def __init__(self, flags: Mapping[str, Any], world_size: int = 1) -> None:
        self.flags = {k: v for k, v in flags.items() if v is not None and v is not False}
        self.world_size = world_size  # the devices the plan launches (rules on data parallelism)

    def given(self, key: str) -> bool:
        return key in self.flags

    def __getitem__(self, key: str) -> Any:
        return self.flags.get(key, DEFAULTS.get(key))

    def num(self, key: str) -> float:
        value = self[key]
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(key)
        return float(value)


def together(key: str, other: str) -> Callable[[Flags], bool]:
    """The condition of a rule "`key` cannot be used with `other`": both given."""
    return lambda f: f.given(key) and f.given(other)


def without(key: str, needed: str) -> Callable[[Flags], bool]:
    """The condition of a rule "`key` needs `needed`": `key` given, `needed` not."""
    return lambda f: f.given(key) and not f.given(needed)


@dataclass(frozen=True)
class Rule:
    key: str  # the flag the problem names (the one set to break the rule)
    # called with the Flags; a rule made in a loop binds its loop variables as the lambda's defaults
    broken: Callable[..., Any]
    message: str  # the framework's refusal, in our words; names the other flags involved
    fix: str
    # the framework code that refuses it ({megatron} is filled per version), or one text per version
    source: str | Mapping[str, str]
    versions: tuple[str, ...] = ALL  # the MindSpeed-LLM versions that refuse it

    def source_for(self, release: Release) -> str:
        text = self.source if isinstance(self.source, str) else self.source[release.version]
        return text.format(megatron=release.megatron)
