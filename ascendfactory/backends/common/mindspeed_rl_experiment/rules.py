"""MindSpeed-RL's config-time rules, as a table: what `validate_rl_args` and `parse_training_config`
(`mindspeed_rl/config_cls/validate_config.py`, `cli/train_grpo.py`) raise on the cluster, checked before it.

Each `Rule` has an id of this table's own (R1-R28: the checks of `validate_rl_args`; S1/S2: the section rules
of `parse_training_config`), the versions it applies to (`since`, `until`: 2.1.0, 2.2.0, 2.3.0, master) and a
check that yields `Problem`s: the key (relative to backend_config) as the user wrote it (or where it belongs),
the numbers, MindSpeed-RL's own error text, and the fix; a comment at each names its rule id. The numbers
every rule uses come from `numbers.derive`; keys are named by `naming`.

The checks beyond validate_rl_args (vLLM, Megatron, placement, verifiers, data) are in `preflight.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ascendfactory.backends.common.mindspeed_rl_experiment.naming import (
    RING,
    ULYSSES,
    Rule,
    gkey,
    mkey,
    rkey,
    spelled,
    upstream,
)
from ascendfactory.errors import Problem

if TYPE_CHECKING:
    from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import MindSpeedRLConfig


def _r1(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    v = cfg.actor.get("ai_framework")
    if v is not None and v != "mindspore":
        text = f"Invalid value for ai_framework: '{v}'. Only None or mindspore are allowed"
        yield Problem(  # R1
            mkey(cfg, "ai_framework"),
            f"is {v!r}; only mindspore (or no value) is allowed" + upstream(text),
            "remove it (PyTorch) or set mindspore",
        )


def _r2(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    text = " megatron_config.bf16 should be true and generate_config.dtype should be bfloat16."
    if cfg.actor.get("bf16") is False:
        yield Problem(  # R2
            mkey(cfg, "bf16"),
            "is false: MindSpeed-RL trains in bf16 only" + upstream(text.strip()),
            "set bf16: true (or remove it: true is the default)",
        )
    if cfg.generate.get("dtype") != "bfloat16":
        yield Problem(  # R2
            gkey(cfg, "dtype"),
            f"is {cfg.generate.get('dtype')!r}: the rollout must run in bfloat16" + upstream(text.strip()),
            "set dtype: bfloat16 (or remove it)",
        )


def _r3_r5(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    rl = cfg.rl
    if cfg.integrated:
        if rl.get("reference_resource") is not None:
            yield Problem(  # R3
                rkey(cfg, "reference_resource"),
                "is set, but with use_integrated_worker: true the reference model runs on the actor's NPUs"
                + upstream("reference_resource should not be set when use_integrated_worker mode is on."),
                "remove reference_resource, or set use_integrated_worker: false",
            )
        if rl.get("reward_resource") is not None:
            yield Problem(  # R4
                rkey(cfg, "reward_resource"),
                "is set, but a reward model is not supported with use_integrated_worker: true"
                + upstream("Reward model is not supported when use_integrated_worker mode is on."),
                "remove reward_resource (rule rewards need none), or set use_integrated_worker: false",
            )
    elif rl.get("integrated_mode_config") is not None:
        yield Problem(  # R5
            rkey(cfg, "integrated_mode_config"),
            "is set, but use_integrated_worker is false"
            + upstream("integrated_mode_config should not be set when use_integrated_worker mode is off."),
            "remove integrated_mode_config, or set use_integrated_worker: true",
        )


def _s(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    for name in ("ref_config", "reward_config"):
        if cfg.integrated and name in bc:
            yield Problem(  # S1
                name,
                "is given, but with use_integrated_worker: true the reference and reward use "
                "the actor's config"
                + upstream(f"{name} should not be set when use_integrated_worker mode is on."),
                f"remove {name}, or set rl_config.use_integrated_worker: false",
            )
        if not cfg.integrated and name not in bc:
            yield Problem(  # S2
                name,
                "is required with use_integrated_worker: false (cli/train_grpo.py merges it "
                "into megatron_training and fails with a TypeError when it is missing)",
                f"add {name}: {{...}} (its own TP/PP/micro_batch_size), or set use_integrated_worker: true",
            )


def _r6(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    d = cfg.derived
    if d.max_model_len < d.seq_length:
        text = (
            f"Sequence length exceeds vLLM max_model_len! Actor.seq_length={d.seq_length} vs "
            f"GenerateConfig.max_model_len={d.max_model_len}"
        )
        yield Problem(  # R6
            gkey(cfg, "max_model_len"),
            f"{d.max_model_len} is less than {mkey(cfg, 'seq_length')} {d.seq_length}" + upstream(text),
            f"set max_model_len >= {d.seq_length}",
        )


def _r7(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    algo, cp = cfg.actor.get("context_parallel_algo"), cfg.derived.cp
    allowed = (ULYSSES, RING) if cfg.keys.at_least("2.2.0") else (ULYSSES,)
    if cp > 1 and algo is not None and algo not in allowed:
        text = (
            "Now just support ulysses CP and megatron cp(ring)"
            if RING in allowed
            else "Now just support ulysses CP"
        )
        yield Problem(  # R7
            mkey(cfg, "context_parallel_algo"),
            f"{algo!r} with context_parallel_size {cp}: "
            f"MindSpeed-RL {cfg.keys.rules_version} supports {' and '.join(allowed)}" + upstream(text),
            "use one of: " + ", ".join(allowed),
        )


def _r7b(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    mask = cfg.actor.get("cp_attention_mask_type")
    if mask not in ("causal", None) and "cp_attention_mask_type" in cfg.keys.classes["MegatronConfig"].keys:
        yield Problem(  # R7
            mkey(cfg, "cp_attention_mask_type"),
            f"is {mask!r}; MindSpeed-RL 2.2.0 supports causal "
            "only" + upstream("Now just support causal cp_attention_mask_type"),
            "set causal",
        )


def _ring_remove_padding(cfg: MindSpeedRLConfig) -> bool:
    return (
        cfg.actor.get("context_parallel_algo") == RING
        and cfg.derived.cp > 1
        and bool(cfg.rl.get("use_remove_padding"))
    )


def _r8(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if _ring_remove_padding(cfg) and not cfg.actor.get("reset_attention_mask"):
        yield Problem(  # R8
            mkey(cfg, "reset_attention_mask"),
            "must be true with ring context parallel "
            f"(megatron_cp_algo, CP {cfg.derived.cp}) and use_remove_padding"
            + upstream("when use ring cp and remove_padding, reset_attention_mask must be true"),
            "set reset_attention_mask: true",
        )


def _r8b(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if not _ring_remove_padding(cfg) and cfg.actor.get("reset_attention_mask"):
        yield Problem(  # R8
            mkey(cfg, "reset_attention_mask"),
            "is true without ring CP >= 2 and use_remove_padding; "
            "MindSpeed-RL 2.2.0 refuses it"
            + upstream(
                "Just when use ring cp >=2 with remove_padding, "
                "reset_attention_mask must be true; otherwise should be false"
            ),
            "remove reset_attention_mask",
        )


def _r9_r11(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if not cfg.rl.get("use_remove_padding"):
        return
    new = cfg.keys.at_least("2.3.0")
    pad_key = "no_pad_to_seq_lengths" if new else "variable_seq_lengths"
    mask_key = "reset_attention_mask" if new else "reset_position_ids"
    if cfg.derived.pp > 1 and not cfg.actor.get(pad_key):
        yield Problem(  # R9
            mkey(cfg, pad_key),
            f"must be true: use_remove_padding with pipeline parallel size "
            f"{cfg.derived.pp}"
            + upstream(
                f"'use_remove_padding' feature requires '{pad_key}=True' when using pipeline parallelism!"
            ),
            f"set {pad_key}: true",
        )
    if not cfg.actor.get(mask_key):
        yield Problem(  # R10
            mkey(cfg, mask_key),
            "must be true with use_remove_padding"
            + upstream(f"'use_remove_padding' feature requires '{mask_key}=True'! "),
            f"set {mask_key}: true",
        )
    if cfg.rl.get("is_multimodal"):
        yield Problem(  # R11
            rkey(cfg, "use_remove_padding"),
            "cannot be used with is_multimodal"
            + upstream("'multimodal' models cannot use 'use_remove_padding' feature! "),
            "set use_remove_padding: false",
        )


def _groups(cfg: MindSpeedRLConfig) -> list[tuple[str, str, Mapping[str, Any], int | None, str]]:
    """(component, view, MegatronConfig view, NPUs, resource key): the worker groups checked on their own."""
    d = cfg.derived
    out: list[tuple[str, str, Mapping[str, Any], int | None, str]] = [
        ("Actor", "actor", cfg.actor, d.actor_npus, "actor_resource")
    ]
    if not cfg.integrated:
        out.append(("Reference", "ref", cfg.ref, d.ref_npus, "reference_resource"))
        if cfg.rl.get("reward_resource"):
            out.append(("Reward", "reward", cfg.reward, d.reward_npus, "reward_resource"))
    return out


def _npus_from(bc: Mapping[str, Any]) -> str:
    """Where the actor's num_npus came from, when the experiment does not give it (the whole cluster)."""
    rl = bc.get("rl_config")
    resource = rl.get("actor_resource") if isinstance(rl, Mapping) else None
    given = isinstance(resource, Mapping) and resource.get("num_npus") is not None
    return "" if given else " = env.NNODES x env.NPUS_PER_NODE"


def _r12_r13(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    n = cfg.derived.n_samples
    for comp, view, v, npus, res in _groups(cfg):
        t, p, c = (
            v.get(k)
            for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
        )
        g, m = v.get("global_batch_size"), v.get("micro_batch_size")
        if npus and isinstance(t, int) and isinstance(p, int) and isinstance(c, int) and npus % (t * p * c):
            ok = [x for x in range(1, npus + 1) if npus % x == 0]
            text = (
                f"Invalid {comp} resource allocation! Resource={{'num_npus': {npus}}} must be divisible by "
                f"(tensor_parallel * pipeline_parallel * context_parallel) = {t}*{p}*{c}={t * p * c}"
            )
            yield Problem(  # R12
                f"rl_config.{res}.num_npus",
                f"{npus} NPUs are not divisible by TP x PP x CP = "
                f"{t} x {p} x {c} = {t * p * c} ({comp.lower()}: tensor_model_parallel_size x "
                "pipeline_model_parallel_size x context_parallel_size)" + upstream(text),
                f"make TP x PP x CP one of {ok}, or num_npus a multiple of {t * p * c}",
            )
        if isinstance(g, int) and isinstance(m, int) and m and (g * n) % m:
            text = (
                f"Invalid {comp} batch configuration! (global_batch_size * n_samples) = {g}*{n} = {g * n} "
                f"must be divisible by micro_batch_size {m}"
            )
            yield Problem(  # R13
                mkey(cfg, "micro_batch_size", view),
                f"{m} does not divide global_batch_size x "
                f"n_samples_per_prompt = {g} x {n} = {g * n} ({comp.lower()})" + upstream(text),
                f"use a micro_batch_size that divides {g * n}",
            )


def _dp_problems(
    comp: str,
    gbs: int,
    dp: int,
    n: int,
    size: int,
    *,
    key_gbs: str,
    key_size: str,
    what: str,
    text_gbs: int,
) -> Iterable[Problem]:
    """The two checks of `_validate_data_parallel` (validate_config.py)."""
    if dp < 1:
        return
    if gbs % dp:
        text = f"{comp} global_batch_size {gbs} must be divisible by data_parallel_size {dp}"
        yield Problem(
            key_gbs,
            f"{gbs} prompts are not divisible by the {what} data parallel size {dp}" + upstream(text),
            f"use a global_batch_size that is a multiple of {dp}",
        )
    elif size and (gbs // dp * n) % size:
        text = (
            f"{comp} global_batch_size {text_gbs}  // data_parallel {dp}  * n_samples {n} must be divisible "
            f"by micro_batch_size {size} "
        )
        per = gbs // dp * n
        yield Problem(
            key_size,
            f"{size} does not divide the {per} samples each {what} data parallel rank "
            f"gets (global_batch_size {gbs} // DP {dp} x n_samples_per_prompt {n})" + upstream(text.strip()),
            f"use a divisor of {per}",
        )


def _r14(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if cfg.derived.infer_pp > 1:
        yield Problem(  # R14
            gkey(cfg, "infer_pipeline_parallel_size"),
            f"is {cfg.derived.infer_pp}: the vLLM "
            "rollout has no pipeline parallelism"
            + upstream("pipeline_parallel for vllm is not supported yet ! "),
            "set infer_pipeline_parallel_size: 1",
        )


def _r15_r17(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    d = cfg.derived
    yield from _dp_problems(  # R15
        "Actor",
        d.gbs,
        d.actor_dp,
        d.n_samples,
        d.mbs,
        key_gbs=mkey(cfg, "global_batch_size"),
        key_size=mkey(cfg, "micro_batch_size"),
        what=f"actor (num_npus {d.actor_npus}{_npus_from(bc)} / (TP {d.tp} x PP {d.pp} x CP {d.cp}))",
        text_gbs=d.gbs,
    )
    yield from _dp_problems(  # R16
        "Generation",
        d.gbs,
        d.rollout_dp,
        d.n_samples,
        d.dispatch["actor_rollout"],
        key_gbs=mkey(cfg, "global_batch_size"),
        key_size=rkey(cfg, "actor_rollout_dispatch_size"),
        what=f"rollout (num_npus {d.actor_npus}{_npus_from(bc)} / (infer TP {d.infer_tp} x infer PP "
        f"{d.infer_pp}))",
        text_gbs=d.gbs,
    )
    if cfg.integrated:
        return
    for comp, view, dp in (("Reference", "ref", d.ref_dp), ("Reward", "reward", d.reward_dp)):
        v = cfg.ref if view == "ref" else cfg.reward
        if dp is None or (view == "reward" and not cfg.rl.get("reward_resource")):
            continue
        g, m = v.get("global_batch_size"), v.get("micro_batch_size")
        if isinstance(g, int) and isinstance(m, int):
            yield from _dp_problems(  # R17
                comp,
                g,
                dp,
                d.n_samples,
                m,
                key_gbs=mkey(cfg, "global_batch_size", view),
                key_size=mkey(cfg, "micro_batch_size", view),
                what=comp.lower(),
                text_gbs=d.gbs,
            )


def _r18(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    d = cfg.derived
    g = cfg.reward.get("global_batch_size")
    if not cfg.rl.get("reward_resource") and isinstance(g, int) and g % d.nnodes:
        text = (
            f"Reward dispatch size configuration error!global_batch_size {g} must be divisible by the number "
            "of nodes in the ray cluster"
        )
        yield Problem(  # R18
            mkey(cfg, "global_batch_size", "reward"),
            f"{g} prompts are not divisible by the "
            f"{d.nnodes} Ray nodes (env.NNODES): the rule reward runs one process per node" + upstream(text),
            f"use a global_batch_size that is a multiple of {d.nnodes}",
        )


def _r19(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if not cfg.rl.get("share_backbone"):
        return
    if not cfg.actor.get("lora_target_modules"):
        yield Problem(  # R19
            rkey(cfg, "share_backbone"),
            "needs LoRA (actor lora_target_modules)"
            + upstream("The shared backbone can only be used with LoRA."),
            "set lora_target_modules, or share_backbone: false",
        )
    if cfg.actor.get("stage") == "ray_dapo":
        yield Problem(  # R19
            rkey(cfg, "share_backbone"),
            "cannot be used with stage ray_dapo"
            + upstream("'share_backbone' cannot be True when 'stage' is set to 'ray_dapo'."),
            "set share_backbone: false",
        )


def _batch(value: Any, default: int) -> int:
    """A batch size as written (a whole number), else the actor's `default`: never None in the arithmetic."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _r20(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    d = cfg.derived
    n = d.n_samples
    filtered = bool(cfg.rl.get("filter_groups_enable"))
    base = _batch(cfg.rl.get("filter_groups_train_batch_size") if filtered else None, d.gbs)
    rw = _batch(cfg.reward.get("global_batch_size"), d.gbs)
    rf = _batch(cfg.ref.get("global_batch_size"), d.gbs)
    new = cfg.keys.at_least("2.2.0")  # 2.1.0 checks Advantages and Actor Update against the reward's batch
    checks = [
        ("Actor Infer", base, "actor_logprob", "actor_logprob_dispatch_size"),
        ("Advantages", base if new else rw, "adv", "adv_dispatch_size"),
        ("Reference", rf, "ref", "ref_dispatch_size"),
        ("Reward" if cfg.rl.get("reward_resource") else "Rule Reward", rw, "reward", "reward_dispatch_size"),
    ]
    if new or not cfg.integrated:
        checks.append(("Actor Update", base if new else rw, "actor_update", "actor_update_dispatch_size"))
    if "dynamic_sampling" in d.dispatch:
        checks.append(("Dynamic Sampling", rw, "dynamic_sampling", "dynamic_sampling_dispatch_size"))
    for comp, g, name, key in checks:
        if name not in d.dispatch:
            continue
        x = d.dispatch[name]
        if not x:
            given = cfg.rl.get(key)
            why = (
                f"{key} {given}"
                if given
                else f"its default ({comp.lower()}: global_batch_size x "
                "n_samples_per_prompt // the workers that share it) is 0"
            )
            yield Problem(  # R20
                rkey(cfg, key),
                f"{why}: fewer samples per iteration ({g} x {n}) than workers",
                "raise global_batch_size or n_samples_per_prompt, or use fewer NPUs / nodes",
            )
            continue
        if (g * n) % x:
            text = f"{comp} global_batch_size {g} must be divisible by experience_count {x}"
            origin = "" if cfg.rl.get(key) else " (its default)"
            yield Problem(  # R20
                rkey(cfg, key),
                f"{x}{origin} does not divide the {g * n} samples of an iteration "
                f"(global_batch_size {g} x n_samples_per_prompt {n})" + upstream(text),
                f"use a divisor of {g * n}"
                + (
                    "" if cfg.rl.get(key) else f", or a global_batch_size that makes {g * n} a multiple of it"
                ),
            )


def _r21(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    d, given = cfg.derived, cfg.rl.get("actor_update_dispatch_size")
    if isinstance(given, int) and given and given < d.mini_batch_samples / d.actor_dp:
        q = int(d.mini_batch_samples / d.actor_dp)
        text = (
            f"actor_update_dispatch_size={given} must be >= mini_batch_size/actor_data_parallel_size "
            f"({d.mini_batch_samples}/{d.actor_dp}={q})"
        )
        yield Problem(  # R21
            rkey(cfg, "actor_update_dispatch_size"),
            f"{given} is less than the samples per actor "
            f"update and data parallel rank (mini_batch_size {d.mini_batch_prompts} x n_samples "
            f"{d.n_samples} / actor DP {d.actor_dp} = {q})" + upstream(text),
            f"use {q} or more",
        )


def _r22(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    d = cfg.derived
    sizes = [
        ("actor_rollout_dispatch_size", d.gbs, d.rollout_dp),
        ("actor_logprob_dispatch_size", d.gbs, d.actor_dp),
        ("actor_update_dispatch_size", d.gbs, d.actor_dp),
    ]
    if not cfg.integrated and d.ref_dp:
        g = cfg.ref.get("global_batch_size")
        sizes.append(("ref_dispatch_size", g if isinstance(g, int) else d.gbs, d.ref_dp))
    elif cfg.integrated:
        sizes.append(("ref_dispatch_size", d.gbs, d.actor_dp))
    if cfg.rl.get("reward_resource") and d.reward_dp:
        g = cfg.reward.get("global_batch_size")
        sizes.append(("reward_dispatch_size", g if isinstance(g, int) else d.gbs, d.reward_dp))
    if cfg.keys.at_least("2.3.0"):
        # the rule reward's dynamic sampling, one process per Ray node (validate_config.py at the pinned
        # commit 09b8c125: the reward config's global_batch_size over get_node_nums())
        g = cfg.reward.get("global_batch_size") if not cfg.integrated else d.gbs
        sizes.append(("dynamic_sampling_dispatch_size", g if isinstance(g, int) else d.gbs, d.nnodes))
    for name, g, dp in sizes:
        given = cfg.rl.get(name)
        if isinstance(given, int) and given and dp and given > g * d.n_samples // dp:
            limit = g * d.n_samples // dp
            nodes = name == "dynamic_sampling_dispatch_size"
            per = "num_nodes_in_ray_cluster" if nodes else "data_parallel_size"
            text = (
                f"{name} {given} cannot be greater than the number of samples generated on each data "
                f"parallel worker, which is global_batch_size * n_samples_per_prompt // {per} = "
                f"{g} * {d.n_samples} // {dp} = {limit}"
            )
            yield Problem(  # R22
                rkey(cfg, name),
                f"{given} is more than the {limit} samples each data parallel "
                f"worker has ({g} x {d.n_samples} // {dp})" + upstream(text),
                f"use {limit} or less",
            )


def _r23(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    f, w = cfg.rl.get("verifier_function") or [], cfg.rl.get("verifier_weight") or []
    if isinstance(f, list) and isinstance(w, list) and len(f) != len(w):
        text = f"Verifier function and weight length mismatch: {len(f)} vs {len(w)}"
        yield Problem(  # R23
            rkey(cfg, "verifier_weight"),
            f"has {len(w)} weight(s) for {len(f)} verifier(s) {f}" + upstream(text),
            f"give one weight per verifier, e.g. {[1.0] * len(f)}",
        )


def _r24(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if not cfg.rl.get("overlong_buffer_enable"):
        return
    max_tokens = cfg.sampling.get("max_tokens")
    buf, rmax = cfg.rl.get("overlong_buffer"), cfg.rl.get("rollout_max_tokens")
    if isinstance(max_tokens, int) and isinstance(buf, int) and buf >= max_tokens:
        yield Problem(  # R24
            rkey(cfg, "overlong_buffer"),
            f"{buf} must be less than sampling_config.max_tokens "
            f"{max_tokens}"
            + upstream(f"Response max length {max_tokens} must greater than Dapo overlong buffer {buf}"),
            f"use an overlong_buffer below {max_tokens}",
        )
    if rmax != max_tokens:
        yield Problem(  # R24
            rkey(cfg, "rollout_max_tokens"),
            f"{rmax} differs from sampling_config.max_tokens "
            f"{max_tokens}"
            + upstream(
                "overlong rollout_max_tokens and generate rollout_max_tokens "
                f"mismatch: {rmax} vs {max_tokens}"
            ),
            f"set rollout_max_tokens: {max_tokens}",
        )


def _r25(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    lo, hi = cfg.rl.get("clip_ratio_low"), cfg.rl.get("clip_ratio_high")
    if (
        cfg.rl.get("clip_higher_enable")
        and isinstance(lo, (int, float))
        and isinstance(hi, (int, float))
        and lo > hi
    ):
        yield Problem(  # R25
            rkey(cfg, "clip_ratio_low"),
            f"{lo} is greater than clip_ratio_high {hi}"
            + upstream(f"clip_ratio_low {lo} must less than clip_ratio_high {hi}"),
            "make clip_ratio_low <= clip_ratio_high",
        )


def _r26(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    """Dynamic sampling's checks: a key the user left at its default is named with the switch that made it
    matter (`filter_groups_enable` alone turns the defaults `acc` and 1 into refusals)."""
    if not cfg.rl.get("filter_groups_enable"):
        return
    for p in _r26_checks(cfg):
        yield (
            p
            if _written(bc, p.key)
            else replace(p, message=p.message + " (its default, with filter_groups_enable)")
        )


def _written(bc: Mapping[str, Any], key: str) -> bool:
    """Whether the experiment writes `key` (dotted, relative to backend_config) itself."""
    node: Any = bc
    for part in key.split("."):
        name = spelled(node, part.replace("-", "_"))
        if name is None:
            return False
        node = node[name]
    return True


def _r26_checks(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d, metric, verifiers = cfg.derived, cfg.rl.get("filter_groups_metric"), list(cfg.derived.verifiers)
    if metric not in verifiers:
        yield Problem(  # R26
            rkey(cfg, "filter_groups_metric"),
            f"{metric!r} is not one of verifier_function "
            f"{verifiers}" + upstream(f"filter_groups_metric {metric} must in verifier_function {verifiers}"),
            "name one of the verifiers",
        )
    ds = d.dispatch.get("dynamic_sampling")
    if ds and ds % d.n_samples:
        yield Problem(  # R26
            rkey(cfg, "dynamic_sampling_dispatch_size"),
            f"{ds} is not divisible by "
            f"n_samples_per_prompt {d.n_samples}"
            + upstream(
                f"dynamic sampling dispatch size {ds} must be divisible by n samples per prompt {d.n_samples}"
            ),
            f"use a multiple of {d.n_samples}",
        )
    fgbs = cfg.rl.get("filter_groups_train_batch_size")
    if isinstance(fgbs, int):
        yield from _dp_problems(  # R26
            "ActorForDapo",
            fgbs,
            d.actor_dp,
            d.n_samples,
            d.mbs,
            key_gbs=rkey(cfg, "filter_groups_train_batch_size"),
            key_size=mkey(cfg, "micro_batch_size"),
            what="actor",
            text_gbs=d.gbs,
        )


def _r27(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    split = cfg.rl.get("partial_rollout_max_split")
    if isinstance(split, int) and split > 1 and cfg.rl.get("guarantee_order"):
        yield Problem(  # R27
            rkey(cfg, "guarantee_order"),
            f"must be false with partial_rollout_max_split {split}"
            + upstream("guarantee_order must be false when partial_rollout_max_split > 1"),
            "set guarantee_order: false",
        )


def _r28(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if not cfg.rl.get("multi_turn_enable"):
        return
    total, max_tokens = cfg.rl.get("max_total_response_length"), cfg.sampling.get("max_tokens")
    if isinstance(total, int) and isinstance(max_tokens, int) and total < max_tokens:
        yield Problem(  # R28
            rkey(cfg, "max_total_response_length"),
            f"{total} is less than sampling_config.max_tokens "
            f"{max_tokens}"
            + upstream(f"max_total_response_length must greater than max_tokens:{total} vs {max_tokens}"),
            f"set it to {max_tokens} or more",
        )
    if not cfg.rl.get("async_engine"):
        yield Problem(  # R28
            rkey(cfg, "async_engine"),
            "must be true with multi_turn_enable"
            + upstream("async_engine must be True when multi_turn_enable is True"),
            "set async_engine: true",
        )


def _kl_dispatch(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    """master's validate_rl_args compares a given kl_dispatch_size with critic_config.global_batch_size;
    cli/train_grpo.py passes no critic config, so it fails with AttributeError (found by diffval)."""
    if cfg.rl.get("kl_dispatch_size") and not cfg.rl.get("critic_resource"):
        yield Problem(  # R-KL
            rkey(cfg, "kl_dispatch_size"),
            "is PPO's (the critic's KL dispatch): GRPO has no critic config, and validate_rl_args fails "
            "reading its global_batch_size"
            + upstream("AttributeError: 'NoneType' object has no attribute 'global_batch_size'"),
            "remove kl_dispatch_size",
        )


# Multimodal GRPO's switches: validate_rl_args then reads the ViT's config or resources, which
# cli/train_grpo.py (text GRPO) never passes, so it fails with AttributeError (found by diffval).
# key -> (what it is for, the attribute the failure names)
MULTIMODAL_ONLY = {
    "reuse_image_embeds": (
        "(a ViT config): cli/train_grpo.py passes none, and validate_rl_args fails reading its "
        "global_batch_size",
        "global_batch_size",
    ),
    "colocate_actor_and_vit": (
        "(a ViT model on its own vit_resource): cli/train_grpo.py passes no ViT config, and validate_rl_args "
        "fails reading the ViT's resources",
        "num_npus",
    ),
}


def _multimodal_only(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    for key, (why, attribute) in MULTIMODAL_ONLY.items():
        if cfg.rl.get(key):
            yield Problem(  # R-VIT
                rkey(cfg, key),
                f"is for multimodal GRPO {why}"
                + upstream(f"AttributeError: 'NoneType' object has no attribute '{attribute}'"),
                f"remove {key} (or set it false)",
            )


RULES: tuple[Rule, ...] = (
    Rule("R1", _r1),
    Rule("R2", _r2),
    Rule("R3-R5", _r3_r5),
    Rule("S1-S2", _s),
    Rule("R6", _r6),
    Rule("R7", _r7),
    Rule("R7-2.2.0", _r7b, since="2.2.0", until="2.2.0"),
    Rule("R8", _r8, since="2.2.0"),
    Rule("R8-2.2.0", _r8b, since="2.2.0", until="2.2.0"),
    Rule("R9-R11", _r9_r11),
    Rule("R12-R13", _r12_r13),
    Rule("R14", _r14),
    Rule("R15-R17", _r15_r17),
    Rule("R18", _r18, since="2.2.0"),
    Rule("R19", _r19, since="master"),
    Rule("R20", _r20),
    Rule("R21", _r21, since="2.2.0"),
    Rule("R22", _r22, since="2.3.0"),
    Rule("R23", _r23),
    Rule("R24", _r24, since="2.2.0"),
    Rule("R25", _r25, since="2.2.0"),
    Rule("R26", _r26, since="2.2.0"),
    Rule("R27", _r27, since="2.2.0"),
    Rule("R28", _r28, since="master"),
    # the 2.3.0 commit install.sh pins (09b8c125, "添加dispatch_size参数校验") already reads it
    Rule("R-KL", _kl_dispatch, since="2.3.0"),
    Rule("R-VIT", _multimodal_only, since="2.2.0"),
)


def check(cfg: MindSpeedRLConfig, bc: Mapping[str, Any], *, cluster: bool = True) -> list[Problem]:
    """Every rule of the version in use, then the pre-flight checks (`preflight.py`); every problem (the
    pre-flight warnings: `preflight.warnings`)."""
    from ascendfactory.backends.common.mindspeed_rl_experiment import preflight

    found: list[Problem] = []
    for rule in RULES:
        if rule.applies(cfg.keys):
            found += rule.check(cfg, bc)
    found += preflight.check(cfg, bc, cluster=cluster)
    return found
