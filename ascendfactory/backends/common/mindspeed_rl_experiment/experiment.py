"""One MindSpeed-RL experiment as MindSpeed-RL will see it (`MindSpeedRLConfig`) and the numbers derived from
it (`Derived`): the records `config.read_config` returns and the rules read. MindSpeed-RL's views of the
sections are built here (`build_views`: the model entry, then `megatron_training`, then the group's own
section, every default filled).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ascendfactory.backends.common.mindspeed_rl_experiment.keys import Expr, KeySet

# MindSpeed-RL's yaml sections, in the order the rendered yaml has them, and the class checking each.
RL_SECTIONS: dict[str, str] = {
    "model": "MegatronConfig",
    "megatron_training": "MegatronConfig",
    "actor_config": "MegatronConfig",
    "ref_config": "MegatronConfig",
    "reward_config": "MegatronConfig",
    "rl_config": "RLConfig",
    "generate_config": "GenerateConfig",
    "profiler_config": "ProfilerConfig",  # under its `integrated` key
    "msprobe_config": "MsprobeConfig",
}


def norm(key: Any) -> str:
    """MindSpeed-RL's own key normalisation (`BaseConfig.update`): dashes become underscores."""
    return str(key).replace("-", "_")


@dataclass(frozen=True)
class Derived:
    """Numbers MindSpeed-RL derives from the sections (`validate_rl_args`, `compute_tps`, the launcher)."""

    nnodes: int  # Ray nodes (env.NNODES)
    npus_per_node: int
    cluster_npus: int  # nnodes x npus_per_node
    integrated: bool  # rl_config.use_integrated_worker
    actor_npus: int  # rl_config.actor_resource.num_npus
    ref_npus: int | None  # separate reference workers (not integrated)
    reward_npus: int | None  # a reward model's workers (reward_resource)
    world_size: int  # the TPS denominator: actor NPUs (integrated), else actor + reference + reward
    tp: int
    pp: int
    cp: int
    actor_dp: int  # actor_npus // (tp * pp * cp)
    ref_dp: int | None
    reward_dp: int | None
    infer_tp: int
    infer_pp: int
    rollout_dp: int  # generate_config.data_parallel_size = actor_npus // (infer_tp * infer_pp)
    gbs: int  # prompts per iteration (actor global_batch_size)
    n_samples: int  # rl_config.n_samples_per_prompt
    samples_per_iteration: int  # gbs * n_samples: the Megatron global batch of every worker group
    mbs: int
    mini_batch_prompts: int  # rl_config.mini_batch_size as written
    mini_batch_samples: int  # as RLConfig holds it (x n_samples)
    seq_length: int
    max_model_len: int
    max_prompt_length: int
    max_tokens: int  # sampling_config.max_tokens
    train_iters: int | None
    save_interval: int | None
    dispatch: dict[str, int]  # the *_dispatch_size values validate_rl_args uses (given or computed)
    verifiers: tuple[str, ...]
    verifier_weights: tuple[float, ...]
    reward_metrics: tuple[str, ...]  # the log keys of the verifiers' mean rewards in this version
    cpus_per_node: float  # what the placement groups and the rule reward take on a full node
    heads: int | None
    kv_heads: int | None
    num_layers: int | None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class MindSpeedRLConfig:
    """One MindSpeed-RL experiment, read and checked (see the module docstring for every field)."""

    keys: KeySet
    version_reason: str
    sections: dict[str, Any]  # the MindSpeed-RL yaml: model, megatron_training, actor_config, rl_config, ...
    model_name: str | None  # the entry of `model` the Megatron sections name
    actor: dict[str, Any]
    ref: dict[str, Any]
    reward: dict[str, Any]
    rl: dict[str, Any]
    generate: dict[str, Any]
    sampling: dict[str, Any]
    preprocess: dict[str, Any] | None  # DataHandlerConfig keys (underscore spelling); None: none given
    hf2mg: dict[str, Any]  # converter flags (dash spelling) added to the planned ones
    mg2hf: dict[str, Any] | None  # None: the final conversion is disabled
    converter: str  # v1 | v2
    derived: Derived
    model_generated: bool = False  # the `model` entry was built from the HF config / catalog
    warnings: tuple[str, ...] = ()

    @property
    def integrated(self) -> bool:
        return self.derived.integrated

    def value(self, dotted: str, default: Any = None) -> Any:
        """A value of `sections` by dotted path (`actor_config.load`)."""
        node: Any = self.sections
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    def replace_values(self, updates: Mapping[str, Any]) -> MindSpeedRLConfig:
        """A copy with dotted keys of `sections` set (None removes a key); the views are rebuilt, the rules
        are not run again (use it for plan-filled paths and load flags)."""
        sections = copy.deepcopy(self.sections)
        for dotted, value in updates.items():
            *parents, last = dotted.split(".")
            node = sections
            for part in parents:
                node = node.setdefault(part, {})
            for k in [k for k in node if norm(k) == norm(last) and k != last]:
                del node[k]
            if value is None:
                node.pop(last, None)
            else:
                node[last] = value
        views = build_views(self.keys, sections, self.model_name)
        return replace(self, sections=ordered(sections), **views)


# -- helpers --------------------------------------------------------------------------------------------
def defaults_of(ks: KeySet, cls: str) -> dict[str, Any]:
    """A class's defaults as MindSpeed-RL sets them (computed ones: None, they are paths and names)."""
    return {k: (None if isinstance(v, Expr) else copy.deepcopy(v)) for k, v in ks.classes[cls].keys.items()}


def normed(section: Mapping[str, Any] | None) -> dict[str, Any]:
    return {norm(k): v for k, v in (section or {}).items()}


def ordered(sections: dict[str, Any]) -> dict[str, Any]:
    return {name: sections[name] for name in RL_SECTIONS if name in sections}


def build_views(ks: KeySet, sections: Mapping[str, Any], model_name: str | None) -> dict[str, Any]:
    """The config objects MindSpeed-RL builds from the yaml (as dicts): actor/ref/reward, rl, generate."""
    given = sections.get("model")
    models: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    mt = normed(sections.get("megatron_training"))

    def megatron(own: str) -> dict[str, Any]:
        merged = {**mt, **normed(sections.get(own))}
        view = defaults_of(ks, "MegatronConfig")
        name = merged.pop("model", None)
        if name is not None and isinstance(models, Mapping) and isinstance(models.get(name), Mapping):
            view.update(normed(models[name]))
        view.update(merged)
        tp, cp = view.get("tensor_model_parallel_size"), view.get("context_parallel_size")
        if isinstance(tp, int) and isinstance(cp, int):
            view["pad_to_multiple_of"] = tp * cp  # MegatronConfig.__init__ rewrites it
        return view

    actor = megatron("actor_config")
    rl_given = normed(sections.get("rl_config"))
    rl = defaults_of(ks, "RLConfig")
    rl.update(rl_given)
    n = rl.get("n_samples_per_prompt")
    mini = rl_given.get("mini_batch_size", 1)
    if isinstance(n, int) and isinstance(mini, int):
        rl["mini_batch_size"] = mini * n  # RLConfig.__init__: in samples from here on
    integrated = bool(rl.get("use_integrated_worker"))
    ref = actor if integrated else megatron("ref_config")
    reward = actor if integrated else megatron("reward_config")
    generate = defaults_of(ks, "GenerateConfig")
    generate.update(normed(sections.get("generate_config")))
    sampling = generate.get("sampling_config")
    return {
        "actor": actor,
        "ref": ref,
        "reward": reward,
        "rl": rl,
        "generate": generate,
        "sampling": dict(sampling) if isinstance(sampling, Mapping) else {},
    }
