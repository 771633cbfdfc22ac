"""The numbers every MindSpeed-RL rule uses (`config.Derived`): world size, data-parallel sizes of the actor,
the rollout and the reference, batch and dispatch sizes, verifiers; and the values they cannot be computed
with (a missing global_batch_size, a TP of 0), reported as problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ascendfactory.backends.common.mindspeed_rl_experiment.keys import KeySet
from ascendfactory.backends.common.mindspeed_rl_experiment.naming import HOME, spelled
from ascendfactory.errors import Problem

if TYPE_CHECKING:
    from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import Derived


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cpus_of(value: Any) -> float:
    """A CPU count from the config; a value of another kind (refused by the type check) counts 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def derive(
    ks: KeySet, sections: Mapping[str, Any], views: Mapping[str, Any], *, nnodes: int, npus_per_node: int
) -> tuple[Derived | None, list[Problem]]:
    """The derived numbers, or None with a problem (its key inside backend_config) for each value they
    cannot be computed from."""
    reader = _Numbers(sections, views)
    found = reader.read()
    if reader.problems or found is None:
        return None, reader.problems
    return _derived(ks, reader, found, nnodes=nnodes, npus_per_node=npus_per_node), []


class _Numbers:
    """Reads the numbers out of the views, each checked to be a whole number >= 1 (a problem otherwise)."""

    def __init__(self, sections: Mapping[str, Any], views: Mapping[str, Any]) -> None:
        self.sections = sections
        self.actor, self.ref, self.reward, self.rl, self.gen = (
            views[k] for k in ("actor", "ref", "reward", "rl", "generate")
        )
        self.sampling = views["sampling"]
        self.problems: list[Problem] = []
        self.integrated = bool(self.rl.get("use_integrated_worker"))

    def where(self, view: str, key: str) -> str:
        own = {"actor": "actor_config", "ref": "ref_config", "reward": "reward_config"}[view]
        for sec in (own, "megatron_training"):
            k = spelled(self.sections.get(sec), key)
            if k:
                return f"{sec}.{k}"
        return f"{HOME.get(key, own)}.{key}"

    def positive(self, value: Any, key: str, what: str, *, required: bool = True) -> int | None:
        n = _int(value)
        if value is None and not required:
            return None
        if value is None:
            self.problems.append(Problem(key, f"required: {what}", f"set {key}"))
            return None
        if n is None or n < 1:
            self.problems.append(
                Problem(
                    key,
                    f"must be a whole number of 1 or more (got {value!r}): {what}",
                    f"set {key} to an integer >= 1",
                )
            )
            return None
        return n

    def actor_int(self, key: str, what: str, *, required: bool = True) -> int | None:
        return self.positive(self.actor.get(key), self.where("actor", key), what, required=required)

    def section_int(self, section: str, view: Mapping[str, Any], key: str, what: str) -> int | None:
        """A key of rl_config / generate_config, named as the experiment spells it."""
        sec = self.sections.get(section) or {}
        return self.positive(view.get(key), f"{section}.{spelled(sec, key) or key}", what)

    def read(self) -> dict[str, Any] | None:
        """The actor's, the rollout's and the other workers' numbers (None when one cannot be read)."""
        actor_int, rl = self.actor_int, self.rl
        v: dict[str, Any] = {
            "tp": actor_int("tensor_model_parallel_size", "the actor's tensor parallel size"),
            "pp": actor_int("pipeline_model_parallel_size", "the actor's pipeline parallel size"),
            "cp": actor_int("context_parallel_size", "the actor's context parallel size"),
            "gbs": actor_int("global_batch_size", "prompts per iteration (global_batch_size)"),
            "mbs": actor_int("micro_batch_size", "samples per micro batch (micro_batch_size)"),
            "seq": actor_int("seq_length", "the training sequence length"),
            "iters": actor_int("train_iters", "the number of GRPO iterations"),
            "save_interval": actor_int("save_interval", "iterations between checkpoints", required=False),
            "n": self.section_int("rl_config", rl, "n_samples_per_prompt", "responses sampled per prompt"),
        }
        rl_sec = self.sections.get("rl_config") or {}
        mini_key = f"rl_config.{spelled(rl_sec, 'mini_batch_size') or 'mini_batch_size'}"
        v["mini"] = self.positive(
            _normed_get(rl_sec, "mini_batch_size", 1), mini_key, "prompts per actor update"
        )
        res = rl.get("actor_resource")
        v["actor_npus"] = self.positive(
            res.get("num_npus") if isinstance(res, Mapping) else None,
            "rl_config.actor_resource.num_npus",
            "the NPUs the actor (and, with use_integrated_worker, every worker) runs on",
        )
        gen = self.gen
        v["itp"] = self.section_int(
            "generate_config", gen, "infer_tensor_parallel_size", "the rollout's (vLLM) tensor parallel size"
        )
        v["ipp"] = self.section_int(
            "generate_config", gen, "infer_pipeline_parallel_size", "the rollout's pipeline parallel size"
        )
        v["max_len"] = self.section_int(
            "generate_config", gen, "max_model_len", "vLLM's maximum sequence length"
        )
        v["ref_npus"] = v["ref_dp"] = v["reward_npus"] = v["reward_dp"] = None
        if not self.integrated and "ref_config" in self.sections:  # a missing section is rule S2's
            v["ref_npus"], v["ref_dp"] = self.side(self.ref, "reference_resource", "ref")
        if not self.integrated and "reward_config" in self.sections and rl.get("reward_resource"):
            v["reward_npus"], v["reward_dp"] = self.side(self.reward, "reward_resource", "reward")
        required = ("tp", "pp", "cp", "gbs", "mbs", "seq", "n", "mini", "actor_npus", "itp", "ipp", "max_len")
        return None if any(v[k] is None for k in required) else v

    def side(self, view: Mapping[str, Any], resource_key: str, name: str) -> tuple[int | None, int | None]:
        r = self.rl.get(resource_key)
        npus = self.positive(
            r.get("num_npus") if isinstance(r, Mapping) else None,
            f"rl_config.{resource_key}.num_npus",
            f"the NPUs of the {name} workers",
        )
        sizes = [
            self.positive(view.get(key), self.where(name, key), f"{name} {short}")
            for key, short in (
                ("tensor_model_parallel_size", "TP"),
                ("pipeline_model_parallel_size", "PP"),
                ("context_parallel_size", "CP"),
            )
        ]
        self.positive(
            view.get("global_batch_size"), self.where(name, "global_batch_size"), f"{name} global_batch_size"
        )
        self.positive(
            view.get("micro_batch_size"), self.where(name, "micro_batch_size"), f"{name} micro_batch_size"
        )
        t, p, c = sizes
        if npus is None or t is None or p is None or c is None:
            return npus, None
        return npus, npus // (t * p * c)


def _derived(ks: KeySet, reader: _Numbers, v: dict[str, Any], *, nnodes: int, npus_per_node: int) -> Derived:
    from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import Derived

    actor, rl, integrated = reader.actor, reader.rl, reader.integrated
    tp, pp, cp, gbs, n, actor_npus = v["tp"], v["pp"], v["cp"], v["gbs"], v["n"], v["actor_npus"]
    actor_dp = actor_npus // (tp * pp * cp)
    rollout_dp = actor_npus // (v["itp"] * v["ipp"])
    world = actor_npus if integrated else actor_npus + (v["ref_npus"] or 0) + (v["reward_npus"] or 0)
    verifiers = rl.get("verifier_function") or []
    weights = rl.get("verifier_weight") or []
    dispatch = _dispatch(
        ks,
        rl,
        actor,
        reader.ref,
        reader.reward,
        gbs=gbs,
        n=n,
        actor_dp=actor_dp,
        rollout_dp=rollout_dp,
        ref_dp=v["ref_dp"] if not integrated else actor_dp,
        reward_dp=v["reward_dp"],
        nodes=nnodes,
    )
    per_node = min(npus_per_node, actor_npus)
    cpus = cpus_of(rl.get("num_cpus_for_placement_group")) * per_node
    if rl.get("rule_reward"):
        cpus += cpus_of(rl.get("num_cpus_for_local_task"))
    heads = _int(actor.get("num_attention_heads"))
    groups = _int(actor.get("num_query_groups")) if actor.get("group_query_attention") else heads
    return Derived(
        nnodes=nnodes,
        npus_per_node=npus_per_node,
        cluster_npus=nnodes * npus_per_node,
        integrated=integrated,
        actor_npus=actor_npus,
        ref_npus=v["ref_npus"],
        reward_npus=v["reward_npus"],
        world_size=world,
        tp=tp,
        pp=pp,
        cp=cp,
        actor_dp=actor_dp,
        ref_dp=v["ref_dp"],
        reward_dp=v["reward_dp"],
        infer_tp=v["itp"],
        infer_pp=v["ipp"],
        rollout_dp=rollout_dp,
        gbs=gbs,
        n_samples=n,
        samples_per_iteration=gbs * n,
        mbs=v["mbs"],
        mini_batch_prompts=v["mini"],
        mini_batch_samples=v["mini"] * n,
        seq_length=v["seq"],
        max_model_len=v["max_len"],
        max_prompt_length=_int(rl.get("max_prompt_length")) or 0,
        max_tokens=_int(reader.sampling.get("max_tokens")) or 0,
        train_iters=v["iters"],
        save_interval=v["save_interval"],
        dispatch=dispatch,
        verifiers=tuple(map(str, verifiers)) if isinstance(verifiers, list) else (),
        verifier_weights=tuple(w for w in weights if isinstance(w, (int, float)))
        if isinstance(weights, list)
        else (),
        reward_metrics=tuple(ks.reward_metric.format(verifier=name) for name in verifiers)
        if isinstance(verifiers, list)
        else (),
        cpus_per_node=cpus,
        heads=heads,
        kv_heads=groups,
        num_layers=_int(actor.get("num_layers")),
    )


def _normed_get(section: Mapping[str, Any], key: str, default: Any) -> Any:
    k = spelled(section, key)
    return section[k] if k is not None else default


def _dispatch(
    ks: KeySet,
    rl: Mapping[str, Any],
    actor: Mapping[str, Any],
    ref: Mapping[str, Any],
    reward: Mapping[str, Any],
    *,
    gbs: int,
    n: int,
    actor_dp: int,
    rollout_dp: int,
    ref_dp: int | None,
    reward_dp: int | None,
    nodes: int,
) -> dict[str, int]:
    """Each dispatch size validate_rl_args uses: the user's, else its default for this version."""

    def given(name: str) -> int | None:
        return _int(rl.get(name)) or None

    def div(a: int, b: int | None) -> int:
        return a // b if b else 0

    ref_gbs = _int(ref.get("global_batch_size")) or gbs
    rw_gbs = _int(reward.get("global_batch_size")) or gbs
    filtered = bool(rl.get("filter_groups_enable")) and ks.at_least("2.2.0")
    fgbs = _int(rl.get("filter_groups_train_batch_size")) or 1
    base = fgbs if filtered else gbs
    out = {
        "actor_rollout": given("actor_rollout_dispatch_size") or div(gbs * n, rollout_dp),
        "actor_logprob": given("actor_logprob_dispatch_size") or div(base * n, actor_dp),
        "adv": given("adv_dispatch_size") or base * n,
        "actor_update": given("actor_update_dispatch_size") or div(base * n, actor_dp),
    }
    if ref_dp is not None:  # no reference workers' layout: a missing ref_config (rule S2)
        out["ref"] = given("ref_dispatch_size") or div(ref_gbs * n, ref_dp)
    if rl.get("reward_resource") and reward_dp is not None:
        out["reward"] = given("reward_dispatch_size") or div(rw_gbs * n, reward_dp)
    elif ks.at_least("2.2.0"):  # rule reward: one process per Ray node
        out["reward"] = given("reward_dispatch_size") or div(rw_gbs * n, nodes)
    else:
        out["reward"] = given("reward_dispatch_size") or rw_gbs * n
    if filtered:
        out["dynamic_sampling"] = given("dynamic_sampling_dispatch_size") or div(rw_gbs * n, nodes)
    return out


# -- the rules --------------------------------------------------------------------------------------------
