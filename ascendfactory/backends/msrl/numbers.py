"""The numbers every MindSpeed-RL rule uses (`config.Derived`): world size, data-parallel sizes of the actor,
the rollout and the reference, batch and dispatch sizes, verifiers; and the values they cannot be computed
with (a missing global_batch_size, a TP of 0), reported as problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ascendfactory.backends.msrl.keys import KeySet
from ascendfactory.backends.msrl.naming import HOME, spelled

if TYPE_CHECKING:
    from ascendfactory.backends.msrl.experiment import Derived


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def derive(
    ks: KeySet, sections: Mapping[str, Any], views: Mapping[str, Any], *, nnodes: int, npus_per_node: int
) -> tuple[Derived | None, list[tuple[str, str, str]]]:
    """The derived numbers, or None with (key, message, fix) for each value they cannot be computed from."""
    from ascendfactory.backends.msrl.experiment import Derived

    actor, ref, reward, rl, gen = (views[k] for k in ("actor", "ref", "reward", "rl", "generate"))
    sampling = views["sampling"]
    problems: list[tuple[str, str, str]] = []
    integrated = bool(rl.get("use_integrated_worker"))

    def where(view: str, key: str) -> str:
        own = {"actor": "actor_config", "ref": "ref_config", "reward": "reward_config"}[view]
        for sec in (own, "megatron_training"):
            k = spelled(sections.get(sec), key)
            if k:
                return f"{sec}.{k}"
        return f"{HOME.get(key, own)}.{key}"

    def positive(value: Any, key: str, what: str, *, required: bool = True) -> int | None:
        n = _int(value)
        if value is None and not required:
            return None
        if value is None:
            problems.append((key, f"required: {what}", f"set {key}"))
            return None
        if n is None or n < 1:
            problems.append(
                (
                    key,
                    f"must be a whole number of 1 or more (got {value!r}): {what}",
                    f"set {key} to an integer >= 1",
                )
            )
            return None
        return n

    def actor_int(key: str, what: str, *, required: bool = True) -> int | None:
        return positive(actor.get(key), where("actor", key), what, required=required)

    tp = actor_int("tensor_model_parallel_size", "the actor's tensor parallel size")
    pp = actor_int("pipeline_model_parallel_size", "the actor's pipeline parallel size")
    cp = actor_int("context_parallel_size", "the actor's context parallel size")
    gbs = actor_int("global_batch_size", "prompts per iteration (global_batch_size)")
    mbs = actor_int("micro_batch_size", "samples per micro batch (micro_batch_size)")
    seq = actor_int("seq_length", "the training sequence length")
    iters = actor_int("train_iters", "the number of GRPO iterations")
    save_interval = actor_int("save_interval", "iterations between checkpoints", required=False)
    rl_sec = sections.get("rl_config") or {}
    n = positive(
        rl.get("n_samples_per_prompt"),
        f"rl_config.{spelled(rl_sec, 'n_samples_per_prompt') or 'n_samples_per_prompt'}",
        "responses sampled per prompt",
    )
    mini_key = f"rl_config.{spelled(rl_sec, 'mini_batch_size') or 'mini_batch_size'}"
    mini = positive(_normed_get(rl_sec, "mini_batch_size", 1), mini_key, "prompts per actor update")
    res = rl.get("actor_resource")
    res_key = "rl_config.actor_resource.num_npus"
    actor_npus = positive(
        res.get("num_npus") if isinstance(res, Mapping) else None,
        res_key,
        "the NPUs the actor (and, integrated, every worker) runs on",
    )
    gen_sec = sections.get("generate_config") or {}
    itp = positive(
        gen.get("infer_tensor_parallel_size"),
        f"generate_config.{spelled(gen_sec, 'infer_tensor_parallel_size') or 'infer_tensor_parallel_size'}",
        "the rollout's (vLLM) tensor parallel size",
    )
    ipp = positive(
        gen.get("infer_pipeline_parallel_size"),
        "generate_config."
        + (spelled(gen_sec, "infer_pipeline_parallel_size") or "infer_pipeline_parallel_size"),
        "the rollout's pipeline parallel size",
    )
    max_len = positive(
        gen.get("max_model_len"),
        f"generate_config.{spelled(gen_sec, 'max_model_len') or 'max_model_len'}",
        "vLLM's maximum sequence length",
    )
    max_prompt = _int(rl.get("max_prompt_length")) or 0
    max_tokens = _int(sampling.get("max_tokens")) or 0

    def side(view: Mapping[str, Any], resource_key: str, name: str) -> tuple[int | None, int | None]:
        r = rl.get(resource_key)
        npus = positive(
            r.get("num_npus") if isinstance(r, Mapping) else None,
            f"rl_config.{resource_key}.num_npus",
            f"the NPUs of the {name} workers",
        )
        t = positive(
            view.get("tensor_model_parallel_size"), where(name, "tensor_model_parallel_size"), f"{name} TP"
        )
        p = positive(
            view.get("pipeline_model_parallel_size"),
            where(name, "pipeline_model_parallel_size"),
            f"{name} PP",
        )
        c = positive(view.get("context_parallel_size"), where(name, "context_parallel_size"), f"{name} CP")
        positive(view.get("global_batch_size"), where(name, "global_batch_size"), f"{name} global_batch_size")
        positive(view.get("micro_batch_size"), where(name, "micro_batch_size"), f"{name} micro_batch_size")
        if npus is None or None in (t, p, c):
            return npus, None
        return npus, npus // (t * p * c)

    ref_npus = ref_dp = reward_npus = reward_dp = None
    if not integrated and "ref_config" in sections:  # a missing section is rule S2's
        ref_npus, ref_dp = side(ref, "reference_resource", "ref")
    if not integrated and "reward_config" in sections and rl.get("reward_resource"):
        reward_npus, reward_dp = side(reward, "reward_resource", "reward")
    if problems or None in (tp, pp, cp, gbs, mbs, seq, n, mini, actor_npus, itp, ipp, max_len):
        return None, problems
    assert tp and pp and cp and gbs and mbs and seq and n and mini and actor_npus and itp and ipp and max_len
    actor_dp = actor_npus // (tp * pp * cp)
    rollout_dp = actor_npus // (itp * ipp)
    world = actor_npus if integrated else actor_npus + (ref_npus or 0) + (reward_npus or 0)
    verifiers = rl.get("verifier_function") or []
    weights = rl.get("verifier_weight") or []
    dispatch = _dispatch(
        ks,
        rl,
        actor,
        ref,
        reward,
        gbs=gbs,
        n=n,
        actor_dp=actor_dp,
        rollout_dp=rollout_dp,
        ref_dp=ref_dp if not integrated else actor_dp,
        reward_dp=reward_dp,
        nodes=nnodes,
    )
    per_node = min(npus_per_node, actor_npus)
    cpus = float(rl.get("num_cpus_for_placement_group") or 0) * per_node
    if rl.get("rule_reward"):
        cpus += float(rl.get("num_cpus_for_local_task") or 0)
    heads = _int(actor.get("num_attention_heads"))
    groups = _int(actor.get("num_query_groups")) if actor.get("group_query_attention") else heads
    return (
        Derived(
            nnodes=nnodes,
            npus_per_node=npus_per_node,
            cluster_npus=nnodes * npus_per_node,
            integrated=integrated,
            actor_npus=actor_npus,
            ref_npus=ref_npus,
            reward_npus=reward_npus,
            world_size=world,
            tp=tp,
            pp=pp,
            cp=cp,
            actor_dp=actor_dp,
            ref_dp=ref_dp,
            reward_dp=reward_dp,
            infer_tp=itp,
            infer_pp=ipp,
            rollout_dp=rollout_dp,
            gbs=gbs,
            n_samples=n,
            samples_per_iteration=gbs * n,
            mbs=mbs,
            mini_batch_prompts=mini,
            mini_batch_samples=mini * n,
            seq_length=seq,
            max_model_len=max_len,
            max_prompt_length=max_prompt,
            max_tokens=max_tokens,
            train_iters=iters,
            save_interval=save_interval,
            dispatch=dispatch,
            verifiers=tuple(map(str, verifiers)) if isinstance(verifiers, list) else (),
            verifier_weights=tuple(w for w in weights if isinstance(w, (int, float)))
            if isinstance(weights, list)
            else (),
            reward_metrics=tuple(ks.reward_metric.format(verifier=v) for v in verifiers)
            if isinstance(verifiers, list)
            else (),
            cpus_per_node=cpus,
            heads=heads,
            kv_heads=groups,
            num_layers=_int(actor.get("num_layers")),
        ),
        [],
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
