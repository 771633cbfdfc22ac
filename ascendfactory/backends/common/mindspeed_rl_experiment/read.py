"""Reading a MindSpeed-RL experiment: `backend_config` in MindSpeed-RL's own sections -> one typed object.

API (stable: the `mindspeed-rl` backend and the embedded backend's `stage: grpo` both use it)::

    cfg = read_config(ctx, keys=None, cluster_checks=True)  # MindSpeedRLConfig, or ConfigError (all problems)
    cfg = cfg.replace_values({"actor_config.load": "/abs/dir"})  # plan-filled values (no re-validation)
    text = render_yaml(cfg)                                 # the MindSpeed-RL yaml the plan writes
    sections = load_yaml(text)                              # == cfg.sections (the round trip)

`ctx` is the planner's `PlanContext` (the experiment, devices per node). `keys`: the `keys.KeySet` to check
against; None picks it by `checkout.choose_version` (`backend_config.mindspeed_rl_version`, else the
checkout's own config classes, else the newest shipped list with a warning); pass `keys.shipped("2.3.0")`
(or `keys.latest()`) to check without looking for a checkout. `cluster_checks=False` leaves out what only
concerns an Ascend cluster (the NPUs the placement groups need, the rollout's vLLM limits), for a backend
that runs the same experiment elsewhere.

`backend_config` holds, in MindSpeed-RL's spelling (dashes accepted, as MindSpeed-RL accepts them):

    megatron_training, actor_config   MegatronConfig keys; actor_config wins over megatron_training
    ref_config, reward_config         MegatronConfig keys; only with rl_config.use_integrated_worker: false
    rl_config                         RLConfig keys (actor_resource: {num_npus}, reference_resource, ...)
    generate_config                   GenerateConfig keys, sampling_config: {logprobs, max_tokens, ...}
    model                             {<name>: MegatronConfig keys}: the entries `model: <name>` names
    profiler_config: {integrated: ProfilerConfig keys},  msprobe_config: MsprobeConfig keys
and AscendFactory's own sections:
    preprocess_data                   DataHandlerConfig keys (the dataset yaml of cli/preprocess_data.py)
    convert_ckpt_hf2mg, convert_ckpt_mg2hf   MindSpeed-LLM converter flags (mg2hf: null disables it)
    converter                         v1 (convert_ckpt.py, as MindSpeed-RL's docs) | v2 (convert_ckpt_v2.py)
    mindspeed_rl_version              2.1.0 | 2.2.0 | 2.3.0 | master: the key list and rules to check against

What the reader fills in (each documented where it happens): `megatron_training.stage: ray_grpo`;
`megatron_training.tokenizer_name_or_path` from `model_name_or_path`; `rl_config.actor_resource.num_npus`
= NNODES x devices per node (integrated mode); and, when no model entry is named and megatron_training
carries no architecture, a `model` entry built from the HF config.json (or the catalog) in the shape of
MindSpeed-RL's `configs/model/*.yaml`, named by `megatron_training.model`.

`MindSpeedRLConfig` holds the sections as the yaml will carry them (`sections`), the views MindSpeed-RL
builds from them (`actor`, `ref`, `reward`: its MegatronConfig after the merge of model entry <-
megatron_training <- actor/ref/reward_config, every default filled; `rl`: its RLConfig, `mini_batch_size`
in samples as RLConfig holds it; `generate`, `sampling`), the AscendFactory sections (`preprocess`, `hf2mg`,
`mg2hf`, `converter`) and `derived`: world size, actor / rollout data parallel sizes, batch and dispatch
sizes, verifiers and the metric names this version logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ascendfactory.backends.common.megatron.moe_flags import moe_flags
from ascendfactory.backends.common.mindspeed_rl_experiment import keys as keyfiles
from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import (
    RL_SECTIONS,
    Derived,
    MindSpeedRLConfig,
    build_views,
    norm,
    normed,
    ordered,
)
from ascendfactory.backends.common.mindspeed_rl_experiment.keys import Expr, KeySet
from ascendfactory.config.suggest import did_you_mean
from ascendfactory.errors import ConfigError, Problem

if TYPE_CHECKING:
    from ascendfactory.backends.base import PlanContext
    from ascendfactory.config.catalog import ModelArch

BC = "backend_config."
MEGATRON_SECTIONS = ("megatron_training", "actor_config", "ref_config", "reward_config")
AF_SECTIONS = (
    "preprocess_data",
    "convert_ckpt_hf2mg",
    "convert_ckpt_mg2hf",
    "converter",
    "mindspeed_rl_version",
)
CONVERTERS = ("v1", "v2")
GRPO_STAGE = "ray_grpo"  # MegatronConfig.stage of cli/train_grpo.py (configs/grpo_*.yaml)
# Architecture keys: megatron_training carrying one of these describes the model itself (no entry needed).
ARCH_KEYS = ("num_layers", "hidden_size", "num_attention_heads")
# Known sub-keys of dict-valued RLConfig keys MindSpeed-RL does not check itself (others are ignored there).
UNCHECKED_SUBKEYS = {
    "reference_resource": ("num_npus",),
    "reward_resource": ("num_npus",),
    "critic_resource": ("num_npus",),
    "vit_resource": ("num_npus",),
    "integrated_mode_config": ("ref_model_load_path",),
}


def model_entry(arch: ModelArch) -> dict[str, Any]:
    """A `model` entry for a Llama / Qwen2 / Qwen2.5 / Qwen3 decoder, in the shape and order of MindSpeed-RL's
    `configs/model/qwen25_7b.yaml` (the values come from the HF config.json or the catalog)."""
    gqa = arch.kv_heads != arch.heads
    head_dim_differs = arch.head_dim is not None and arch.head_dim != arch.hidden // max(arch.heads, 1)
    rope = int(arch.rope) if float(arch.rope).is_integer() else arch.rope
    entry: dict[str, Any] = {
        "use_mcore_models": True,
        "num_layers": arch.layers,
        "hidden_size": arch.hidden,
        "ffn_hidden_size": arch.ffn,
        "num_attention_heads": arch.heads,
        "kv_channels": arch.head_dim if head_dim_differs else None,
        "rotary_base": rope,
        "max_position_embeddings": arch.max_pos,
        "make_vocab_size_divisible_by": 1,
        "padded_vocab_size": arch.vocab,
        "untie_embeddings_and_output_weights": True if not arch.tied else None,
        "add_qkv_bias": True if arch.qkv_bias else None,
        "disable_bias_linear": True,
        "group_query_attention": True if gqa else None,
        "num_query_groups": arch.kv_heads if gqa else None,
        "position_embedding_type": "rope",
        "norm_epsilon": arch.eps,
        "normalization": "RMSNorm",
        "swiglu": True,
        "attention_softmax_in_fp32": True,
        "qk_layernorm": True if arch.hf_model_type in ("qwen3", "qwen3_moe") else None,
    }
    # mixture of experts / latent attention: MindSpeed-LLM 26.1.0's names (MindSpeed-RL 2.3.0's model yamls)
    entry |= {k.replace("-", "_"): v for k, v in moe_flags(arch, "26.1.0").items()}
    return {k: v for k, v in entry.items() if v is not None and v is not False}


def entry_name(model_name: str) -> str:
    """`qwen2.5-7b` -> `qwen2_5_7b`: a model entry name usable as a Hydra key."""
    out = "".join(c if c.isalnum() else "_" for c in model_name.lower()).strip("_")
    return out or "model"


# -- reading ------------------------------------------------------------------------------------------------
class _Reader:
    """Collects problems and warnings while reading; `ctx.problem` names the file each key came from."""

    def __init__(self, ctx: PlanContext, ks: KeySet) -> None:
        self.ctx, self.ks = ctx, ks
        self.problems: list[Problem] = []
        self.warnings: list[str] = []

    def problem(self, key: str, message: str, fix: str = "") -> None:
        self.problems.append(self.ctx.problem(BC + key, message, fix))

    def unknown(self, section: str, key: str, cls: str, *, names: frozenset[str] | tuple[str, ...]) -> None:
        """A key the class does not accept: MindSpeed-RL's ValueError (or warning, 2.0.0), said here."""
        hint = did_you_mean(norm(key), names)
        upstream = (
            f'MindSpeed-RL {self.ks.version} stops with "The key: {norm(key)} is missing, causing the '
            f'setup to fail"'
        )
        if self.ks.unknown_keys != "error":
            self.warnings.append(f"{BC}{section}.{key}: not a {cls} key{hint}; MindSpeed-RL ignores it")
            return
        self.problem(
            f"{section}.{key}",
            f"not a {cls} key of MindSpeed-RL {self.ks.version}{hint}; {upstream} (on the cluster)",
            f"use a key of {cls} "
            f"(ascendfactory/backends/common/mindspeed_rl_experiment/keys/{self.ks.rules_version}.txt), "
            "or remove it",
        )

    def check_keys(self, section: str, values: Any, cls: str, *, prefix: str | None = None) -> dict[str, Any]:
        """Every key of a mapping against `cls`; duplicates (a_b and a-b) and value kinds too."""
        where = prefix or section
        if values is None:
            return {}
        if not isinstance(values, Mapping):
            self.problem(
                where,
                f"must be a mapping of {cls} keys (got {type(values).__name__})",
                f"write `{where.rsplit('.', 1)[-1]}:` followed by indented `key: value` lines",
            )
            return {}
        known = self.ks.classes[cls].keys
        seen: dict[str, str] = {}
        for key, value in values.items():
            k = norm(key)
            if k in seen:
                self.problem(
                    f"{where}.{key}",
                    f"given twice (as {seen[k]} and {key}): MindSpeed-RL keeps the later one",
                    "keep one spelling",
                )
            seen[k] = str(key)
            if k == "model" and cls == "MegatronConfig" and section in MEGATRON_SECTIONS:
                continue
            if k not in known:
                self.unknown(where, str(key), cls, names=tuple(known))
                continue
            self.check_kind(f"{where}.{key}", value, known[k])
        return dict(values)

    def check_kind(self, key: str, value: Any, default: Any) -> None:
        """Values whose kind cannot be what MindSpeed-RL computes with (a quoted 'false' is truthy there)."""
        if value is None or isinstance(default, Expr):
            return
        if default is None and key.endswith("_dispatch_size"):
            # RLConfig's *_dispatch_size (None: computed): validate_rl_args divides by a given one
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                self.problem(
                    key,
                    f"must be a whole number of 1 or more (got {value!r}): experiences per dispatch "
                    "(validate_rl_args computes with it)",
                    "write a positive whole number, or remove it (MindSpeed-RL computes it)",
                )
            return
        if default is None:
            return
        if isinstance(default, bool):
            if not isinstance(value, bool):
                self.problem(
                    key,
                    f"must be true or false (got {value!r}; MindSpeed-RL tests it as a Python "
                    "truth value, so a string is always true)",
                    "write true or false without quotes",
                )
        elif isinstance(default, (int, float)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.problem(key, f"must be a number (got {value!r})", "write the number without quotes")
        elif isinstance(default, list):
            if not isinstance(value, list):
                self.problem(key, f"must be a list (got {value!r})", f"write [{value!r}]")
        elif isinstance(default, dict) and not isinstance(value, Mapping):
            self.problem(key, f"must be a mapping (got {value!r})")


def read_config(
    ctx: PlanContext, *, keys: KeySet | None = None, cluster_checks: bool = True
) -> MindSpeedRLConfig:
    """Read, fill and check `ctx.config.backend_config`; raise ConfigError listing every problem."""
    from ascendfactory.backends.common.mindspeed_rl_experiment import numbers, preflight, rules

    bc = dict(ctx.config.backend_config or {})
    ks, reason, guessed, version_problems = _key_set(ctx, bc, keys)
    r = _Reader(ctx, ks)
    r.problems += version_problems
    if guessed:
        r.warnings.append(reason)
    # 1. sections; 2. what the reader fills in
    read = _read_sections(ctx, r, bc)
    sections, model_name, model_generated = _fill(ctx, r, bc, ks, read)

    # 3. the views MindSpeed-RL builds, the derived numbers, the rules
    views = build_views(ks, sections, model_name)
    if r.problems and any(p.message.startswith("must be a mapping") for p in r.problems):
        raise ConfigError(r.problems)
    derived, number_problems = numbers.derive(
        ks, sections, views, nnodes=ctx.config.env.NNODES, npus_per_node=ctx.devices.count
    )
    named = {p.key for p in r.problems}
    for p in number_problems:
        if BC + p.key not in named:  # a value already reported (its kind) is not reported twice
            r.problem(p.key, p.message, p.fix)
    if derived is None:  # the numbers cannot be computed: their problems are named above
        raise ConfigError(r.problems)
    cfg = MindSpeedRLConfig(
        keys=ks,
        version_reason=reason,
        sections=sections,
        model_name=model_name,
        preprocess=read.preprocess,
        hf2mg=read.hf2mg,
        mg2hf=read.mg2hf,
        converter=read.converter,
        derived=derived,
        model_generated=model_generated,
        **views,
    )
    if not number_problems:
        for p in rules.check(cfg, bc, cluster=cluster_checks):
            r.problem(p.key, p.message, p.fix)
        r.warnings += [f"{BC}{w.key}: {w.message}" for w in preflight.warnings(cfg, cluster=cluster_checks)]
    if r.problems:
        raise ConfigError(r.problems)
    return replace(cfg, warnings=tuple(r.warnings))


def _key_set(
    ctx: PlanContext, bc: Mapping[str, Any], keys: KeySet | None
) -> tuple[KeySet, str, bool, list[Problem]]:
    """(the key set in use, why, whether it was guessed, a problem with mindspeed_rl_version)."""
    version_problems: list[Problem] = []
    explicit = bc.get("mindspeed_rl_version")
    if explicit is not None and explicit not in keyfiles.shipped_versions():
        version_problems.append(
            ctx.problem(
                BC + "mindspeed_rl_version",
                f"{explicit!r} is not a MindSpeed-RL version with a shipped key list",
                "use one of: "
                + ", ".join(keyfiles.shipped_versions())
                + " (or remove it to follow the checkout)",
            )
        )
        explicit = None
    if keys is not None:
        return keys, f"MindSpeed-RL {keys.version} (given)", False, version_problems
    from ascendfactory.backends.common.mindspeed_rl_experiment.checkout import choose_version, find_checkout

    checkout, _ = find_checkout(ctx.config.scripts_dir, ctx.environ)
    choice = choose_version(str(explicit) if explicit else None, checkout)
    return choice.keys, choice.reason, choice.guessed, version_problems


@dataclass
class _Sections:
    """The sections as read and key-checked, before the reader fills anything in."""

    sections: dict[str, Any]
    rl_config: dict[str, Any]
    generate_config: dict[str, Any]
    preprocess: dict[str, Any] | None
    converter: str
    hf2mg: dict[str, Any]
    mg2hf: dict[str, Any] | None


def _read_sections(ctx: PlanContext, r: _Reader, bc: Mapping[str, Any]) -> _Sections:
    for name in bc:
        if name not in RL_SECTIONS and name not in AF_SECTIONS:
            r.problem(
                name,
                "not a section of a MindSpeed-RL experiment"
                f"{did_you_mean(name, (*RL_SECTIONS, *AF_SECTIONS))} (MindSpeed-RL would silently ignore it)",
                "sections are: " + ", ".join((*RL_SECTIONS, *AF_SECTIONS)),
            )
    sections: dict[str, Any] = {}
    for name in MEGATRON_SECTIONS:
        if name in bc:
            sections[name] = r.check_keys(name, bc[name], "MegatronConfig")
    rl_config = r.check_keys("rl_config", bc.get("rl_config"), "RLConfig")
    generate_config = r.check_keys("generate_config", bc.get("generate_config"), "GenerateConfig")
    _check_subdicts(r, rl_config, generate_config)
    if "profiler_config" in bc:
        sections["profiler_config"] = _profiler_section(r, bc["profiler_config"])
    if "msprobe_config" in bc:
        sections["msprobe_config"] = r.check_keys("msprobe_config", bc["msprobe_config"], "MsprobeConfig")
    preprocess = None
    if bc.get("preprocess_data") is not None:
        preprocess = normed(r.check_keys("preprocess_data", bc["preprocess_data"], "DataHandlerConfig"))
    converter = bc.get("converter") or "v1"
    if converter not in CONVERTERS:
        r.problem(
            "converter",
            f"{converter!r} is not a converter",
            "use v1 (convert_ckpt.py, as MindSpeed-RL's docs) or v2 (convert_ckpt_v2.py)",
        )
        converter = "v1"
    hf2mg, mg2hf = _converter_sections(r, bc, converter)
    if not ctx.config.convert_mg2hf_at_last:
        mg2hf = None
    return _Sections(sections, rl_config, generate_config, preprocess, converter, hf2mg, mg2hf)


def _profiler_section(r: _Reader, prof: Any) -> Any:
    if isinstance(prof, Mapping):
        for sub in prof:
            if sub != "integrated":
                r.problem(
                    f"profiler_config.{sub}",
                    "cli/train_grpo.py reads only profiler_config.integrated (this key would be ignored)",
                    "move the keys under profiler_config.integrated",
                )
        r.check_keys(
            "profiler_config",
            prof.get("integrated"),
            "ProfilerConfig",
            prefix="profiler_config.integrated",
        )
    else:
        r.problem("profiler_config", "must be a mapping: {integrated: {...ProfilerConfig keys}}")
    return prof


def _fill(
    ctx: PlanContext, r: _Reader, bc: Mapping[str, Any], ks: KeySet, read: _Sections
) -> tuple[dict[str, Any], str | None, bool]:
    """What the reader fills in: the stage, the tokenizer, the model entry, the actor's NPUs."""
    sections, rl_config = read.sections, read.rl_config
    integrated = rl_config.get(
        "use_integrated_worker", ks.classes["RLConfig"].keys.get("use_integrated_worker")
    )
    mt = sections.setdefault("megatron_training", {})
    if not isinstance(mt, dict):
        mt = sections["megatron_training"] = {}
    sections.setdefault("actor_config", {})
    if not any(norm(k) == "stage" for k in mt):
        mt["stage"] = GRPO_STAGE
    if not any(norm(k) == "tokenizer_name_or_path" for k in mt) and ctx.config.model_name_or_path:
        mt["tokenizer_name_or_path"] = ctx.config.model_name_or_path
    model_name, model_generated = _model_section(r, bc, sections, integrated)
    if integrated is not False:
        resource = rl_config.setdefault("actor_resource", {})
        if isinstance(resource, dict) and resource.get("num_npus") is None:
            resource["num_npus"] = ctx.world_size  # every NPU of the cluster
    sections["rl_config"] = rl_config
    sections["generate_config"] = read.generate_config
    return ordered(sections), model_name, model_generated


def _check_subdicts(r: _Reader, rl_config: dict[str, Any], generate_config: dict[str, Any]) -> None:
    """The sub-dicts MindSpeed-RL checks (actor_resource, sampling_config) and those it reads unchecked."""
    for section, values, cls in (
        ("rl_config", rl_config, "RLConfig"),
        ("generate_config", generate_config, "GenerateConfig"),
    ):
        for sub, names in r.ks.classes[cls].checked.items():
            given = next((values[k] for k in values if norm(k) == sub), None)
            if isinstance(given, Mapping):
                for key in given:
                    if key not in names:  # checked as written: no dash normalisation here
                        r.unknown(f"{section}.{sub}", str(key), f"{cls}.{sub}", names=names)
    for sub, names in UNCHECKED_SUBKEYS.items():
        given = next((rl_config[k] for k in rl_config if norm(k) == sub), None)
        if given is None:
            continue
        if not isinstance(given, Mapping):
            r.problem(
                f"rl_config.{sub}", f"must be a mapping (got {given!r})", f"write {sub}: {{{names[0]}: ...}}"
            )
            continue
        for key in given:
            if key not in names:
                r.problem(
                    f"rl_config.{sub}.{key}",
                    f"MindSpeed-RL reads only {', '.join(names)} here (this key "
                    f"would be ignored){did_you_mean(str(key), names)}",
                    "remove it",
                )


# The MindSpeed-LLM whose converters the MindSpeed-RL backend runs (install.sh mindspeed-rl installs 2.1.0's)
LLM_CONVERTERS_VERSION = "2.1.0"


def _converter_sections(
    r: _Reader, bc: Mapping[str, Any], converter: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    from ascendfactory.backends.mindspeed_llm.keys import unknown_keys

    out: list[dict[str, Any] | None] = []
    for name in ("convert_ckpt_hf2mg", "convert_ckpt_mg2hf"):
        value = bc.get(name, {})
        if name == "convert_ckpt_mg2hf" and name in bc and value is None:
            out.append(None)
            continue
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            r.problem(
                name,
                "must be a mapping of converter flag: value",
                f"write `{name}:` then `flag-name: value` lines",
            )
            value = {}
        for p in unknown_keys(
            dict(value),
            f"convert_{converter}",
            version=LLM_CONVERTERS_VERSION,
            prefix=f"{BC}{name}.",
            source_of=r.ctx.loaded.source_of,
        ):
            r.problems.append(p)
        out.append(dict(value))
    return out[0] or {}, out[1]


def _model_section(
    r: _Reader, bc: Mapping[str, Any], sections: dict[str, Any], integrated: Any
) -> tuple[str | None, bool]:
    """The `model` entry the Megatron sections name: checked when given, built from the model when not."""
    names = {
        sec: next((v for k, v in sections.get(sec, {}).items() if norm(k) == "model"), None)
        for sec in MEGATRON_SECTIONS
        if isinstance(sections.get(sec), Mapping)
    }
    given = bc.get("model")
    if isinstance(given, str):
        r.problem(
            "model",
            "a MindSpeed-MM model.json path (multimodal RL) is not supported by this backend",
            "use backend mindspeed-mm for multimodal RL, or give model: {<name>: {MegatronConfig keys}}",
        )
        return None, False
    if given is not None and not isinstance(given, Mapping):
        r.problem("model", f"must be a mapping of entry name -> MegatronConfig keys (got {given!r})")
        return None, False
    if isinstance(given, Mapping):
        for entry, values in given.items():
            r.check_keys("model", values, "MegatronConfig", prefix=f"model.{entry}")
        sections["model"] = dict(given)
    for sec, name in names.items():
        if name is None:
            continue
        if not isinstance(given, Mapping) or name not in given:
            if given is None and sec == "megatron_training":
                break  # built below
            r.problem(
                f"{sec}.model",
                f"names the model entry {name!r}, which backend_config.model "
                f"does not have (MindSpeed-RL fails with KeyError: {name!r})",
                "add model: {" + str(name) + ": {...}} or name one of: " + ", ".join(map(str, given or {})),
            )
    chosen = names.get("actor_config") or names.get("megatron_training")
    if given is not None:
        return (str(chosen) if chosen is not None else None), False
    mt = sections["megatron_training"]
    if chosen is None and any(norm(k) in ARCH_KEYS for k in mt):
        return None, False  # the architecture is written in megatron_training itself
    from ascendfactory.config.catalog import resolve_arch

    model_dir = next((v for k, v in mt.items() if norm(k) == "tokenizer_name_or_path"), None)
    try:
        arch = resolve_arch(r.ctx.config.af_model_name, model_dir if isinstance(model_dir, str) else None)
    except ConfigError as e:
        for p in e.problems:
            r.problems.append(
                replace(
                    p,
                    fix=p.fix + "; or give backend_config.model: {<name>: {...}} with "
                    "megatron_training.model: <name>",
                )
            )
        return None, False
    name = str(chosen) if chosen is not None else entry_name(r.ctx.config.af_model_name)
    sections["model"] = {name: model_entry(arch)}
    if chosen is None:
        mt["model"] = name
    return name, True


# -- the yaml ---------------------------------------------------------------------------------------------
def render_yaml(cfg: MindSpeedRLConfig, *, header: str = "") -> str:
    """The MindSpeed-RL yaml (`cli/train_grpo.py --config-path DIR --config-name NAME`): the sections,
    the model entries inline (no Hydra defaults list, so the file needs no `model/` folder beside it)."""
    from ascendfactory.config.yamlio import dumps

    lines = [f"# {h}" for h in header.splitlines()] if header else []
    lines.append(f"# MindSpeed-RL {cfg.keys.version} configuration (keys checked by ascendfactory-cli)")
    return "\n".join(lines) + "\n" + dumps(_plain(cfg.sections))


def load_yaml(text: str) -> dict[str, Any]:
    """The sections of a rendered yaml (what Hydra composes from it, less its own `hydra` keys)."""
    from ascendfactory.config.yamlio import loads

    return loads(text) or {}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def absolute(path: Any) -> Any:
    """An absolute local path (MindSpeed-RL resolves relative paths against its own directory)."""
    if not isinstance(path, str) or not path:
        return path
    return os.path.abspath(os.path.expanduser(path))


__all__ = [
    "AF_SECTIONS",
    "RL_SECTIONS",
    "Derived",
    "MindSpeedRLConfig",
    "absolute",
    "build_views",
    "entry_name",
    "load_yaml",
    "model_entry",
    "read_config",
    "render_yaml",
]
