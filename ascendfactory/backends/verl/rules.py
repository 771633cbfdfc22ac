"""verl's configuration rules, reimplemented with our messages and run on the composed config, as a table.

verl 0.9.1 checks most of these in `verl.utils.config.validate_config` (called by `main_ppo.main` before Ray
starts) and the `__post_init__` / `validate` of its actor and critic config classes
(`verl/workers/config/actor.py`, `critic.py`), one at a time and with messages that often lack the key.
Some it checks only on the workers, minutes into a cluster run (`verl/workers/engine_workers.py`,
`trainer/ppo/v1/trainer_separate_async.py`), and some never (value types: `trainer.nnodes=abc` passes).
Here every rule runs on the config Hydra composes (or `schema.compose` without verl) and every broken
rule is reported at once, naming the keys, their values and a fix.

A rule is `Rule(name, source, check)`: `check(view)` yields a `Problem` for each problem, keyed in verl's
config (the backend names it under backend_config); `view` is the composed config plus the facts around it
(devices, the model's attention heads).
"""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ascendfactory.backends.common.hydra.schema import (
    MISSING,
    REQUIRED,
    Override,
    Schema,
    get_path,
    parse_literal,
)
from ascendfactory.errors import Problem

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
REF = "actor_rollout_ref.ref."
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
ROLLOUT_NAMES = ("vllm", "sglang", "trtllm")  # verl 0.9.1's RolloutReplicaRegistry
VLLM_MAX_LORA_RANK = 512  # verl's fallback list of vLLM's MaxLoRARanks ends at 512
# Keys that must be whole numbers >= 1 (verl does arithmetic on them; a string fails with a TypeError that
# names no key, or passes silently).
POSITIVE_INTS = (
    "data.train_batch_size",
    "data.max_prompt_length",
    "data.max_response_length",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "trainer.total_epochs",
    A + "ppo_mini_batch_size",
    A + "ppo_epochs",
    A + "ulysses_sequence_parallel_size",
    R + "n",
    R + "tensor_model_parallel_size",
    R + "data_parallel_size",
    R + "pipeline_model_parallel_size",
)
POSITIVE_INTS_OR_NULL = (
    A + "ppo_micro_batch_size",
    A + "ppo_micro_batch_size_per_gpu",
    R + "log_prob_micro_batch_size",
    R + "log_prob_micro_batch_size_per_gpu",
    REF + "log_prob_micro_batch_size",
    REF + "log_prob_micro_batch_size_per_gpu",
    "critic.ppo_mini_batch_size",
    "critic.ppo_micro_batch_size",
    "critic.ppo_micro_batch_size_per_gpu",
    "trainer.total_training_steps",
    "data.val_batch_size",
)


@dataclass
class View:
    """The composed config and the facts the rules need."""

    config: dict[str, Any]
    user: list[Override] = field(default_factory=list)  # what backend_config set (type checks)
    schema: Schema | None = None
    heads: int | None = None  # the model's num_attention_heads (config.json), when readable
    kv_heads: int | None = None

    def get(self, key: str, default: Any = None) -> Any:
        value = get_path(self.config, key.split("."))
        return default if value is MISSING else value

    def int(self, key: str) -> builtins.int | None:
        """The value when it is a whole number (bools excluded), else None (the type rule reports it)."""
        value = self.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def flag(self, key: str) -> bool:
        value = self.get(key)
        return value is True

    @staticmethod
    def architectures(path: Any) -> Any:
        """`architectures` of the HF model directory's config.json (MISSING when it cannot be read)."""
        import json
        import os

        if not isinstance(path, str) or not path:
            return MISSING
        try:
            with open(os.path.join(os.path.expanduser(path), "config.json"), encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError):
            return MISSING
        return config.get("architectures") if isinstance(config, dict) else MISSING

    @property
    def n_gpus(self) -> builtins.int | None:
        nodes, per = self.int("trainer.nnodes"), self.int("trainer.n_gpus_per_node")
        return nodes * per if nodes and per else None

    @property
    def devices_text(self) -> str:
        return (
            f"the {self.n_gpus} devices (trainer.nnodes {self.get('trainer.nnodes')} from env.NNODES x "
            f"trainer.n_gpus_per_node {self.get('trainer.n_gpus_per_node')} from env.NPUS_PER_NODE or the "
            "visible devices)"
        )

    @property
    def megatron(self) -> bool:
        return self.get(A + "strategy") == "megatron"

    @property
    def dynamic_bsz(self) -> bool:
        return self.flag(A + "use_dynamic_bsz")

    @property
    def need_ref(self) -> bool:
        """verl's `need_reference_policy`: a KL term in the reward or in the actor loss."""
        return self.flag("algorithm.use_kl_in_reward") or self.flag(A + "use_kl_loss")

    @property
    def need_critic(self) -> bool:
        """verl's `need_critic`: `critic.enable` when set, else only for the GAE advantage estimator."""
        enable = self.get("critic.enable")
        return bool(enable) if enable is not None else self.get("algorithm.adv_estimator") == "gae"

    @property
    def critic_reason(self) -> str:
        """Why a critic runs, in the keys that decide it (for messages)."""
        if self.get("critic.enable") is not None:
            return f"critic.enable is {self.get('critic.enable')}"
        return f"algorithm.adv_estimator is {self.get('algorithm.adv_estimator')!r} (gae needs a critic)"

    def actor_dp(self) -> builtins.int | None:
        """The actor's data-parallel size on workers (FSDP: devices / Ulysses SP; Megatron: / TP·PP·CP)."""
        n = self.n_gpus
        if n is None:
            return None
        if self.megatron:
            parts = [
                self.int(A + f"megatron.{k}_parallel_size")
                for k in ("tensor_model", "pipeline_model", "context")
            ]
            if None in parts:
                return None
            size = math.prod(p for p in parts if p is not None)
            return n // size if size and n % size == 0 else None
        sp = self.actor_sp()
        return n // sp if sp and n % sp == 0 else None

    def actor_sp(self) -> builtins.int | None:
        legacy, engine = (
            self.int(A + "ulysses_sequence_parallel_size"),
            self.int(A + "fsdp_config.ulysses_sequence_parallel_size"),
        )
        if legacy and legacy > 1:
            return legacy  # FSDPActorConfig copies it into fsdp_config
        return engine or 1


@dataclass(frozen=True)
class Rule:
    name: str
    source: str  # where verl enforces it (or "not checked by verl")
    check: Callable[[View], Iterable[Problem]]


def _num(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


# -- types ----------------------------------------------------------------------------------------------
_SELECT = re.compile(r"\$\{oc\.select:[\w.]+,([^${}]+)\}")  # ${oc.select:other.key,fallback}


def _type_of(default: Any) -> str | None:
    if isinstance(default, str) and (m := _SELECT.fullmatch(default)):
        return _type_of(parse_literal(m.group(1)))  # the fallback's type (the other key has the same)
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, (int, float)):
        return "number"
    if isinstance(default, str) and "${" not in default and default != REQUIRED:
        return "string"
    if isinstance(default, list):
        return "list"
    return None  # null, an interpolation, a mapping: any value


def _wrong_type(key: str, value: Any, want: str | None) -> bool:
    """Whether `value` is not of the type `want` of verl's default (what `check_types` names)."""
    return (
        (want == "bool" and not isinstance(value, bool))
        or (want == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))))
        or (want == "string" and isinstance(value, (dict, bool)))
        # file lists; target_modules takes a list of module names (HFModelConfig)
        or (want == "string" and isinstance(value, list) and not key.endswith(("_files", ".target_modules")))
        or (key.endswith("._target_") and not (isinstance(value, str) and value))  # a class path
        or (want == "list" and not isinstance(value, (list, str)))
    )


def check_types(v: View) -> Iterator[Problem]:
    seen = set()
    present = [k for k in POSITIVE_INTS if get_path(v.config, k.split(".")) is not MISSING]
    for key in present:  # keys of the composed config (megatron has no actor.ulysses_sequence_parallel_size)
        value = v.get(key)
        if not (isinstance(value, int) and not isinstance(value, bool)) or value < 1:
            seen.add(key)
            yield Problem(
                key,
                f"is {_num(value)}: verl needs a whole number >= 1 here",
                f"set {key} to a positive integer",
            )
    for key in POSITIVE_INTS_OR_NULL:
        value = v.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            seen.add(key)
            yield Problem(
                key,
                f"is {_num(value)}: verl needs a whole number >= 1 or null here",
                f"set {key} to a positive integer, or null",
            )
    for key in ("actor_rollout_ref.model.target_modules", "critic.model.target_modules"):
        value = v.get(key)  # HFModelConfig.__post_init__ (verl/workers/config/model.py): str or list[str]
        ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(x, str) for x in value))
        if value is not None and key not in seen and not ok:
            seen.add(key)
            yield Problem(
                key,
                f"is {_num(value)}: verl's model config takes a module name pattern or a list of names",
                f"set {key} to all-linear, or a list of module names",
            )
    if v.schema is None:
        return
    for o in v.user:  # every other value the user set, against the type of verl's default
        if o.key in seen or o.plus:
            continue
        want = _type_of(v.schema.default(o.key))
        value = o.value
        if _wrong_type(o.key, value, want):
            default = v.schema.default(o.key)
            yield Problem(
                o.key,
                f"is {_num(value)} ({type(value).__name__}); verl's default is {default!r}, a "
                f"{want}: verl does "
                "not check types and would fail later or silently misread it",
                f"give {o.key} a {want}" + (" (true or false)" if want == "bool" else ""),
            )


# -- verl's validate_config and its config classes ------------------------------------------------------
def check_batch_divisible(v: View) -> Iterator[Problem]:
    if v.dynamic_bsz:
        return
    n, tbs, rn = v.n_gpus, v.int("data.train_batch_size"), v.int(R + "n")
    if not (n and tbs and rn):
        return
    if v.megatron:
        tp, pp, cp = (
            v.int(A + f"megatron.{k}_parallel_size") for k in ("tensor_model", "pipeline_model", "context")
        )
        if not (tp and pp and cp):
            return
        if n % (tp * pp * cp):
            yield Problem(
                A + "megatron.tensor_model_parallel_size",
                f"TP {tp} x PP {pp} x CP {cp} = {tp * pp * cp} does not divide {v.devices_text}",
                "choose TP, PP and CP whose product divides the device count",
            )
            return
        micro = v.int(A + "ppo_micro_batch_size_per_gpu")
        if micro is None:
            return
        minimal = n // (tp * pp * cp) * micro
        what = (
            f"the data-parallel size {n // (tp * pp * cp)} x ppo_micro_batch_size_per_gpu {micro} = {minimal}"
        )
    else:
        minimal, what = n, v.devices_text
    if (tbs * rn) % minimal:
        good = next(b for b in range(tbs, tbs + minimal + 1) if (b * rn) % minimal == 0)
        yield Problem(
            "data.train_batch_size",
            f"data.train_batch_size {tbs} x {R}n {rn} = {tbs * rn} responses per step are not "
            f"divisible by {what}",
            f"use data.train_batch_size {good} (or change {R}n or the device count)",
        )


def _pair(v: View, section: str, name: str) -> Iterator[Problem]:
    both = (v.get(f"{section}.{name}"), v.get(f"{section}.{name}_per_gpu"))
    if both[0] is None and both[1] is None:
        yield Problem(
            f"{section}.{name}_per_gpu",
            f"neither {section}.{name} nor {section}.{name}_per_gpu is set (verl needs exactly one when "
            f"{A}use_dynamic_bsz is false)",
            f"set {section}.{name}_per_gpu (e.g. 1)",
        )
    elif both[0] is not None and both[1] is not None:
        yield Problem(
            f"{section}.{name}",
            f"both {section}.{name} ({both[0]}) and {section}.{name}_per_gpu ({both[1]}) are set; verl takes "
            "exactly one (the first is deprecated)",
            f"remove {section}.{name}",
        )


def check_micro_batch_pairs(v: View) -> Iterator[Problem]:
    if v.dynamic_bsz:
        return
    yield from _pair(v, "actor_rollout_ref.actor", "ppo_micro_batch_size")
    yield from _pair(v, "actor_rollout_ref.rollout", "log_prob_micro_batch_size")
    if v.need_ref:
        yield from _pair(v, "actor_rollout_ref.ref", "log_prob_micro_batch_size")


def check_loss_agg_mode(v: View) -> Iterator[Problem]:
    mode = v.get(A + "loss_agg_mode")
    if mode not in LOSS_AGG_MODES:
        yield Problem(
            A + "loss_agg_mode",
            f"'{mode}' is not a loss aggregation mode of verl",
            "use one of: " + ", ".join(LOSS_AGG_MODES),
        )


def check_mini_batch(v: View) -> Iterator[Problem]:
    if v.dynamic_bsz:
        return
    tbs, mini = v.int("data.train_batch_size"), v.int(A + "ppo_mini_batch_size")
    if tbs and mini and tbs < mini:
        yield Problem(
            A + "ppo_mini_batch_size",
            f"{mini} is larger than data.train_batch_size {tbs} (a mini-batch is part of a step's batch)",
            f"use at most {tbs}",
        )
    micro, n, sp = v.int(A + "ppo_micro_batch_size"), v.n_gpus, v.actor_sp()
    if micro and mini and mini % micro:
        yield Problem(
            A + "ppo_micro_batch_size",
            f"{micro} does not divide {A}ppo_mini_batch_size {mini}",
            "use a divisor, or ppo_micro_batch_size_per_gpu",
        )
    if micro and n and sp and micro * sp < n and not v.megatron:
        yield Problem(
            A + "ppo_micro_batch_size",
            f"{micro} x ulysses_sequence_parallel_size {sp} = {micro * sp} is below {v.devices_text}",
            "use ppo_micro_batch_size_per_gpu instead (the global one is deprecated)",
        )


def check_sequence_parallel(v: View) -> Iterator[Problem]:
    sp = v.int(A + "ulysses_sequence_parallel_size")
    if not v.megatron and sp and sp > 1 and not v.flag("actor_rollout_ref.model.use_remove_padding"):
        yield Problem(
            "actor_rollout_ref.model.use_remove_padding",
            f"is false, but {A}ulysses_sequence_parallel_size is {sp}: Ulysses sequence parallelism needs it",
            "set actor_rollout_ref.model.use_remove_padding: true",
        )


def check_sampling_temperature(v: View) -> Iterator[Problem]:
    temp = v.get(R + "temperature")
    if v.flag(R + "val_kwargs.do_sample") and isinstance(temp, (int, float)) and temp <= 0:
        yield Problem(
            R + "temperature",
            f"is {temp}, but {R}val_kwargs.do_sample is true: sampling needs a temperature above 0",
            f"set {R}temperature > 0, or {R}val_kwargs.do_sample: false",
        )


def check_router_replay(v: View) -> Iterator[Problem]:
    strategy = v.get(A + "strategy")
    engines = {"megatron": "megatron", "veomni": "veomni"}
    engine = engines.get(strategy, "fsdp_config") if isinstance(strategy, str) else "fsdp_config"
    if v.get(A + f"{engine}.router_replay.mode") == "R2" and v.flag(
        "algorithm.rollout_correction.bypass_mode"
    ):
        yield Problem(
            "algorithm.rollout_correction.bypass_mode",
            f"is true, but {A}{engine}.router_replay.mode is R2, which records routes while recomputing the "
            "actor's old log-probs (bypass mode skips that pass)",
            "set algorithm.rollout_correction.bypass_mode: false, or another router_replay.mode",
        )


def check_lora_rank(v: View) -> Iterator[Problem]:
    rank = v.get("actor_rollout_ref.model.lora.rank") or 0
    key = "actor_rollout_ref.model.lora.rank"
    if not (isinstance(rank, int) and rank > 0):
        rank, key = v.get("actor_rollout_ref.model.lora_rank") or 0, "actor_rollout_ref.model.lora_rank"
    if v.flag("actor_rollout_ref.model.lora.merge") or not isinstance(rank, int):
        return
    if v.get(R + "name") == "vllm" and rank > VLLM_MAX_LORA_RANK:
        yield Problem(
            key,
            f"{rank} is above vLLM's largest LoRA rank {VLLM_MAX_LORA_RANK}",
            f"use a rank <= {VLLM_MAX_LORA_RANK}",
        )


def check_critic(v: View) -> Iterator[Problem]:
    if not v.need_critic:
        return
    path = v.get("critic.model.path")
    placeholder = v.schema.default("critic.model.path") if v.schema else None
    if path in (None, "", REQUIRED) or path == placeholder:
        yield Problem(
            "critic.model.path",
            f"is {path!r} (verl's placeholder): {v.critic_reason}, so verl trains a value model from it",
            "set critic.model.path (usually the actor's model path)",
        )
    if v.flag("critic.use_dynamic_bsz"):
        return
    yield from _pair(v, "critic", "ppo_micro_batch_size")
    tbs, mini, micro = (
        v.int("data.train_batch_size"),
        v.int("critic.ppo_mini_batch_size"),
        v.int("critic.ppo_micro_batch_size"),
    )
    if tbs and mini and tbs < mini:
        yield Problem(
            "critic.ppo_mini_batch_size",
            f"{mini} is larger than data.train_batch_size {tbs}",
            f"use at most {tbs}",
        )
    if micro and mini and mini % micro:
        yield Problem(
            "critic.ppo_micro_batch_size",
            f"{micro} does not divide critic.ppo_mini_batch_size {mini}",
            "use a divisor",
        )
    # FSDPCriticConfig.validate and VeOmniCriticConfig.validate: micro x the critic's Ulysses size >= devices
    fsdp_sp = "critic.ulysses_sequence_parallel_size"
    sp_key = {"fsdp": fsdp_sp, "fsdp2": fsdp_sp, "veomni": "critic.veomni.ulysses_parallel_size"}
    key = sp_key.get(v.get("critic.strategy"))
    sp, n = (v.int(key) or 1) if key else 1, v.n_gpus
    if micro and n and key and micro * sp < n:
        yield Problem(
            "critic.ppo_micro_batch_size",
            f"{micro} x {key} {sp} is below {v.devices_text}",
            "use critic.ppo_micro_batch_size_per_gpu instead",
        )


# -- what verl checks only on the workers, or never ----------------------------------------------------
def check_worker_mini_batch(v: View) -> Iterator[Problem]:
    """engine_workers.train_mini_batch: ppo_mini_batch_size x rollout.n split evenly over the actor's DP."""
    mini, rn, dp = v.int(A + "ppo_mini_batch_size"), v.int(R + "n"), v.actor_dp()
    if mini and rn and dp and (mini * rn) % dp:
        good = next(m for m in range(mini, mini + dp + 1) if (m * rn) % dp == 0)
        yield Problem(
            A + "ppo_mini_batch_size",
            f"{mini} x {R}n {rn} = {mini * rn} samples per mini-batch do not split over the actor's "
            f"{dp} data-parallel ranks (verl's validate_config lets this pass; its workers fail with "
            "'Got mini_batch_size=... and ...get_data_parallel_size()=...' after the cluster started)",
            f"use ppo_mini_batch_size {good}",
        )
    if not v.need_critic:
        return
    cmini = v.int("critic.ppo_mini_batch_size")
    n = v.n_gpus
    csp = v.int("critic.ulysses_sequence_parallel_size") or 1
    cdp = n // csp if n and n % csp == 0 else None
    if cmini and rn and cdp and (cmini * rn) % cdp:
        yield Problem(
            "critic.ppo_mini_batch_size",
            f"{cmini} x {R}n {rn} = {cmini * rn} samples per mini-batch do not split over the critic's "
            f"{cdp} data-parallel ranks (verl's workers would fail after the cluster started)",
            "use a critic.ppo_mini_batch_size whose product with rollout.n is a multiple of " + str(cdp),
        )


def check_rollout_parallel(v: View) -> Iterator[Problem]:
    tp, dp, pp, n = (
        v.int(R + "tensor_model_parallel_size"),
        v.int(R + "data_parallel_size"),
        v.int(R + "pipeline_model_parallel_size"),
        v.n_gpus,
    )
    if tp and dp and pp and n and n % (tp * dp * pp):
        yield Problem(
            R + "tensor_model_parallel_size",
            f"rollout TP {tp} x DP {dp} x PP {pp} = {tp * dp * pp} does not divide {v.devices_text} (verl's "
            "workers would fail after the cluster started)",
            "choose rollout sizes whose product divides the device count",
        )
    if tp and v.heads and v.heads % tp:
        fits = [t for t in range(1, v.heads + 1) if v.heads % t == 0 and (not n or n % t == 0)]
        yield Problem(
            R + "tensor_model_parallel_size",
            f"{tp} does not divide the model's {v.heads} attention heads (the inference engine "
            "shards heads by TP)",
            "use one of: " + ", ".join(str(t) for t in fits[:8]),
        )
    if tp and v.kv_heads and v.kv_heads % tp and tp % v.kv_heads:
        yield Problem(
            R + "tensor_model_parallel_size",
            f"{tp} and the model's {v.kv_heads} key/value heads do not divide one another (neither "
            "sharded nor "
            "replicated evenly)",
            f"use a TP that divides {v.kv_heads} or is a multiple of it",
        )


# The engine config classes validate_config builds with the actor (and the critic): their __post_init__
# asserts (verl 0.9.1 verl/workers/config/engine.py, optimizer.py). Engine section -> field -> choices.
ENGINE_SECTIONS = {  # the actor's engine section, the critic's, per actor strategy
    "fsdp": ("fsdp_config", "fsdp"),
    "fsdp2": ("fsdp_config", "fsdp"),
    "megatron": ("megatron", "megatron"),
    "veomni": ("veomni", "veomni"),
    "torchtitan": ("torchtitan", "torchtitan"),
}
ENGINE_CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "fsdp_config": {"strategy": ("fsdp", "fsdp2", "fsdp_turbo")},  # FSDPEngineConfig
    "fsdp": {"strategy": ("fsdp", "fsdp2", "fsdp_turbo")},
    "megatron": {"dtype": ("bfloat16", "float16"), "router_replay.mode": ("disabled", "R2", "R3")},
    "veomni": {"strategy": ("veomni",), "router_replay.mode": ("disabled", "R2", "R3")},
    "torchtitan": {
        "attn_type": ("flex", "flex_flash", "varlen"),
        "spmd_backend": ("default", "full_dtensor", "spmd_types"),
        "activation_checkpoint": ("selective", "full", "none"),
        "strategy": ("torchtitan",),
    },
}
MCORE_OPTIM_DTYPES = ("fp32", "float32", "32", "bf16", "bfloat16")  # McoreOptimizerConfig.__post_init__


def _engine_sections(v: View) -> Iterator[tuple[str, str]]:
    """(the section's key prefix, its engine kind) for the actor, and the critic when one runs."""
    strategy = v.get(A + "strategy")
    sections = ENGINE_SECTIONS.get(strategy) if isinstance(strategy, str) else None
    if sections is None:
        return
    yield A + sections[0] + ".", sections[0]
    if v.need_critic:
        yield "critic." + sections[1] + ".", sections[1]


def check_engine_choices(v: View) -> Iterator[Problem]:
    for prefix, engine in _engine_sections(v):
        for name, allowed in ENGINE_CHOICES[engine].items():
            value = v.get(prefix + name)
            if value is not None and value not in allowed:
                yield Problem(
                    prefix + name,
                    f"is {value!r}: verl's {engine} engine config takes " + ", ".join(allowed),
                    f"set {prefix}{name} to one of: " + ", ".join(allowed),
                )
        if engine == "megatron" and v.flag(prefix + "dynamic_context_parallel"):
            seqlen = v.get(prefix + "max_seqlen_per_dp_cp_rank")
            if not (isinstance(seqlen, int) and not isinstance(seqlen, bool) and seqlen > 0):
                yield Problem(
                    prefix + "max_seqlen_per_dp_cp_rank",
                    f"is {seqlen!r}, but {prefix}dynamic_context_parallel is true: it needs a positive whole "
                    "number of tokens",
                    f"set {prefix}max_seqlen_per_dp_cp_rank (e.g. the sequence length), or "
                    "dynamic_context_parallel: false",
                )
        if engine == "veomni":
            limit = v.get(prefix + "activation_offload_host_cache_limit_gb")
            if isinstance(limit, (int, float)) and not isinstance(limit, bool):
                if not math.isfinite(limit) or limit < 0:
                    yield Problem(
                        prefix + "activation_offload_host_cache_limit_gb",
                        f"is {limit}: verl needs a finite value >= 0",
                        f"set {prefix}activation_offload_host_cache_limit_gb to 0 or more",
                    )
            mode = v.get(prefix + "router_replay.mode")
            if (
                prefix.startswith(A)
                and mode not in (None, "disabled")
                and not v.flag(A + "use_remove_padding")
            ):
                yield Problem(
                    prefix + "router_replay.mode",
                    f"is {mode!r}, but the actor's use_remove_padding is false: verl's VeOmni actor replays "
                    "routes only with remove-padding",
                    "set actor_rollout_ref.model.use_remove_padding: true, or router_replay.mode: disabled",
                )
    if v.megatron:
        for prefix in (A + "optim.", *(("critic.optim.",) if v.need_critic else ())):
            for name in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
                value = v.get(prefix + name)
                if value is not None and str(value) not in MCORE_OPTIM_DTYPES:
                    yield Problem(
                        prefix + name,
                        f"is {value!r}: verl's Megatron optimizer takes " + ", ".join(MCORE_OPTIM_DTYPES),
                        f"set {prefix}{name}: fp32 or bf16",
                    )


def check_critic_architectures(v: View) -> Iterator[Problem]:
    """HFModelConfig.__post_init__ (verl/workers/config/model.py), built for the critic by validate_config:
    the model's config.json (with override_config on top) names exactly one architecture."""
    if not v.need_critic:
        return
    override = v.get("critic.model.override_config")
    override = override if isinstance(override, dict) else {}
    if "architectures" in override:
        found, where = override["architectures"], "critic.model.override_config.architectures"
    else:
        found, where = v.architectures(v.get("critic.model.path")), "critic.model.path"
    if found is MISSING:
        return
    if not (isinstance(found, list) and len(found) == 1):
        yield Problem(
            where,
            f"gives the critic's model the architectures {found!r}: verl's HFModelConfig needs exactly one",
            "name one architecture (config.json's architectures, or override_config.architectures)",
        )


FSDP_SCHEDULES = ("constant", "cosine")  # verl/workers/config/optimizer.py FSDPOptimizerConfig.__post_init__


def check_fsdp_schedule(v: View) -> Iterator[Problem]:
    if v.get(A + "strategy") not in ("fsdp", "fsdp2"):
        return  # the Megatron, VeOmni and TorchTitan optimizer configs have their own schedules
    for prefix in (A + "optim.", *(("critic.optim.",) if v.need_critic else ())):
        for key in ("warmup_style", "lr_scheduler_type"):
            value = v.get(prefix + key)
            if (value is not None or key == "lr_scheduler_type") and value not in FSDP_SCHEDULES:
                yield Problem(
                    prefix + key,
                    f"is {value!r}: verl's FSDP optimizer takes " + " or ".join(FSDP_SCHEDULES),
                    f"set {prefix}{key}: cosine or constant"
                    + (", or remove it" if key == "warmup_style" else ""),
                )


def check_rollout_engine(v: View) -> Iterator[Problem]:
    name = v.get(R + "name")
    if name not in ROLLOUT_NAMES:
        yield Problem(
            R + "name",
            f"is {name!r}: verl 0.9.1's rollouts are the servers " + ", ".join(ROLLOUT_NAMES),
            f"set {R}name: vllm (vllm-ascend on NPU) or sglang",
        )


def check_separate_async(v: View) -> Iterator[Problem]:
    if v.get("trainer.v1.trainer_mode") != "separate_async":
        return
    tbs, mini, sync = (
        v.int("data.train_batch_size"),
        v.int(A + "ppo_mini_batch_size"),
        v.int("trainer.v1.separate_async.parameter_sync_step"),
    )
    if tbs and mini and sync and tbs != sync * mini:
        yield Problem(
            "data.train_batch_size",
            f"is {tbs}, but separate-async training needs parameter_sync_step {sync} x "
            f"ppo_mini_batch_size {mini} = {sync * mini}",
            f"set data.train_batch_size {sync * mini}, or change "
            "trainer.v1.separate_async.parameter_sync_step",
        )


# verl/utils/profiler/config.py (0.9.1): the profiler config classes' own asserts, run when a worker builds
# its ProfilerConfig / tool configs (the last key segment -> what its __post_init__ asserts). A key counts
# when a segment of its path names a profiler (`global_profiler`, `actor.profiler`, ...).
_WHOLE = "whole_ge0"
PROFILER_FIELDS: dict[str, str] = {
    "ranks": "list",  # ProfilerConfig: set | list | tuple
    "finish_hook_ranks": "list",
    "finish_hook_cmd": "str_or_null",
    "skip_first": _WHOLE,  # TorchProfilerScheduleConfig: int >= 0
    "wait": _WHOLE,
    "warmup": _WHOLE,
    "active": _WHOLE,
    "repeat": _WHOLE,
    "profile_token_start": "whole_ge0_or_null",  # Torch/NPU tool configs
    "profile_token_end": "whole_ge0_or_null",
    "trace_alloc_max_entries": "whole_gt0",  # TorchMemoryToolConfig
    "stack_depth": "whole_gt0",
    "memory_snapshot_num_steps": "whole_gt0",
    "config_path": "str_or_null",  # PrecisionDebuggerToolConfig
    "steps": "list_or_null",
    "stages": "list_or_null",
    "strict": "bool",
    "contents": "list",  # Torch/NPU tool configs (choices per tool below)
    "level": "str",  # NPUToolConfig
    "analysis": "bool",
}
PROFILER_CHOICES = {  # (tool section, field) -> allowed values
    ("torch", "contents"): ("cuda", "cpu", "memory", "shapes", "stack"),
    ("npu", "contents"): ("npu", "cpu", "memory", "shapes", "module", "stack"),
    ("npu", "level"): ("level_none", "level0", "level1", "level2"),
}
_KIND_TEXT = {
    "list": "a list",
    "list_or_null": "a list or null",
    "str": "a string",
    "str_or_null": "a string or null",
    "bool": "true or false",
    _WHOLE: "a whole number >= 0",
    "whole_ge0_or_null": "a whole number >= 0 or null",
    "whole_gt0": "a whole number >= 1",
}


def _fits(kind: str, value: Any) -> bool:
    whole = isinstance(value, int) and not isinstance(value, bool)
    return {
        "list": isinstance(value, list),
        "list_or_null": value is None or isinstance(value, list),
        "str": isinstance(value, str),
        "str_or_null": value is None or isinstance(value, str),
        "bool": isinstance(value, bool),
        _WHOLE: whole and value >= 0,
        "whole_ge0_or_null": value is None or (whole and value >= 0),
        "whole_gt0": whole and value >= 1,
    }[kind]


def check_profiler_fields(v: View) -> Iterator[Problem]:
    for o in v.user:
        parts = o.key.split(".")
        field_name = parts[-1]
        if field_name not in PROFILER_FIELDS or not any("profiler" in p for p in parts[:-1]):
            continue
        kind = PROFILER_FIELDS[field_name]
        if v.schema is not None and _wrong_type(o.key, o.value, _type_of(v.schema.default(o.key))):
            continue  # the types rule names it
        if not _fits(kind, o.value):
            yield Problem(
                o.key,
                f"is {_num(o.value)}: verl's profiler config asserts {field_name} is {_KIND_TEXT[kind]} "
                "when a worker builds it",
                f"give {o.key} {_KIND_TEXT[kind]}",
            )
            continue
        allowed = PROFILER_CHOICES.get((parts[-2], field_name)) if len(parts) > 1 else None
        given = o.value if isinstance(o.value, list) else [o.value]
        bad = [x for x in given if allowed and x not in allowed]
        if bad:
            yield Problem(
                o.key,
                f"holds {bad[0]!r}: verl's {parts[-2]} profiler takes only {', '.join(allowed or ())}",
                f"use values from: {', '.join(allowed or ())}",
            )
    for o in v.user:  # profile_token_end > profile_token_start, in one tool section
        if not o.key.endswith(".profile_token_end") or not isinstance(o.value, int):
            continue
        start = v.get(o.key.removesuffix("_end") + "_start")
        if isinstance(start, int) and not isinstance(start, bool) and o.value <= start:
            yield Problem(
                o.key,
                f"is {o.value}, not above profile_token_start {start}: verl's profiler config asserts it",
                f"set {o.key} above {start}",
            )


RULES: tuple[Rule, ...] = (
    Rule("types", "not checked by verl (the config tree is untyped)", check_types),
    Rule("batch_divisible", "verl/utils/config.py validate_config", check_batch_divisible),
    Rule("micro_batch_pairs", "validate_config, ActorConfig.__post_init__", check_micro_batch_pairs),
    Rule("loss_agg_mode", "ActorConfig.__post_init__", check_loss_agg_mode),
    Rule("mini_batch", "ActorConfig.validate", check_mini_batch),
    Rule("sequence_parallel", "FSDPActorConfig.validate", check_sequence_parallel),
    Rule("sampling_temperature", "validate_config", check_sampling_temperature),
    Rule("router_replay", "validate_config (_validate_router_replay_config)", check_router_replay),
    Rule("lora_rank", "validate_config (get_vllm_max_lora_rank)", check_lora_rank),
    Rule("critic", "CriticConfig.__post_init__ / validate", check_critic),
    Rule(
        "worker_mini_batch",
        "only on the workers: engine_workers.py train_mini_batch",
        check_worker_mini_batch,
    ),
    Rule(
        "rollout_parallel",
        "only on the workers: engine_workers.py; the inference engine",
        check_rollout_parallel,
    ),
    Rule("fsdp_schedule", "FSDPOptimizerConfig.__post_init__ (via validate_config)", check_fsdp_schedule),
    Rule(
        "engine_choices",
        "the engine and Megatron optimizer config classes' __post_init__ (via validate_config)",
        check_engine_choices,
    ),
    Rule(
        "critic_architectures",
        "HFModelConfig.__post_init__ (via validate_config)",
        check_critic_architectures,
    ),
    Rule("rollout_engine", "only on the workers: get_rollout_class", check_rollout_engine),
    Rule("separate_async", "only in the trainer: trainer_separate_async.py", check_separate_async),
    Rule(
        "profiler_fields",
        "only on the workers: verl/utils/profiler/config.py (the config classes' __post_init__)",
        check_profiler_fields,
    ),
)


def run(view: View, rules: Iterable[Rule] = RULES) -> list[Problem]:
    """Every problem of every rule, in table order (a key reported once per message)."""
    out: list[Problem] = []
    for rule in rules:
        for problem in rule.check(view):
            if problem not in out:
                out.append(problem)
    return out
