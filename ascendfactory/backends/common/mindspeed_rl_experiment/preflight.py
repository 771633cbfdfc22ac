"""The pre-flight checklist (the ids below are this module's own): what MindSpeed-RL's
config classes do not check but the cluster trips over later (vLLM, Megatron inside every worker, the
placement groups, the verifiers, the data), each with the source that fails: `check` returns the problems,
`warnings` what runs but not as a user would expect (MB, ML and P1 have both).

    V1  heads % infer TP              vLLM ModelConfig, when the rollout engine starts
    V2  train TP vs infer TP          vllm_adapter/vllm_parallel_state.py (split or gather)
    M1  heads / KV groups % TP, layers % PP     Megatron validate_args inside every worker
    T1  verifier names                models/rule_verifier.py skips an unknown one: reward 0, no metric
    K1  KL controller                 trainer/base.py
    MB  actor update mini-batches     workers/actor_hybrid_worker.py (torch.split)
    SC  sampling_config complete      GenerateConfig replaces its defaults whole; the actor reads
                                      sampling_config["temperature"] / ["max_tokens"]
    ML  max_model_len vs prompt + response (warning)
    D*  the dataset yaml              validate_data_handler_config, templates.json, the handler's keys
    A*  required keys and the GRPO stage
    P1  placement (cluster checks)    workers/scheduler/launcher.py: ray.get(pg.ready()) waits forever
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ascendfactory.backends.common.mindspeed_rl_experiment.naming import gkey, mkey, rkey
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.errors import Problem

if TYPE_CHECKING:
    from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import MindSpeedRLConfig

GRPO_STAGE = "ray_grpo"
# Handlers whose output has one key per dataset_additional_keys entry besides input_ids/attention_mask.
EXTRA_KEY_HANDLERS = ("R1AlpacaStyleInstructionHandler", "Math17kAlpacaStyleInstructionHandler")
SINGLE_KEY_HANDLERS = ("GeneralPretrainHandler",)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _vllm(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d = cfg.derived
    if d.heads and d.heads % d.infer_tp:
        ok = [x for x in _divisors(d.heads) if d.actor_npus % x == 0 and x <= d.actor_npus]
        text = (
            f"Total number of attention heads ({d.heads}) must be divisible by tensor parallel size "
            f"({d.infer_tp})."
        )
        default = (
            ""
            if "infer_tensor_parallel_size" in (cfg.sections.get("generate_config") or {})
            else " (its default)"
        )
        yield Problem(  # V1
            gkey(cfg, "infer_tensor_parallel_size"),
            f"{d.infer_tp}{default} does not divide the "
            f"model's {d.heads} attention heads: vLLM refuses it when the rollout starts "
            f'(vLLM: "{text}")',
            f"use one of {ok}",
        )
    world = d.actor_npus
    dp_t = world // (d.tp * d.pp)
    if d.infer_tp > d.tp and (dp_t * d.tp < d.infer_tp or (dp_t * d.tp) % d.infer_tp):
        text = f"Can't split train tp size {d.tp} to infer tp size {d.infer_tp} with train dp size {dp_t}."
        yield Problem(  # V2
            gkey(cfg, "infer_tensor_parallel_size"),
            f"{d.infer_tp} cannot be made from the "
            f"training layout (TP {d.tp} x train DP {dp_t} = {dp_t * d.tp} ranks per pipeline stage)"
            f' (MindSpeed-RL: "{text}")',
            f"use an infer TP that divides {dp_t * d.tp}",
        )
    if d.infer_tp <= d.tp and d.tp % d.infer_tp:
        text = f"Can't gather train tp size {d.tp} to infer tp size {d.infer_tp}"
        yield Problem(  # V2
            gkey(cfg, "infer_tensor_parallel_size"),
            f'{d.infer_tp} does not divide the training TP {d.tp} (MindSpeed-RL: "{text}")',
            f"use one of {_divisors(d.tp)}",
        )


def _megatron(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d = cfg.derived
    if d.heads and d.heads % d.tp:
        yield Problem(  # M1
            mkey(cfg, "tensor_model_parallel_size"),
            f"{d.tp} does not divide the model's "
            f"{d.heads} attention heads (Megatron's validate_args in every worker)",
            f"use one of {_divisors(d.heads)}",
        )
    if d.kv_heads and d.kv_heads != d.heads and d.kv_heads % d.tp:
        yield Problem(  # M1
            mkey(cfg, "tensor_model_parallel_size"),
            f"{d.tp} does not divide the model's {d.kv_heads} KV groups (num_query_groups)",
            f"use one of {_divisors(d.kv_heads)}",
        )
    if (
        d.num_layers
        and d.pp > 1
        and d.num_layers % d.pp
        and not cfg.actor.get("num_layer_list")
        and not cfg.actor.get("noop_layers")
    ):
        yield Problem(  # M1
            mkey(cfg, "pipeline_model_parallel_size"),
            f"{d.pp} does not divide the model's {d.num_layers} layers",
            f"use one of {_divisors(d.num_layers)}, or set num_layer_list",
        )


def _verifiers(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    names = cfg.rl.get("verifier_function")
    if not isinstance(names, list):
        return
    if cfg.rl.get("rule_reward") and not names:
        yield Problem(  # T1
            rkey(cfg, "verifier_function"),
            "is empty: the rule reward scores every response 0",
            "name at least one verifier, e.g. [base_acc]",
        )
    for name in names:
        if name not in cfg.keys.verifiers:
            yield Problem(  # T1
                rkey(cfg, "verifier_function"),
                f"{name!r} is not a verifier of MindSpeed-RL "
                f"{cfg.keys.rules_version}{did_you_mean(str(name), cfg.keys.verifiers)}: "
                "models/rule_verifier.py skips it silently (its reward is 0, no metric is logged)",
                "use one of: " + ", ".join(cfg.keys.verifiers),
            )


def _kl(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    kind = cfg.rl.get("kl_ctrl_type")
    if kind not in ("fixed", "adaptive"):
        yield Problem(  # K1
            rkey(cfg, "kl_ctrl_type"),
            f"{kind!r} is not a KL controller (trainer/base.py raises NotImplementedError)",
            "use fixed or adaptive",
        )
    horizon = cfg.rl.get("kl_horizon")
    if kind == "adaptive" and isinstance(horizon, (int, float)) and horizon <= 0:
        yield Problem(  # K1
            rkey(cfg, "kl_horizon"),
            f"must be larger than 0 with kl_ctrl_type adaptive "
            f'(MindSpeed-RL: "horizon must be larger than 0. Got {horizon}")',
            "set kl_horizon: 1000",
        )


def _mini_batch(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d = cfg.derived
    key = rkey(cfg, "mini_batch_size")
    per_dp = d.mini_batch_samples // d.actor_dp if d.actor_dp else 0
    if d.actor_dp and per_dp < 1:
        yield Problem(  # MB
            key,
            f"{d.mini_batch_prompts} prompts x n_samples_per_prompt {d.n_samples} = "
            f"{d.mini_batch_samples} samples per update are fewer than the {d.actor_dp} actor data "
            "parallel ranks: each rank's mini-batch is empty (torch.split fails in the actor update)",
            f"use a mini_batch_size of at least {-(-d.actor_dp // d.n_samples)}",
        )


def _mini_batch_warnings(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d = cfg.derived
    key = rkey(cfg, "mini_batch_size")
    per_dp = d.mini_batch_samples // d.actor_dp if d.actor_dp else 0
    if d.actor_dp and per_dp < 1:
        return  # `_mini_batch` refuses it
    if d.gbs % d.mini_batch_prompts:
        yield Problem(  # MB
            key,
            f"{d.mini_batch_prompts} does not divide global_batch_size {d.gbs}: the last "
            "actor update of each iteration is smaller than the others",
            f"use a divisor of {d.gbs}",
        )
    if d.actor_dp and d.mini_batch_samples % d.actor_dp:
        yield Problem(  # MB
            key,
            f"{d.mini_batch_samples} samples per update do not split evenly over {d.actor_dp} "
            "actor data parallel ranks",
            f"make mini_batch_size x n_samples a multiple of {d.actor_dp}",
        )
    elif per_dp % d.mbs:
        yield Problem(  # MB
            key,
            f"each actor data parallel rank updates on {per_dp} samples, not a multiple of "
            f"micro_batch_size {d.mbs}",
            f"make {per_dp} a multiple of {d.mbs}",
        )


def _sampling(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    given = (cfg.sections.get("generate_config") or {}).get("sampling_config")
    if isinstance(given, Mapping):
        for key in ("temperature", "max_tokens"):
            if key not in given:
                yield Problem(  # SC
                    f"generate_config.sampling_config.{key}",
                    "is missing: a given sampling_config "
                    "replaces MindSpeed-RL's defaults whole, and the actor reads "
                    f'sampling_config["{key}"] (KeyError on the cluster)',
                    f"add {key}: <value>",
                )


def _model_len_warnings(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d = cfg.derived
    if d.max_tokens and d.max_prompt_length and d.max_model_len < d.max_prompt_length + d.max_tokens:
        yield Problem(  # ML
            gkey(cfg, "max_model_len"),
            f"{d.max_model_len} is less than max_prompt_length "
            f"{d.max_prompt_length} + sampling_config.max_tokens {d.max_tokens}: long prompts leave "
            "vLLM less room than max_tokens",
            f"set max_model_len >= {d.max_prompt_length + d.max_tokens}",
        )


def _required(cfg: MindSpeedRLConfig, bc: Mapping[str, Any]) -> Iterable[Problem]:
    if not cfg.actor.get("tokenizer_name_or_path"):
        yield Problem(  # A1
            "megatron_training.tokenizer_name_or_path",
            "required: the HF model directory (tokenizer, "
            "config.json; vLLM loads the rollout model's config from it)",
            "set it (or model_name_or_path) to the HF model directory",
        )
    stage = cfg.actor.get("stage")
    if stage != GRPO_STAGE:
        yield Problem(  # A2
            mkey(cfg, "stage"),
            f"is {stage!r}; cli/train_grpo.py trains with stage {GRPO_STAGE}",
            f"set stage: {GRPO_STAGE} (or remove it)",
        )
    pre = cfg.preprocess or {}
    if not cfg.actor.get("data_path") and not pre.get("input"):
        yield Problem(  # A3
            "preprocess_data.input",
            "no training data: neither preprocess_data.input nor megatron_training.data_path is set",
            "set preprocess_data.input to the raw dataset (json, "
            "jsonl, parquet, ...) or megatron_training.data_path to a preprocessed prefix",
        )
    extra = cfg.actor.get("dataset_additional_keys") or []
    if cfg.rl.get("rule_reward") and isinstance(extra, list) and "labels" not in extra:
        yield Problem(  # A4
            mkey(cfg, "dataset_additional_keys"),
            f"is {extra}: the rule reward reads each prompt's "
            'answer as data["labels"] (models/rule_verifier.py), so the dataset must carry it',
            "set dataset_additional_keys: [labels]",
        )


def _preprocess(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    pre = cfg.preprocess
    if pre is None:
        return
    ks = cfg.keys
    handler = pre.get("handler_name", "")
    prompt = pre.get("prompt_type", "empty")
    p = "preprocess_data."
    if prompt is not None and handler not in ks.prompt_type_handlers:
        yield Problem(  # D1
            p + "handler_name",
            f"{handler!r} cannot be used with a prompt_type (prompt_type is "
            f"{prompt!r}; the default is 'empty'){did_you_mean(str(handler), ks.prompt_type_handlers)}"
            f' (MindSpeed-RL: "If specify prompt_type , handler name must be in: ...")',
            "use one of: " + ", ".join(ks.prompt_type_handlers),
        )
    if prompt is not None and prompt not in ks.prompt_types:
        yield Problem(  # D2
            p + "prompt_type",
            f"{prompt!r} is not a template of configs/model/templates.json"
            f'{did_you_mean(str(prompt), ks.prompt_types)} (MindSpeed-RL: "Template {prompt} does not '
            'exist.")',
            "use one of: " + ", ".join(ks.prompt_types),
        )
    if pre.get("neat_pack") and not pre.get("pack"):
        yield Problem(  # D3
            p + "neat_pack",
            'needs pack: true (MindSpeed-RL: "Require set `pack` True when `neat-pack` is True.")',
            "set pack: true, or remove neat_pack",
        )
    if pre.get("enable_thinking") and prompt != "qwen3":
        yield Problem(  # D4
            p + "enable_thinking",
            f"works only with prompt_type qwen3 (got {prompt!r}) "
            '(MindSpeed-RL: "enable_thinking only support when using qwen3 prompt type")',
            "set prompt_type: qwen3, or remove enable_thinking",
        )
    src = pre.get("input")
    if (
        pre.get("merge_group_keys") is not None
        and isinstance(src, str)
        and os.path.exists(src)
        and not os.path.isdir(src)
    ):
        yield Problem(  # D5
            p + "merge_group_keys",
            f"needs input to be a directory ({src} is a file)",
            "point input at a directory, or remove merge_group_keys",
        )
    if handler in EXTRA_KEY_HANDLERS:
        want = cfg.actor.get("dataset_additional_keys") or []
        have = pre.get("dataset_additional_keys") or []
        missing = (
            [k for k in want if k not in have] if isinstance(want, list) and isinstance(have, list) else []
        )
        if missing:
            yield Problem(  # D6
                p + "dataset_additional_keys",
                f"lacks {missing}, which training reads "
                f"(megatron_training.dataset_additional_keys {want}): {handler} writes one "
                "<prefix>_packed_<key>_document file per listed key",
                f"set dataset_additional_keys: {want}",
            )
    if pre.get("pack") and handler in SINGLE_KEY_HANDLERS:
        yield Problem(  # D7
            p + "pack",
            'pre-training data is not packed (MindSpeed-RL: "Pre-training data '
            'processing does not need to be packed...")',
            "remove pack",
        )


def _placement(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d = cfg.derived
    need = d.actor_npus + (d.ref_npus or 0) + (d.reward_npus or 0)
    res = "rl_config.actor_resource.num_npus"
    if need > d.cluster_npus:
        parts = (
            f"actor {d.actor_npus}"
            + (f" + reference {d.ref_npus}" if d.ref_npus else "")
            + (f" + reward {d.reward_npus}" if d.reward_npus else "")
        )
        yield Problem(  # P1
            res,
            f"the workers need {need} NPUs ({parts}) but the cluster has {d.cluster_npus} "
            f"(env.NNODES {d.nnodes} x {d.npus_per_node} per node): the placement group would wait "
            "forever (workers/scheduler/launcher.py)",
            f"use at most {d.cluster_npus} NPUs, or more nodes",
        )


def _placement_warnings(cfg: MindSpeedRLConfig) -> Iterable[Problem]:
    d = cfg.derived
    need = d.actor_npus + (d.ref_npus or 0) + (d.reward_npus or 0)
    res = "rl_config.actor_resource.num_npus"
    if need < d.cluster_npus:
        yield Problem(  # P1
            res,
            f"the workers use {need} of the cluster's {d.cluster_npus} NPUs",
            "use them all, or fewer nodes / env.NPUS_PER_NODE",
        )
    if d.actor_npus > d.npus_per_node and d.actor_npus % d.npus_per_node:
        yield Problem(  # P1
            res,
            f"{d.actor_npus} NPUs are not a whole number of nodes of {d.npus_per_node}: the "
            "last node gets a partial placement group",
            f"use a multiple of {d.npus_per_node}",
        )


def check(cfg: MindSpeedRLConfig, bc: Mapping[str, Any], *, cluster: bool = True) -> list[Problem]:
    """What the cluster would trip over: a problem each (`cluster`: the vLLM and placement checks too)."""
    found = [
        *_required(cfg, bc),
        *_preprocess(cfg),
        *_megatron(cfg),
        *_verifiers(cfg),
        *_kl(cfg),
        *_mini_batch(cfg),
        *_sampling(cfg),
    ]
    if cluster:
        found += [*_vllm(cfg), *_placement(cfg)]
    return found


def warnings(cfg: MindSpeedRLConfig, *, cluster: bool = True) -> list[Problem]:
    """What runs, but not as a user would expect: uneven mini-batches, a short max_model_len, NPUs left idle
    or a partial node (`cluster`: the placement ones too). Warned as `key: message`."""
    found = [*_mini_batch_warnings(cfg), *_model_len_warnings(cfg)]
    if cluster:
        found += _placement_warnings(cfg)
    return found
