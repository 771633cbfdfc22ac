"""Naming MindSpeed-RL keys in messages, and the rule record (`Rule`; its check yields `Problem`s keyed
relative to backend_config; `config.read_config` names them under it).

A key is named as the user wrote it (dash or underscore spelling, in the section it came from: its own
config section, then `megatron_training`, then the model entry), or where it belongs when it was not written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ascendfactory.backends.common.mindspeed_rl_experiment.keys import ORDER, KeySet
from ascendfactory.errors import Problem

if TYPE_CHECKING:
    from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import MindSpeedRLConfig

RING, ULYSSES = "megatron_cp_algo", "ulysses_cp_algo"
# Where a Megatron key belongs when the user has not written it (MindSpeed-RL's own example yamls).
HOME = {
    k: "megatron_training"
    for k in (
        "global_batch_size",
        "seq_length",
        "train_iters",
        "save_interval",
        "data_path",
        "bf16",
        "tokenizer_name_or_path",
        "dataset_additional_keys",
        "stage",
    )
}


@dataclass(frozen=True)
class Rule:
    id: str
    check: Callable[[MindSpeedRLConfig, Mapping[str, Any]], Iterable[Problem]]
    since: str = "2.1.0"
    until: str | None = None

    def applies(self, ks: KeySet) -> bool:
        v = ORDER.index(ks.rules_version)
        return ORDER.index(self.since) <= v and (self.until is None or v <= ORDER.index(self.until))


def spelled(section: Any, key: str) -> str | None:
    """The key as written in a section (dash or underscore spelling), or None."""
    if isinstance(section, Mapping):
        for k in section:
            if str(k).replace("-", "_") == key:
                return str(k)
    return None


def mkey(cfg: MindSpeedRLConfig, key: str, view: str = "actor") -> str:
    """Where a MegatronConfig key of `view` (actor, ref, reward) comes from: its own section, then
    megatron_training, then the model entry; else where it belongs."""
    own = {"actor": "actor_config", "ref": "ref_config", "reward": "reward_config"}[view]
    if view != "actor" and cfg.integrated:
        own = "actor_config"
    for sec in (own, "megatron_training"):
        k = spelled(cfg.sections.get(sec), key)
        if k:
            return f"{sec}.{k}"
    models = cfg.sections.get("model")
    if cfg.model_name and isinstance(models, Mapping):
        k = spelled(models.get(cfg.model_name), key)
        if k:
            return f"model.{cfg.model_name}.{k}"
    return f"{HOME.get(key, own)}.{key}"


def rkey(cfg: MindSpeedRLConfig, key: str) -> str:
    return f"rl_config.{spelled(cfg.sections.get('rl_config'), key) or key}"


def gkey(cfg: MindSpeedRLConfig, key: str) -> str:
    return f"generate_config.{spelled(cfg.sections.get('generate_config'), key) or key}"


def upstream(text: str) -> str:
    return f' (MindSpeed-RL: "{text}")'
