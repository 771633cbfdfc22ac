"""The rules across keys that MindSpeed-LLM's FSDP2 trainer enforces before it trains, as data.

Sources (MindSpeed-LLM 26.1.0): the dataclasses' `__post_init__` and `_validate_cross_args` in
mindspeed_llm/fsdp2/utils/arguments.py (run while parsing), then the device mesh the model factory builds
(mindspeed_llm/fsdp2/distributed/parallel_state.py `ParallelState.__post_init__` / `get_last_mesh_dim` /
`add_device_mesh_groups`, from mindspeed_llm/fsdp2/models/model_factory.py) and the context-parallel check of
mindspeed_llm/fsdp2/distributed/mindspeed_parallel_engine.py `apply_cp_modules`.

The mesh, for W processes: ('dp', 'fsdp', 'tp') = (W / (fsdp_size x tp_size), fsdp_size, tp_size) with dp
required to be 1 and fsdp_size required to be W, so tp_size can only be 1; ('edp', 'efsdp', 'ep') =
(W / (ep_fsdp_size x ep_size), ep_fsdp_size, ep_size), each dividing what is left; ('dp_fsdp', 'cp') =
(W // cp_size, cp_size), whose product must be W.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.mindspeed_llm.fsdp2.keys import Key, keys, truthy

ARGS = "mindspeed_llm/fsdp2/utils/arguments.py"
MESH = "mindspeed_llm/fsdp2/distributed/parallel_state.py"
ENGINE = "mindspeed_llm/fsdp2/distributed/mindspeed_parallel_engine.py apply_cp_modules"


class View:
    """The values the trainer ends up with: the YAML's, else the dataclass defaults, typed as its parser
    types them; plus the process count and the model's attention heads (None: unknown)."""

    def __init__(self, config: Mapping[str, Mapping[str, Any]], version: str, world: int, heads: int | None):
        self.config, self.table, self.world, self.heads = config, keys(version), world, heads

    def given(self, name: str) -> bool:
        """Set in the YAML (an empty mapping for a dataset is None to the trainer)."""
        section, key = name.split(".", 1)
        return (self.config.get(section) or {}).get(key) not in (None, {})

    def raw(self, name: str) -> Any:
        section, key = name.split(".", 1)
        value = (self.config.get(section) or {}).get(key)
        return self.table[name].default if value is None else value

    def __getitem__(self, name: str) -> Any:
        value, spec = self.raw(name), self.table[name]
        return typed(value, spec)

    def on(self, name: str) -> bool:
        return bool(self[name])


def typed(value: Any, spec: Key) -> Any:
    if value is None:
        return None
    if spec.kind == "bool":
        return truthy(value)
    if spec.kind == "int":
        return int(str(value))
    if spec.kind == "float":
        return float(str(value))
    return value


@dataclass(frozen=True)
class Rule:
    key: str  # section.key the problem names
    broken: Callable[[View], bool]
    message: str
    fix: str
    source: str


def _interleave_count(v: View) -> bool:
    """`len(dataset) != len(interleave_probs)`: the trainer takes len() of what the YAML gave, so a
    comma-separated text counts its characters (arguments.py DataArguments.__post_init__)."""
    if not v.given("data.interleave_probs") or v["data.mix_strategy"] == "concat":
        return False
    probs = [p for p in str(v.raw("data.interleave_probs")).split(",")]
    return any(
        v.given(name) and len(v.raw(name)) != len(probs) for name in ("data.dataset", "data.eval_dataset")
    )


def _divides(whole: int, part: int) -> bool:
    return part > 0 and whole % part == 0


def _ep_mesh(v: View) -> bool:
    efsdp, ep = v["parallel.ep_fsdp_size"], v["parallel.ep_size"]
    return not (_divides(v.world, efsdp) and _divides(v.world // efsdp, ep))


def _cp_mesh(v: View) -> bool:
    cp = v["parallel.cp_size"]
    return cp <= 0 or (v.world // cp) * cp != v.world


DSA = ("use_sparse_flash_attn", "use_fused_lightning_indexer", "use_fused_lightning_indexer_loss")


def _dsa(v: View) -> bool:
    model = str(v["model.model_id"] or "")
    dsa_model = model in ("dsv32", "deepseek_v32") or model.startswith("glm5")
    return not dsa_model and any(v.on("optimization." + name) for name in DSA)


RULES: tuple[Rule, ...] = (
    Rule(
        "data.val_size",
        lambda v: v["data.val_size"] > 1e-6 and not v.given("data.dataset"),
        "a validation share needs data.dataset to split it from",
        "set data.dataset, or remove val_size",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "data.eval_dataset",
        lambda v: v.given("data.eval_dataset") and v["data.val_size"] > 1e-6,
        "eval_dataset and val_size cannot be set together",
        "keep one of them",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "data.interleave_probs",
        lambda v: v.given("data.interleave_probs") and v["data.mix_strategy"] == "concat",
        "interleave_probs needs mix_strategy interleave_under or interleave_over (concat is the default)",
        "set data.mix_strategy: interleave_under (or interleave_over), or remove interleave_probs",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "data.interleave_probs",
        _interleave_count,
        "the trainer compares len(dataset) (of a comma-separated text: its characters) with the number of "
        "interleave_probs, and they differ",
        "give one probability per len(dataset) (or remove interleave_probs)",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "data.val_size",
        lambda v: v.on("data.streaming") and 1e-6 < v["data.val_size"] < 1,
        "with streaming the validation share must be a whole number of samples",
        "give val_size as a number of samples (>= 1), or turn streaming off",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "data.max_samples",
        lambda v: v.on("data.streaming") and v.given("data.max_samples"),
        "max_samples cannot be used with streaming",
        "remove max_samples, or turn streaming off",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "data.mask_history",
        lambda v: v.on("data.mask_history") and v.on("data.train_on_prompt"),
        "mask_history and train_on_prompt cannot both be true",
        "turn one of them off",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "data.reset_attention_mask",
        lambda v: v.on("data.reset_attention_mask") and not v.on("data.append_eod"),
        "reset_attention_mask needs append_eod: true",
        "set data.append_eod: true",
        f"{ARGS} DataArguments.__post_init__",
    ),
    Rule(
        "training.profile_step_start",
        lambda v: v.on("training.profile") and v["training.profile_step_start"] < 0,
        "profile_step_start must be 0 or more",
        "set training.profile_step_start >= 0",
        f"{ARGS} TrainingArguments.__post_init__",
    ),
    Rule(
        "training.profile_step_end",
        lambda v: (
            v.on("training.profile")
            and v["training.profile_step_end"] != -1
            and v["training.profile_step_end"] <= v["training.profile_step_start"]
        ),
        "profile_step_end must be after profile_step_start (or -1)",
        "raise training.profile_step_end, or set it to -1",
        f"{ARGS} TrainingArguments.__post_init__",
    ),
    Rule(
        "optimization.use_flash_gdn",
        lambda v: v.on("optimization.use_flash_gdn") and v.on("optimization.use_triton_gdn"),
        "use_flash_gdn and use_triton_gdn cannot both be true",
        "turn one of them off",
        f"{ARGS} OptimizationArguments.__post_init__",
    ),
    Rule(
        "data.reset_attention_mask",
        lambda v: v.on("data.reset_attention_mask") and v["training.per_device_train_batch_size"] > 1,
        "reset_attention_mask needs training.per_device_train_batch_size 1",
        "set training.per_device_train_batch_size: 1 (raise gradient_accumulation_steps instead)",
        f"{ARGS} _validate_cross_args",
    ),
    Rule(
        "parallel.cp_type",
        lambda v: (
            v["model.model_id"] == "qwen3_next"
            and v["parallel.cp_size"] > 1
            and v["parallel.cp_type"] != "ulysses"
        ),
        "qwen3_next supports only cp_type ulysses when cp_size is above 1",
        "set parallel.cp_type: ulysses",
        f"{ARGS} _validate_cross_args",
    ),
    Rule(
        "optimization.use_sparse_flash_attn",
        _dsa,
        "the DSA fusions (use_sparse_flash_attn, use_fused_lightning_indexer, "
        "use_fused_lightning_indexer_loss) are for DeepSeek-V3.2 and GLM-5 models only "
        "(model.model_id glm52)",
        "turn them off, or set model.model_id: glm52",
        f"{ARGS} _validate_cross_args",
    ),
    # -- the device mesh (needs the process count) ------------------------------------------------------
    Rule(
        "parallel.fsdp_size",
        lambda v: v["parallel.fsdp_size"] != v.world,
        "fsdp_size must equal the number of processes (the trainer supports data_parallel_size 1 only)",
        "remove parallel.fsdp_size (the plan sets it to the process count), or change NPUS_PER_NODE x NNODES",
        f"{MESH} ParallelState.__post_init__",
    ),
    Rule(
        "parallel.tp_size",
        lambda v: v["parallel.tp_size"] != 1,
        "tensor parallelism cannot be combined with fsdp_size = the process count, which the trainer "
        "requires ('World size is not divisible by mesh group')",
        "remove parallel.tp_size (1)",
        f"{MESH} get_last_mesh_dim",
    ),
    Rule(
        "parallel.ep_size",
        _ep_mesh,
        "ep_fsdp_size must divide the process count and ep_size what is left ('World size is not "
        "divisible by mesh group')",
        "choose ep_size x ep_fsdp_size dividing NPUS_PER_NODE x NNODES",
        f"{MESH} get_last_mesh_dim",
    ),
    Rule(
        "parallel.cp_size",
        _cp_mesh,
        "cp_size must divide the process count (mesh dp_fsdp x cp must equal the world size)",
        "choose a cp_size dividing NPUS_PER_NODE x NNODES",
        f"{MESH} add_device_mesh_groups",
    ),
    Rule(
        "parallel.cp_size",
        lambda v: (
            v["parallel.cp_size"] > 1
            and v["parallel.cp_type"] == "ulysses"
            and v.heads is not None
            and v.heads % v["parallel.cp_size"] != 0
        ),
        "Ulysses context parallelism needs the model's num_attention_heads divisible by cp_size",
        "choose a cp_size dividing num_attention_heads, or cp_type: ring",
        ENGINE,
    ),
)


def broken(view: View, skip: set[str]) -> list[Rule]:
    """The rules `view` breaks (one per key; keys in `skip` already have a problem)."""
    out, named = [], set(skip)
    for rule in RULES:
        if rule.key in named:
            continue
        if rule.broken(view):
            out.append(rule)
            named.add(rule.key)
    return out
