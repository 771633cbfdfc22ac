"""The frameworks' validation code the coverage maps are generated from, per framework and pin: where its
sources are on this machine, the entry points (the functions our differential judges run before any
device: tests/diffval/workers/), the modules a walk follows calls into, and the raising helpers whose call
sites are checks of their own. `tests/diffval/walk.py` reads them; `scripts/gen_validation_map.py` writes
`tests/diffval/maps/<pin>.yaml`.
"""

from __future__ import annotations

import ast
import glob
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.diffval.walk import Statement, Walker

MAPS = Path(__file__).resolve().parent / "maps"


@dataclass
class Pin:
    name: str  # the map's file name: tests/diffval/maps/<name>.yaml
    backend: str  # our backend the judge compares
    title: str  # what the pin is, for the header and the report
    roots: Callable[[], list[Path] | str]  # the source roots, or why they are not here
    entries: Callable[[list[Path]], list[str]]
    follow: tuple[str, ...]
    helpers: tuple[str, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)
    skip: tuple[str, ...] = ()
    versions: Callable[[list[Path]], dict[str, str]] = lambda roots: {}

    def walk(self, roots: list[Path]) -> tuple[list[Statement], dict[str, str]]:
        """The statements, and the sha256 (12 hex) of every file they are written in."""
        walker = Walker(roots, self.follow, self.helpers, self.skip, self.aliases)
        for target in self.entries(roots):
            walker.entry(target)
        statements = walker.result()
        files = {}
        for mod in walker.modules.values():
            if mod is not None and any(s.file == mod.rel for s in statements):
                files[mod.rel] = hashlib.sha256(mod.path.read_bytes()).hexdigest()[:12]
        return statements, dict(sorted(files.items()))


def _site_packages(backend: str) -> list[Path] | str:
    import importlib

    environment = importlib.import_module(f"ascendfactory.backends.{backend}.environment")
    env, _ = environment.find_env(None, os.environ)
    if environment.missing(env):
        return f"the {backend} environment is not installed (sh install.sh {backend})"
    found = glob.glob(os.path.join(env, "lib", "python3*", "site-packages"))
    return [Path(found[0])] if found else f"no site-packages under {env}"


def _dist_version(roots: list[Path], dist: str) -> str:
    for root in roots:
        for meta in sorted(root.glob(f"{dist}-*.dist-info/METADATA")):
            for line in meta.read_text(encoding="utf-8").splitlines():
                if line.startswith("Version: "):
                    return line.split(": ", 1)[1]
    return "unknown"


def _checkouts(*variables: str, check: tuple[str, ...] = ()) -> Callable[[], list[Path] | str]:
    def roots() -> list[Path] | str:
        dirs = [os.environ.get(v) for v in variables]
        if not all(dirs):
            return "set " + " and ".join(variables)
        paths = [Path(d) for d in dirs if d]
        for rel in check:
            if not any((p / rel).exists() for p in paths):
                return f"{rel} is not in {', '.join(map(str, paths))}"
        return paths

    return roots


def _feature_entries(roots: list[Path], module: str, listing: str = "FEATURES_LIST") -> list[str]:
    """Each feature class of `module`'s FEATURES_LIST, as its pre_validate_args, validate_args and
    post_validate_args (the decorator calls the three on every feature: MindSpeed-LLM 2.1.0
    mindspeed_llm/training/arguments.py validate_args_decorator)."""
    walker = Walker(roots, ())
    mod = walker.module(module)
    if mod is None:
        raise LookupError(f"{module} not found")
    names: list[str] = []
    for node in mod.tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == listing for t in node.targets):
            names += [
                c.func.id for c in ast.walk(node.value) if isinstance(c, ast.Call) and hasattr(c.func, "id")
            ]
    out = []
    for name in names:
        found = walker.lookup(module, name)
        if found is None:
            raise LookupError(f"{module}.{name}: not found")
        out += [
            f"{found[0]}:{name}.{m}" for m in ("pre_validate_args", "validate_args", "post_validate_args")
        ]
    return out


# -- LLaMA-Factory 0.9.5 (with the transformers its environment holds) ---------------------------------
LF_ENTRIES = [
    "llamafactory.hparams.parser:get_train_args",
    # HfArgumentParser.parse_dict builds the five dataclasses: their __post_init__ run there
    "transformers.hf_argparser:HfArgumentParser.parse_dict",
    "llamafactory.hparams.model_args:ModelArguments.__post_init__",
    "llamafactory.hparams.data_args:DataArguments.__post_init__",
    "llamafactory.hparams.finetuning_args:FinetuningArguments.__post_init__",
    "llamafactory.hparams.training_args:TrainingArguments.__post_init__",
    # the device setup get_train_args reaches through training_args.parallel_mode / .device
    "transformers.training_args:TrainingArguments._setup_devices",
    "transformers.training_args:TrainingArguments.parallel_mode",
]
LLAMAFACTORY = Pin(
    name="llamafactory-0.9.5",
    backend="llamafactory",
    title="LLaMA-Factory 0.9.5: get_train_args, its dataclasses' __post_init__, transformers' "
    "TrainingArguments",
    roots=lambda: _site_packages("llamafactory"),
    entries=lambda roots: list(LF_ENTRIES),
    follow=(
        "llamafactory.hparams",
        "transformers.training_args",
        "transformers.training_args_seq2seq",
        "transformers.hf_argparser",
    ),
    helpers=("check_version",),  # llamafactory/extras/misc.py: raises when the package is missing
    aliases={
        "llamafactory.hparams.training_args.BaseTrainingArguments": (
            "transformers.training_args_seq2seq.Seq2SeqTrainingArguments"  # without USE_MCA
        ),
        "transformers.Seq2SeqTrainingArguments": (
            "transformers.training_args_seq2seq.Seq2SeqTrainingArguments"
        ),
        "transformers.HfArgumentParser": "transformers.hf_argparser.HfArgumentParser",
        "transformers.TrainingArguments": "transformers.training_args.TrainingArguments",
    },
    versions=lambda roots: {
        "llamafactory": _dist_version(roots, "llamafactory"),
        "transformers": _dist_version(roots, "transformers"),
    },
)


# -- verl 0.9.1 ------------------------------------------------------------------------------------------
def _verl_entries(roots: list[Path]) -> list[str]:
    """validate_config, and every config class main_ppo builds before Ray: validate_config instantiates
    `actor_rollout_ref.actor` and `critic` (omega_conf_to_dataclass -> hydra instantiate, recursively), so
    every `_target_` below them in verl's generated trainer configs (one per model_engine) runs its
    __post_init__, and the actor's and critic's `validate`."""
    import yaml

    targets: set[str] = set()
    for path in sorted((roots[0] / "verl" / "trainer" / "config").glob("_generated_ppo*_trainer.yaml")):
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
        stack = [tree.get("actor_rollout_ref", {}).get("actor"), tree.get("critic")]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if isinstance(node.get("_target_"), str):
                    targets.add(node["_target_"])
                stack += list(node.values())
    out = [
        "verl.utils.config:validate_config",
        "verl.trainer.ppo.utils:need_critic",
        "verl.trainer.ppo.utils:need_reference_policy",
        "verl.utils.device:auto_set_device",
    ]
    walker = Walker(roots, ())
    for target in sorted(targets):
        module, _, cls = target.rpartition(".")
        found = walker.lookup(module, cls)
        if found is None:
            raise LookupError(target)
        for method in ("__post_init__", "validate"):
            if walker.method(found[0], found[1], method):  # type: ignore[arg-type]
                out.append(f"{found[0]}:{cls}.{method}")
    return out


VERL = Pin(
    name="verl-0.9.1",
    backend="verl",
    title="verl 0.9.1: validate_config and the config classes main_ppo builds before Ray",
    roots=lambda: _site_packages("verl"),
    entries=_verl_entries,
    follow=(
        "verl.utils.config",
        "verl.trainer.ppo.utils",
        "verl.utils.device",
        "verl.workers.config",
        "verl.trainer.config",
        "verl.base_config",
        "verl.utils.profiler.config",
        "verl.workers.rollout.vllm_rollout.utils",
    ),
    versions=lambda roots: {"verl": _dist_version(roots, "verl")},
)

# -- MindSpeed-LLM 2.1.0 with Megatron-LM core_r0.8.0 and MindSpeed 2c085cc9 ------------------------------
MEGATRON_R080_FOLLOW = (
    "megatron.training.arguments",
    "megatron.core.num_microbatches_calculator",
    "megatron.core.transformer.transformer_config",
    "megatron.core.model_parallel_config",
)


def _llm_entries(roots: list[Path]) -> list[str]:
    return [
        "mindspeed_llm.training.initialize:initialize_megatron",
        "mindspeed_llm.training.arguments:parse_args_decorator",
        "megatron.training.arguments:parse_args",
        "mindspeed_llm.training.arguments:validate_args_decorator",
        "megatron.training.arguments:validate_args",
        "megatron.core.num_microbatches_calculator:build_num_microbatches_calculator",
        "mindspeed_llm.training.arguments:core_transformer_config_from_args_wrapper",
        "megatron.training.arguments:core_transformer_config_from_args",
        # core_transformer_config_from_args builds config_class(**kw): TransformerConfig by default
        "megatron.core.transformer.transformer_config:TransformerConfig.__post_init__",
        *_feature_entries(roots, "mindspeed_llm.features_manager"),
    ]


MINDSPEED_LLM = Pin(
    name="mindspeed-llm-2.1.0",
    backend="mindspeed-llm",
    title="MindSpeed-LLM 2.1.0 with Megatron-LM core_r0.8.0 and MindSpeed 2c085cc9: initialize_megatron's "
    "parse_args and validate_args (MindSpeed-LLM's decorators and features), the micro-batch calculator, "
    "core_transformer_config_from_args",
    roots=_checkouts("AF_MINDSPEED_LLM_DIR", "AF_MINDSPEED_DIR", check=("megatron/training", "mindspeed")),
    entries=_llm_entries,
    follow=(
        *MEGATRON_R080_FOLLOW,
        "mindspeed_llm.training.arguments",
        "mindspeed_llm.features_manager",
        "mindspeed.features_manager",
    ),
    helpers=("ensure_valid", "_check_arg_is_not_none", "incompatible_check", "dependency_check"),
)


# -- MindSpeed-LLM 26.1.0 with Megatron-LM core_v0.12.1 and MindSpeed 26.1.0_core_r0.12.1 ------------------
def _created_features(roots: list[Path], module: str, factory: str = "create_features_list") -> list[str]:
    """Each feature class `module`'s `factory` puts in the list (the classes instantiated in the `add_*`
    functions it calls), as its pre_validate_args, validate_args and post_validate_args: MindSpeed's
    MindSpeedFeaturesManager calls the three on every feature of the list (MindSpeed 26.1.0_core_r0.12.1
    mindspeed/features_manager/features_manager.py; MindSpeed-LLM 26.1.0 mindspeed_llm/features_manager/
    __init__.py create_features_list)."""
    walker = Walker(roots, ())
    mod = walker.module(module)
    if mod is None:
        raise LookupError(f"{module} not found")
    funcs = {n.name: n for n in mod.tree.body if isinstance(n, ast.FunctionDef)}
    if factory not in funcs:
        raise LookupError(f"{module}.{factory} not found")
    called = [
        c.func.id
        for c in ast.walk(funcs[factory])
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in funcs
    ]
    names: list[str] = []
    for fname in called:
        for c in ast.walk(funcs[fname]):
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id not in names:
                found = walker.lookup(module, c.func.id)
                if found is not None and isinstance(found[1], ast.ClassDef):
                    names.append(c.func.id)
    out = []
    for name in names:
        found = walker.lookup(module, name)
        assert found is not None
        out += [
            f"{found[0]}:{name}.{m}" for m in ("pre_validate_args", "validate_args", "post_validate_args")
        ]
    return out


MEGATRON_V0121_FOLLOW = (
    "megatron.training.arguments",
    "megatron.core.num_microbatches_calculator",
    "megatron.core.transformer.transformer_config",
    "megatron.core.model_parallel_config",
)


def _llm_26_entries(roots: list[Path]) -> list[str]:
    """What tests/diffval/workers/megatron_worker.py runs at 26.1.0: initialize_megatron's checks, parse_args
    and validate_args under MindSpeed-LLM 26.1.0's decorators (every feature's pre-validate, validate and
    post-validate), the micro-batch calculator, posttrain's trainer choice, core_transformer_config_from_args
    and TransformerConfig.__post_init__ with the wrappers the adaptor registers."""
    return [
        "megatron.training.initialize:initialize_megatron",
        "mindspeed_llm.training.arguments:parse_args_decorator",
        "megatron.training.arguments:parse_args",
        "mindspeed_llm.training.arguments:validate_args_v2_decorator",
        "megatron.training.arguments:validate_args",
        "megatron.core.num_microbatches_calculator:_build_num_microbatches_calculator",
        "mindspeed_llm.training.arguments:core_transformer_config_from_args_wrapper",
        "megatron.training.arguments:core_transformer_config_from_args",
        "megatron.core.transformer.transformer_config:TransformerConfig.__post_init__",
        "mindspeed_llm.core.transformer.transformer_config:transformer_config_post_init_wrapper",
        "mindspeed_llm.core.transformer.moe.router:transformer_config_post_init_wrapper",
        "mindspeed.core.fusions.fused_moe_permute:transformer_config_post_init_wrapper",
        *_created_features(roots, "mindspeed_llm.features_manager"),
    ]


MINDSPEED_LLM_26 = Pin(
    name="mindspeed-llm-26.1.0",
    backend="mindspeed-llm@26.1.0",
    title="MindSpeed-LLM 26.1.0 with Megatron-LM core_v0.12.1 and MindSpeed 26.1.0_core_r0.12.1: "
    "initialize_megatron's parse_args and validate_args (MindSpeed-LLM's v2 decorators and every feature "
    "of create_features_list), the micro-batch calculator, core_transformer_config_from_args and the "
    "TransformerConfig wrappers",
    roots=_checkouts(
        "AF_MINDSPEED_LLM_26_DIR",
        "AF_MINDSPEED_26_DIR",
        check=("megatron/training", "mindspeed/features_manager"),
    ),
    entries=_llm_26_entries,
    follow=(
        *MEGATRON_V0121_FOLLOW,
        "mindspeed_llm.training.arguments",
        "mindspeed_llm.features_manager",
        "mindspeed_llm.core.transformer.transformer_config",
        "mindspeed_llm.core.transformer.moe.router",
        "mindspeed.features_manager",
        "mindspeed.core.fusions.fused_moe_permute",
    ),
    helpers=("ensure_valid", "_check_arg_is_not_none", "incompatible_check", "dependency_check"),
)

# -- MindSpeed-RL 2.3.0 (the commit install.sh pins: 09b8c125) ----------------------------------------------
MINDSPEED_RL = Pin(
    name="mindspeed-rl-2.3.0",
    backend="mindspeed-rl",
    title="MindSpeed-RL 2.3.0 (09b8c125): cli/train_grpo.py's RLConfig, GenerateConfig and "
    "parse_training_config (the MegatronConfigs, the integrated-worker rules, validate_rl_args)",
    roots=_checkouts("AF_MINDSPEED_RL_DIR", check=("cli/train_grpo.py", "mindspeed_rl/config_cls")),
    entries=lambda roots: [
        "cli.train_grpo:parse_training_config",
        "mindspeed_rl.config_cls.rl_config:RLConfig.__init__",
        "mindspeed_rl.config_cls.generate_config:GenerateConfig.__init__",
    ],
    follow=("cli.train_grpo", "mindspeed_rl.config_cls"),
)

# -- MindSpeed-MM 2.1.0 with Megatron-LM core_r0.8.0 and MindSpeed 077c4137 -------------------------------
MINDSPEED_MM = Pin(
    name="mindspeed-mm-2.1.0",
    backend="mindspeed-mm",
    title="MindSpeed-MM 2.1.0 with Megatron-LM core_r0.8.0 and MindSpeed 077c4137: parse_args under "
    "MindSpeed's wrapper and MindSpeed-MM's argument provider, MindSpeed-MM's validate_args (merge_mm_args, "
    "the json configs) under MindSpeed's validate_args_wrapper, the micro-batch calculator, pretrain's "
    "own checks",
    roots=_checkouts(
        "AF_MINDSPEED_MM_DIR", "AF_MINDSPEED_MM_MINDSPEED_DIR", check=("mindspeed_mm/patchs", "mindspeed")
    ),
    entries=lambda roots: [
        "mindspeed.arguments:parse_args_wrapper",
        "megatron.training.arguments:parse_args",
        "mindspeed_mm.arguments:extra_args_provider_decorator",
        "mindspeed_mm.configs.config:mm_extra_args_provider",
        "megatron.training.initialize:initialize_megatron",
        "mindspeed.arguments:validate_args_wrapper",
        "mindspeed_mm.patchs.validate_args_patch:validate_args",
        "megatron.core.num_microbatches_calculator:build_num_microbatches_calculator",
        "mindspeed_mm.training:pretrain",
    ],
    follow=(
        "mindspeed.arguments",
        "megatron.training.arguments",
        "megatron.core.num_microbatches_calculator",
        "mindspeed_mm.arguments",
        "mindspeed_mm.configs.config",
        "mindspeed_mm.patchs.validate_args_patch",
        "mindspeed_mm.utils.utils",
    ),
    helpers=("ensure_valid", "_check_arg_is_not_none"),
    skip=("megatron.training.arguments:validate_args",),  # replaced by MindSpeed-MM's (force_patch)
)

PINS: dict[str, Pin] = {
    p.name: p for p in (LLAMAFACTORY, VERL, MINDSPEED_RL, MINDSPEED_MM, MINDSPEED_LLM, MINDSPEED_LLM_26)
}
# A pin joins PINS once its map is complete. Until then its generated statements are checked in under
# maps/drafts/ (regenerated and held current like the others, rows mapped so far held to the same checks),
# and the coverage report prints its share mapped.
DRAFTS: dict[str, Pin] = {}  # none today: MindSpeed-LLM 26.1.0's map is complete
ALL: dict[str, Pin] = {**PINS, **DRAFTS}


def map_path(name: str) -> Path:
    """Where a pin's map is checked in: maps/<name>.yaml, or maps/drafts/<name>.yaml for a draft."""
    return MAPS / "drafts" / f"{name}.yaml" if name in DRAFTS else MAPS / f"{name}.yaml"
