"""Per backend: the bases (every shipped template and quickstart, pointed at the demo model and data), the
keys a case varies (what the template holds plus the framework's other keys), the payload our plan hands
the framework, and the framework's worker.

A refused case has no plan; its payload is the base's plan payload with the case's mutations applied at
the place the plan would put them (for an accepted case the harness checks that this is what the plan
did put there, so the mapping cannot drift from the plan).
"""

from __future__ import annotations

import copy
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.diffval.cases import DELETE, Base, Case, KeySpec, Mutation

REPO = Path(__file__).resolve().parents[2]
DEMO_MODEL = REPO / "demo_assets" / "tiny-qwen2"
DEMO_DATA = REPO / "cfgs" / "data" / "demo_sft.jsonl"
WORKERS = Path(__file__).resolve().parent / "workers"


def _template(backend: str, exp: str, model: str = "tiny-demo") -> dict[str, Any]:
    from ascendfactory.features.templates import render_experiment

    text = render_experiment(backend=backend, model_name=model, exp_name=exp, output_file="x.yaml")
    return yaml.safe_load(text)


@dataclass
class Adapter:
    name: str
    dry_run = False  # our verdict: `train`'s checks (inputs must exist), or `--dry-run`'s

    def comparable(self, payload: Any) -> Any:
        """The part of a payload that carry() must reproduce."""
        return payload

    def bases(self, workdir: Path) -> list[Base]:
        raise NotImplementedError

    def keys_of(self, tree: dict[str, Any]) -> list[KeySpec]:
        raise NotImplementedError

    def payload(self, plan: Any) -> Any:
        raise NotImplementedError

    def carry(self, payload: Any, mutations: list[Mutation]) -> Any:
        raise NotImplementedError

    def worker(self) -> list[str] | None:
        """argv of the framework's judge, or None when its environment is not here."""
        raise NotImplementedError

    def unavailable(self) -> str:
        """Why worker() is None."""
        return "the framework's environment is not installed here"

    def stand_ins(self) -> list[dict[str, str]] | None:
        """What the judge stands in for (module, why, stands_in), when it cannot import everything."""
        return None


# -- LLaMA-Factory ------------------------------------------------------------------------------------
LF_T = ("backend_config", "training")
# Keys the plan decides (or moves to the environment): a case does not vary them.
LF_OWNED = {"output_dir", "resume_from_checkpoint", "overwrite_output_dir", "do_train", "stage", "plot_loss"}
LF_OWNED |= {"dataset", "dataset_dir", "save_total_limit", "hf_hub_token", "train_from_scratch"}
LF_OWNED |= {"model_name_or_path"}
# What the plan writes when the experiment does not (llamafactory/backend.py, setdefault).
LF_PLAN_DEFAULTS = {"logging_steps": 1, "report_to": "none", "include_num_input_tokens_seen": True}


class LlamaFactory(Adapter):
    def bases(self, workdir: Path) -> list[Base]:
        out = []
        for name, tree in [
            (
                "quickstart_llamafactory.yaml",
                yaml.safe_load((REPO / "cfgs/quickstart_llamafactory.yaml").read_text()),
            ),
            *((f"llamafactory/{e}", _template("llamafactory", e)) for e in ("full-4k", "lora-4k")),
        ]:
            training = tree["backend_config"]["training"]
            training["model_name_or_path"] = str(DEMO_MODEL)
            training["dataset"] = str(DEMO_DATA)
            training.pop("dataset_dir", None)
            training["bf16"] = False  # this machine has no accelerator: bf16 is refused by both, on CPU
            tree["af_output_dir"] = str(workdir / "out" / name.replace("/", "_"))
            tree["env"] = {**tree.get("env", {}), "NPUS_PER_NODE": 1}
            tree["train_auto_resume"] = False
            out.append(Base(name, tree))
        return out

    def keys_of(self, tree: dict[str, Any]) -> list[KeySpec]:
        from ascendfactory.backends.llamafactory.environment import VERSION
        from ascendfactory.backends.llamafactory.keys import train_keys

        keys = train_keys(VERSION)
        held = [k for k in tree["backend_config"]["training"] if k in keys and k not in LF_OWNED]
        # what the template holds, three times as likely as any other key of the parser
        names = held * 3 + [k for k in keys if k not in LF_OWNED]
        return [KeySpec((*LF_T, n), _lf_kind(n, keys[n].kind), keys[n].choices) for n in names]

    def payload(self, plan: Any) -> Any:
        from ascendfactory.backends.llamafactory.backend import TRAIN_YAML

        return yaml.safe_load(plan.files[os.path.join(plan.output_dir, TRAIN_YAML)])

    def carry(self, payload: Any, mutations: list[Mutation]) -> Any:
        args = copy.deepcopy(payload)
        for m in mutations:
            if m.path == ("stage",) and m.value != DELETE:  # the top-level stage wins (read.py)
                args["stage"] = m.value
            elif m.path[:2] == LF_T and len(m.path) == 3:
                if m.value == DELETE and m.path[2] in LF_PLAN_DEFAULTS:
                    args[m.path[2]] = LF_PLAN_DEFAULTS[m.path[2]]
                elif m.value == DELETE:
                    args.pop(m.path[2], None)
                else:
                    args[m.path[2]] = m.value
        return args

    def worker(self) -> list[str] | None:
        from ascendfactory.backends.llamafactory import environment

        env, _ = environment.find_env(None, os.environ)
        if environment.missing(env):
            return None
        return [environment.python_of(env), str(WORKERS / "lf_worker.py")]


def _lf_kind(name: str, kind: str) -> str:
    if name in ("model_name_or_path", "dataset_dir", "deepspeed", "cache_dir", "tokenized_path", "media_dir"):
        return "path"
    return kind


# -- verl ---------------------------------------------------------------------------------------------
VERL_LAYOUT = {("env", "NPUS_PER_NODE"): "trainer.n_gpus_per_node", ("env", "NNODES"): "trainer.nnodes"}
VERL_LAYOUT_DEFAULTS = {("env", "NNODES"): 1}  # a deleted env.NNODES is the schema's default: one node


class Verl(Adapter):
    """Our verdict is `--dry-run`'s (a real `train` stops on a machine without a GPU or NPU before it would
    hand verl anything), composed against the shipped key lists (`env_dir` points nowhere), so that the
    rules of ours that stand in for verl's Hydra composition are what is compared."""

    dry_run = True

    def bases(self, workdir: Path) -> list[Base]:
        out = []
        for exp in ("grpo", "ppo", "dapo", "grpo-npu"):
            tree = _template("verl", exp)
            bc = tree["backend_config"]
            bc["env_dir"] = str(workdir / "no-verl-env")
            bc["actor_rollout_ref"]["model"]["path"] = str(DEMO_MODEL)
            if isinstance(bc.get("critic"), dict) and isinstance(bc["critic"].get("model"), dict):
                bc["critic"]["model"]["path"] = str(DEMO_MODEL)
            tree["af_output_dir"] = str(workdir / "out" / exp)
            out.append(Base(f"verl/{exp}", tree))
        return out

    def keys_of(self, tree: dict[str, Any]) -> list[KeySpec]:
        from ascendfactory.backends.verl import schema
        from ascendfactory.backends.verl.read import OWNED, PATH_KEYS

        engine = tree["backend_config"].get("model_engine", "dp")
        # a first mutation may have set model_engine to a value of no engine (an int, an unknown word): the
        # second draws from the default engine's keys (our checks refuse that value anyway)
        known = isinstance(engine, str) and (schema.KEYS_DIR / schema.VERSION / f"{engine}.txt").is_file()
        sch = schema.load(engine if known else "dp")
        skip = set(OWNED) | set(PATH_KEYS)
        held = [k for k in _leaves(tree["backend_config"]) if k in sch.defaults and k not in skip]
        others = [k for k, v in sch.defaults.items() if k not in skip and not isinstance(v, (dict, list))]
        specs = [
            KeySpec(("backend_config", *k.split(".")), _kind(sch.defaults[k])) for k in held * 20 + others
        ]
        specs += [KeySpec(p, "layout") for p in VERL_LAYOUT] * 40
        return specs

    def payload(self, plan: Any) -> Any:
        driver = plan.step("train").launch.driver
        return list(driver[3:])  # after python -m verl.trainer.main_ppo

    def carry(self, payload: Any, mutations: list[Mutation]) -> Any:
        from ascendfactory.backends.common.hydra.overrides import format_value

        texts = list(payload)
        for m in mutations:
            key = VERL_LAYOUT.get(m.path) or ".".join(m.path[1:])
            plus = "+" if "+" in key else ""  # a child of an open map: Hydra's `+key=` (overrides.py)
            key = key.replace("+", "")
            texts = [t for t in texts if t.split("=", 1)[0].lstrip("+") != key]
            value = VERL_LAYOUT_DEFAULTS.get(m.path, DELETE) if m.value == DELETE else m.value
            if value != DELETE:
                texts.insert(0, f"{plus}{key}={format_value(value)}")
        return texts

    def comparable(self, payload: Any) -> Any:
        # a deleted last child leaves `key: {}` in the experiment, which Hydra merges as no change
        return sorted(t for t in payload if not t.endswith("={}"))

    def worker(self) -> list[str] | None:
        from ascendfactory.backends.verl import environment

        env, _ = environment.find_env(None, os.environ)
        if environment.missing(env):
            return None
        return [environment.python_of(env), str(WORKERS / "verl_worker.py")]


def _leaves(node: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in node.items():
        key = f"{prefix}{k}"
        out += _leaves(v, key + ".") if isinstance(v, dict) and v else [key]
    return out


def _kind(default: Any) -> str:
    for t, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if isinstance(default, t):
            return name
    return "other"


# -- MindSpeed-LLM (with its Megatron-LM) ----------------------------------------------------------------
MS_T = ("backend_config", "training")
MS_LAYOUT = (("env", "NPUS_PER_NODE"), ("env", "NNODES"))
# The checkouts the judge runs (opt-in): MindSpeed-LLM with Megatron-LM's megatron/ copied into it, and
# MindSpeed, at the pins our backend installs (mindspeed_llm/environment.py's install_plan).
MS_LLM_ENV = "AF_MINDSPEED_LLM_DIR"
MINDSPEED_ENV = "AF_MINDSPEED_DIR"
MS_DEFAULT_SEQ = 4096  # the plan's seq-length when training gives none (mindspeed_llm/backend.py)
# What the plan's architecture flags give a training key the experiment deletes (model_flags.py)
MS_FILLED = {
    "seq-length": MS_DEFAULT_SEQ,
    "max-position-embeddings": MS_DEFAULT_SEQ,
    "tensor-model-parallel-size": 1,
    "pipeline-model-parallel-size": 1,
}
# MoE bases: a catalog MoE model's template, its architecture read from a tiny model of the family built here
MOE_BASES = (("qwen3-30b-a3b", "qwen3-moe"), ("deepseek-v2-lite-16b", "deepseek2-lite"))
MOE_KEY_PREFIXES = ("moe-", "num-experts", "expert-", "first-k-dense", "n-shared", "topk-group", "n-group")


def _tiny_moe(workdir: Path, family: str) -> Path:
    """A tiny HF model of a MoE family (4 experts, top 2; tests/support/tiny_model.py), built once."""
    from tests.support.tiny_model import build_tiny_model

    path = workdir / "models" / family
    if not (path / "config.json").is_file():
        build_tiny_model(path, family, num_layers=4, hidden_size=64, num_heads=4, num_kv_heads=2)
    return path


MS_PINS = "MindSpeed-LLM 2.1.0 (70116e9b), Megatron-LM core_r0.8.0 (baf94af3), MindSpeed 2c085cc9"


@functools.lru_cache(maxsize=None)
def _architecture_keys(version: str) -> frozenset[str]:
    """The flags the plan derives from the model (model_flags.architecture_flags), over every catalog model:
    a case deleting one from `training` gets the model's value back, not no flag."""
    from ascendfactory.backends.mindspeed_llm.model_flags import architecture_flags
    from ascendfactory.config.catalog import from_catalog, list_models

    keys: set[str] = set()
    for name in list_models():
        flags = architecture_flags(from_catalog(name), tp=1, pp=1, seq_length=4096, version=version)
        keys |= {k for k, v in flags.items() if v is not None and v is not False}
    return frozenset(keys)


class MindSpeedLLM(Adapter):
    """Our verdict is `--dry-run`'s (a real `train` stops here at the missing CANN toolkit, before it would
    hand MindSpeed-LLM anything); the framework's is its argument parsing and validation on the training
    argv (workers/megatron_worker.py at `version`), on CPU with the stand-ins that worker lists. The bases
    are the templates of MindSpeed-LLM `version` (`<exp>-2.1.0` for 2.1.0)."""

    dry_run = True
    version = "2.1.0"

    def template(self, exp: str) -> str:
        return f"{exp}-{self.version}" if self.version == "2.1.0" else exp

    def plan_flags(self) -> dict[str, Any]:
        from ascendfactory.backends.mindspeed_llm.versions import RELEASES

        return dict(RELEASES[self.version].plan_flags)

    def checkouts(self) -> tuple[str, str] | str:
        """(MindSpeed-LLM dir, MindSpeed dir), or why they are not here."""
        llm, mindspeed = os.environ.get(MS_LLM_ENV), os.environ.get(MINDSPEED_ENV)
        if not llm or not mindspeed:
            return f"set {MS_LLM_ENV} and {MINDSPEED_ENV} to checkouts at {MS_PINS}"
        if not (Path(llm, "posttrain_gpt.py").is_file() and Path(llm, "megatron", "training").is_dir()):
            return f"{MS_LLM_ENV}={llm} is not a MindSpeed-LLM checkout with Megatron-LM's megatron/ in it"
        if not Path(mindspeed, "mindspeed", "features_manager").is_dir():
            return f"{MINDSPEED_ENV}={mindspeed} is not a MindSpeed checkout"
        return llm, mindspeed

    def bases(self, workdir: Path) -> list[Base]:
        found = self.checkouts()
        out = []
        for exp in ("full-4k", "lora-4k"):
            tree = _template("mindspeed-llm", self.template(exp))
            tree["backend_config"]["training"]["tokenizer-name-or-path"] = str(DEMO_MODEL)
            tree["backend_config"]["preprocess_data"]["input"] = str(DEMO_DATA)
            if isinstance(found, tuple):
                tree["scripts_dir"] = found[0]
            tree["af_output_dir"] = str(workdir / "out" / exp)
            out.append(Base(f"mindspeed-llm/{exp}", tree))
        for model, family in MOE_BASES:  # MoE and latent-attention flags, EP over the data-parallel ranks
            tree = _template("mindspeed-llm", self.template("full-4k"), model)
            training = tree["backend_config"]["training"]
            training["tokenizer-name-or-path"] = str(_tiny_moe(workdir, family))
            training["expert-model-parallel-size"] = 2  # the tiny model's 4 experts over DP 8
            training["seq-length"] = 128  # the tiny model's max_position_embeddings
            tree["backend_config"]["preprocess_data"]["input"] = str(DEMO_DATA)
            if isinstance(found, tuple):
                tree["scripts_dir"] = found[0]
            tree["af_output_dir"] = str(workdir / "out" / model)
            out.append(Base(f"mindspeed-llm/full-4k/{model}", tree))
        return out

    def keys_of(self, tree: dict[str, Any]) -> list[KeySpec]:
        from ascendfactory.backends.common.megatron.read import PATH_KEYS
        from ascendfactory.backends.mindspeed_llm.backend import PLANNER_TRAIN_KEYS
        from ascendfactory.backends.mindspeed_llm.keys import specs

        table = specs("training", self.version)
        skip = set(PLANNER_TRAIN_KEYS) | set(PATH_KEYS)
        held = [k for k in tree["backend_config"]["training"] if k in table and k not in skip]
        layout = [k for k in table if k.endswith(("-parallel-size", "batch-size")) and k not in skip]
        names = held * 6 + layout * 6 + [k for k in table if k not in skip]
        if tree.get("af_model_name") in dict(MOE_BASES):  # a MoE base: its MoE keys weigh more
            names += [k for k in table if k.startswith(MOE_KEY_PREFIXES) and k not in skip] * 4
        out = [KeySpec((*MS_T, n), _ms_kind(table[n]), table[n].choices) for n in names]
        return out + [KeySpec(p, "layout") for p in MS_LAYOUT] * 60

    def payload(self, plan: Any) -> Any:
        step = plan.step("train")
        launch = step.launch
        return {
            "argv": list(launch.entry),
            "nproc_per_node": launch.nproc_per_node,
            "nnodes": launch.nnodes,
            "world_size": launch.nproc_per_node * launch.nnodes,
            "env": dict(step.env),
        }

    def architecture_keys(self) -> frozenset[str]:
        return _architecture_keys(self.version)

    def carry(self, payload: Any, mutations: list[Mutation]) -> Any:
        from ascendfactory.backends.common.megatron.read import to_flags
        from ascendfactory.backends.mindspeed_llm.backend import absolute

        flags = argv_flags(payload["argv"][1:])
        nproc, nnodes = payload["nproc_per_node"], payload["nnodes"]
        training = {m.path[2]: m.value for m in mutations if m.path[:2] == MS_T and len(m.path) == 3}
        if "seq-length" in training and "max-position-embeddings" not in training:
            # the plan's architecture flags: max-position-embeddings is the sequence length (model_flags.py)
            seq = training["seq-length"]
            training["max-position-embeddings"] = MS_DEFAULT_SEQ if seq == DELETE else seq
        for key, value in training.items():
            if key == "prompt-type" and value == DELETE:
                continue  # the plan falls back to preprocess_data's prompt-type, the same in the templates
            if value == DELETE and key not in MS_FILLED and key in self.architecture_keys() and key in flags:
                continue  # the plan gives the model's value back (model_flags.py): the base's is the model's
            flags.pop(key, None)
            if value != DELETE:
                flags.update(argv_flags(to_flags(absolute({key: value}))))
            elif key in MS_FILLED:
                flags[key] = [str(MS_FILLED[key])]
            elif key in self.plan_flags():  # the version's plan flags (versions.Release.plan_flags)
                flags.update(argv_flags(to_flags({key: self.plan_flags()[key]})))
        # the plan saves at the end: a deleted save-interval is train-iters, read after the case's own change
        # of train-iters (mindspeed_llm/backend.py; sample-based training gets none)
        if training.get("save-interval") == DELETE and flags.get("train-iters", ["x"])[0].isdigit():
            flags["save-interval"] = flags["train-iters"]
        from ascendfactory.backends.mindspeed_llm.keys import valid_names

        if (
            flags.get("wandb-project", [""]) not in ([], [""], ["0"], ["False"])
            and "use-wandb" not in flags
            and "use-wandb" in valid_names("training", self.version)
        ):
            flags["use-wandb"] = []  # the plan turns W&B on with wandb-project where the version has it
        for m in mutations:  # a deleted topology key is 1 on this CPU machine (config/devices.py)
            if m.path == ("env", "NPUS_PER_NODE"):
                nproc = 1 if m.value == DELETE else m.value
            elif m.path == ("env", "NNODES"):
                nnodes = 1 if m.value == DELETE else m.value
        argv = [payload["argv"][0]]
        for key, values in flags.items():
            argv += [f"--{key}", *values]
        return {
            **payload,
            "argv": argv,
            "nproc_per_node": nproc,
            "nnodes": nnodes,
            "world_size": nproc * nnodes,
        }

    def comparable(self, payload: Any) -> Any:
        # `--load` names the converted weights by layout (converted_weight_TP2PP1): not judged here
        flags = {k: v for k, v in argv_flags(payload["argv"][1:]).items() if k != "load"}
        return (flags, payload["world_size"], payload["argv"][0])

    def worker(self) -> list[str] | None:
        import importlib.util
        import sys

        found = self.checkouts()
        if not isinstance(found, tuple) or importlib.util.find_spec("torch") is None:
            return None
        return [sys.executable, str(WORKERS / "megatron_worker.py"), self.version, *found]

    def unavailable(self) -> str:
        found = self.checkouts()
        return found if isinstance(found, str) else "torch is not importable in this python"

    def stand_ins(self) -> list[dict[str, str]]:
        return _stand_ins("megatron_worker.py", self.version)


# The 26.1.0 judge's checkouts (opt-in): MindSpeed-LLM 26.1.0 with Megatron-LM core_v0.12.1's megatron/
# copied into it, and MindSpeed at 26.1.0_core_r0.12.1 (mindspeed_llm/versions.py RELEASES["26.1.0"]).
MS_LLM_26_ENV = "AF_MINDSPEED_LLM_26_DIR"
MINDSPEED_26_ENV = "AF_MINDSPEED_26_DIR"
MS_PINS_26 = (
    "MindSpeed-LLM 26.1.0 (2b7130ca), Megatron-LM core_v0.12.1 (a845aa7e), MindSpeed 26.1.0_core_r0.12.1"
)


class MindSpeedLLM26(MindSpeedLLM):
    """The same comparison at MindSpeed-LLM 26.1.0: the 26.1.0 templates, its argument list, its judge (the
    same worker, its 26.1.0 row)."""

    version = "26.1.0"

    def checkouts(self) -> tuple[str, str] | str:
        llm, mindspeed = os.environ.get(MS_LLM_26_ENV), os.environ.get(MINDSPEED_26_ENV)
        if not llm or not mindspeed:
            return f"set {MS_LLM_26_ENV} and {MINDSPEED_26_ENV} to checkouts at {MS_PINS_26}"
        if not (Path(llm, "posttrain_gpt.py").is_file() and Path(llm, "megatron", "training").is_dir()):
            return f"{MS_LLM_26_ENV}={llm} is not a MindSpeed-LLM checkout with Megatron-LM's megatron/ in it"
        if not Path(mindspeed, "mindspeed", "features_manager").is_dir():
            return f"{MINDSPEED_26_ENV}={mindspeed} is not a MindSpeed checkout"
        return llm, mindspeed


def argv_flags(argv: list[str]) -> dict[str, list[str]]:
    """`--flag v1 v2 --other=v` -> {flag: [v1, v2], other: [v]} (to_flags' argv read back)."""
    out: dict[str, list[str]] = {}
    key = None
    for token in argv:
        if token.startswith("--"):
            key, eq, value = token[2:].partition("=")
            out[key] = [value] if eq else []
        elif key is not None:
            out[key].append(token)
    return out


def _ms_kind(spec: Any) -> str:
    if spec.kind == "flag":
        return "bool"
    if spec.nargs in ("+", "*") or spec.nargs.isdigit():
        return "list"
    return spec.kind if spec.kind in ("int", "float") else "str"


# -- MindSpeed-RL -------------------------------------------------------------------------------------------
MSRL_SECTIONS = {
    "megatron_training": "MegatronConfig",
    "actor_config": "MegatronConfig",
    "rl_config": "RLConfig",
    "generate_config": "GenerateConfig",
}
# What the plan decides (common/mindspeed_rl_experiment/load.py fill,
# common/mindspeed_rl_experiment/read.py): a case does not vary them.
MSRL_OWNED = {"save", "load", "data_path", "tokenizer_name_or_path", "stage", "model", "actor_resource"}
MSRL_OWNED |= {"finetune", "no_load_optim", "no_load_rng", "integrated_mode_config"}
MS_RL_ENV = "AF_MINDSPEED_RL_DIR"
# The sections parse_training_config merges over megatron_training for the reference and reward workers
# (cli/train_grpo.py): written to the yaml as given (the S1/S2 rules say when they may be)
MSRL_ROLE_SECTIONS = ("ref_config", "reward_config")
# common/mindspeed_rl_experiment/read.py ARCH_KEYS: one of them in megatron_training and the plan builds no
# `model` entry
MSRL_ARCH = {("megatron_training", k) for k in ("num_layers", "hidden_size", "num_attention_heads")}


class MindSpeedRL(Adapter):
    """Our verdict is `--dry-run`'s (a real `train` needs the CANN toolkit and a Ray cluster of NPUs); the
    framework's is Hydra, its config classes and validate_rl_args on the yaml we write (msrl_worker.py),
    run by a python with torch and Hydra (verl's environment)."""

    dry_run = True

    def checkout(self) -> str | None:
        rl = os.environ.get(MS_RL_ENV)
        ok = (
            rl
            and Path(rl, "cli", "train_grpo.py").is_file()
            and Path(rl, "mindspeed_rl", "config_cls").is_dir()
        )
        return rl if ok else None

    def bases(self, workdir: Path) -> list[Base]:
        tree = _template("mindspeed-rl", "grpo")
        bc = tree["backend_config"]
        bc["megatron_training"]["tokenizer_name_or_path"] = str(DEMO_MODEL)
        bc["preprocess_data"]["input"] = str(DEMO_DATA)
        if self.checkout():
            tree["scripts_dir"] = self.checkout()
        tree["af_output_dir"] = str(workdir / "out" / "grpo")
        return [Base("mindspeed-rl/grpo", tree)]

    def keys_of(self, tree: dict[str, Any]) -> list[KeySpec]:
        from ascendfactory.backends.common.mindspeed_rl_experiment import checkout, keys

        ks = checkout.choose_version(None, self.checkout()).keys
        bc = tree["backend_config"]
        out: list[KeySpec] = []
        for section, cls in MSRL_SECTIONS.items():
            defaults = ks.classes[cls].keys
            given = bc.get(section)
            held = [
                k for k in (given if isinstance(given, dict) else {}) if k in defaults and k not in MSRL_OWNED
            ]
            others = [k for k in defaults if k not in MSRL_OWNED]
            for k in held * 8 + others:
                default = defaults[k]
                kind = "other" if isinstance(default, keys.Expr) else _kind(default)
                out.append(KeySpec(("backend_config", section, k), kind if default is not None else "str"))
        generate = bc.get("generate_config")
        sampling = generate.get("sampling_config") if isinstance(generate, dict) else None
        sampling = sampling if isinstance(sampling, dict) else {}
        out += [
            KeySpec(("backend_config", "generate_config", "sampling_config", k), _kind(v))
            for k, v in sampling.items()
        ] * 4
        return out + [KeySpec(p, "layout") for p in MS_LAYOUT] * 30

    def payload(self, plan: Any) -> Any:
        from ascendfactory.backends.common.mindspeed_rl_experiment.tree import TRAIN_CONFIG

        launch = plan.step("train").launch
        text = plan.files[os.path.join(plan.output_dir, TRAIN_CONFIG + ".yaml")]
        return {"yaml": yaml.safe_load(text), "nnodes": launch.nnodes}

    def carry(self, payload: Any, mutations: list[Mutation]) -> Any:
        from ascendfactory.backends.common.mindspeed_rl_experiment.load import PATH_KEYS

        config = copy.deepcopy(payload["yaml"])
        nnodes, world = payload["nnodes"], config["rl_config"]["actor_resource"]["num_npus"]
        nproc = world // nnodes
        for m in mutations:
            if m.path == ("env", "NPUS_PER_NODE"):
                nproc = 1 if m.value == DELETE else m.value
            elif m.path == ("env", "NNODES"):
                nnodes = 1 if m.value == DELETE else m.value
            elif m.path[0] == "backend_config" and len(m.path) == 2 and m.path[1] in MSRL_ROLE_SECTIONS:
                if m.value == DELETE:  # a whole section, as the plan writes it (or leaves it out)
                    config.pop(m.path[1], None)
                else:
                    config[m.path[1]] = copy.deepcopy(m.value)
            elif m.path[0] == "backend_config" and m.path[1] in (*MSRL_SECTIONS, *MSRL_ROLE_SECTIONS):
                node = config.setdefault(m.path[1], {})
                for part in m.path[2:-1]:  # as cases.apply: a parent that is no mapping becomes one
                    if not isinstance(node.get(part), dict):
                        node[part] = {}
                    node = node[part]
                value = m.value
                if m.path[-1] in PATH_KEYS and isinstance(value, str) and value:
                    value = os.path.abspath(value)
                if value == DELETE:
                    node.pop(m.path[-1], None)
                else:
                    node[m.path[-1]] = value
        config["rl_config"]["actor_resource"]["num_npus"] = nproc * nnodes
        if any(m.path[1:3] in MSRL_ARCH and m.value != DELETE for m in mutations):
            config.pop(
                "model", None
            )  # the architecture is written in megatron_training (common/mindspeed_rl_experiment/read.py)
            config["megatron_training"].pop("model", None)
        return {"yaml": config, "nnodes": nnodes}

    def comparable(self, payload: Any) -> Any:
        # the converted weights are named by layout (converted_hf2mg_weight_TP2PP1): not judged here
        config = copy.deepcopy(payload["yaml"])
        config.get("actor_config", {}).pop("load", None)
        return {**payload, "yaml": config}

    def worker(self) -> list[str] | None:
        from ascendfactory.backends.verl import environment

        rl = self.checkout()
        env, _ = environment.find_env(None, os.environ)
        if rl is None or environment.missing(env):
            return None
        return [environment.python_of(env), str(WORKERS / "msrl_worker.py"), rl]

    def unavailable(self) -> str:
        if self.checkout() is None:
            return f"set {MS_RL_ENV} to a MindSpeed-RL checkout (cli/train_grpo.py, mindspeed_rl/config_cls/)"
        return "no python with torch and Hydra: the judge runs in verl's environment (sh install.sh verl)"

    def stand_ins(self) -> list[dict[str, str]]:
        return _stand_ins("msrl_worker.py")


# -- MindSpeed-MM (with its Megatron-LM and MindSpeed) -----------------------------------------------------
MM_ENV = "AF_MINDSPEED_MM_DIR"  # the checkout our backend runs (environment.py), megatron/ copied in
MM_MINDSPEED_ENV = "AF_MINDSPEED_MM_MINDSPEED_DIR"  # MindSpeed at MindSpeed-MM 2.1.0's pin (not LLM's)
MM_PINS = "MindSpeed-MM 2.1.0 (b09d6f14), Megatron-LM core_r0.8.0 (baf94af3), MindSpeed 077c4137"
MM_MODEL = "qwen2.5-vl-7b"
# The plan decides these (experiment.PLAN_FLAGS, save) or fills them from the layout (VARIABLE_FLAGS).
MM_OWNED = {"mm-data", "mm-model", "mm-tool", "save", "load"}


# backend_config's json sections -> the --mm-* flag of the file the plan writes from each (PLAN_FLAGS)
JSON_SECTIONS = {"model": "mm-model", "data": "mm-data"}


def _carry_json(docs: dict[str, Any], flag: str, example: Any, m: Mutation) -> None:
    """A case's key below backend_config.model / .data, put where the plan's merge puts it: the user's value
    over the example's json (experiment.merged_json); deleted, the example's value (or none) is left."""
    *parents, leaf = m.path[2:]
    node = docs.setdefault(flag, {})
    for part in parents:
        example = example.get(part) if isinstance(example, dict) else None
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    if m.value != DELETE:
        node[leaf] = copy.deepcopy(m.value)
    elif isinstance(example, dict) and leaf in example:
        node[leaf] = copy.deepcopy(example[leaf])
    else:
        node.pop(leaf, None)


class MindSpeedMM(Adapter):
    """Our verdict is `--dry-run`'s (a real `train` stops at the missing CANN toolkit); the framework's is
    MindSpeed-MM's argument parsing, its validate_args and its json merge on the training argv and the json
    files the plan writes (workers/mm_worker.py), on CPU with the stand-ins that worker lists. The bases are
    Qwen2.5-VL-7B (MindSpeed-MM's example) with an HF directory holding only its config.json."""

    dry_run = True

    def checkouts(self) -> tuple[str, str] | str:
        mm, mindspeed = os.environ.get(MM_ENV), os.environ.get(MM_MINDSPEED_ENV)
        if not mm or not mindspeed:
            return f"set {MM_ENV} and {MM_MINDSPEED_ENV} to checkouts at {MM_PINS}"
        if not (Path(mm, "pretrain_vlm.py").is_file() and Path(mm, "megatron", "training").is_dir()):
            return f"{MM_ENV}={mm} is not a MindSpeed-MM checkout with Megatron-LM's megatron/ in it"
        if not Path(mindspeed, "mindspeed", "arguments.py").is_file():
            return f"{MM_MINDSPEED_ENV}={mindspeed} is not a MindSpeed checkout"
        return mm, mindspeed

    def bases(self, workdir: Path) -> list[Base]:
        import json

        from tests.unit.backends.mindspeed_mm.mm_helpers import QWEN25_VL_7B

        hf = workdir / "Qwen2.5-VL-7B-Instruct"
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text(json.dumps(QWEN25_VL_7B), encoding="utf-8")
        found = self.checkouts()
        tree = _template("mindspeed-mm", "full", MM_MODEL)
        dataset = tree["backend_config"]["data"]["dataset_param"]
        basic = dataset["basic_parameters"]
        dataset["preprocess_parameters"]["model_name_or_path"] = str(hf)
        basic.update(dataset_dir=str(workdir), dataset=str(DEMO_DATA), cache_dir=str(workdir / "cache"))
        if isinstance(found, tuple):
            tree["scripts_dir"] = found[0]
        tree["af_output_dir"] = str(workdir / "out" / "full")
        tree["env"] = {**tree.get("env", {}), "NPUS_PER_NODE": 8}
        return [Base("mindspeed-mm/full", tree)]

    def keys_of(self, tree: dict[str, Any]) -> list[KeySpec]:
        from ascendfactory.backends.mindspeed_llm.keys import specs
        from ascendfactory.backends.mindspeed_mm.keys import training_names

        table = specs("training", "2.1.0")  # Megatron core_r0.8.0's kinds; one only MindSpeed(-MM) has: str
        names = sorted(n for n in training_names("2.1.0") if n not in MM_OWNED)
        held = [k for k in tree["backend_config"]["training"] if k in names]
        layout = [k for k in names if k.endswith(("-parallel-size", "batch-size"))]
        keys = held * 6 + layout * 6 + names
        out = [KeySpec((*MS_T, n), _ms_kind(table[n]) if n in table else "str") for n in keys]
        return out + [KeySpec(("env", "NPUS_PER_NODE"), "layout")] * 60

    def payload(self, plan: Any) -> Any:
        import json

        from ascendfactory.backends.mindspeed_mm.read import PLAN_FLAGS

        step = plan.step("train")
        launch = step.launch
        argv = list(launch.entry)
        docs = {}
        for flag in PLAN_FLAGS:
            if f"--{flag}" in argv:
                docs[flag] = json.loads(plan.files[argv[argv.index(f"--{flag}") + 1]])
        return {
            "argv": argv,
            "nproc_per_node": launch.nproc_per_node,
            "nnodes": launch.nnodes,
            "world_size": launch.nproc_per_node * launch.nnodes,
            "env": {**plan.env, **step.env},  # the experiment's own variables go to every step
            "json": docs,
        }

    def carry(self, payload: Any, mutations: list[Mutation]) -> Any:
        from ascendfactory.backends.common.megatron.read import to_flags
        from ascendfactory.backends.mindspeed_mm.keys import preset_name, presets
        from ascendfactory.backends.mindspeed_mm.read import example_flags

        preset = presets("2.1.0")["models"][preset_name(MM_MODEL, None, "2.1.0")]
        example = {k: v for group in example_flags(preset).groups.values() for k, v in group.items()}
        flags = argv_flags(payload["argv"][1:])
        nproc = payload["nproc_per_node"]
        docs = copy.deepcopy(payload.get("json", {}))
        env = dict(payload.get("env", {}))
        for m in mutations:
            if m.path == ("env", "NPUS_PER_NODE"):
                nproc = 1 if m.value == DELETE else m.value
            elif len(m.path) == 2 and m.path[0] == "env":  # a variable of the experiment's env
                env.pop(m.path[1], None)
                if m.value != DELETE:
                    env[m.path[1]] = ("1" if m.value else "0") if isinstance(m.value, bool) else str(m.value)
            if len(m.path) > 2 and m.path[0] == "backend_config" and m.path[1] in JSON_SECTIONS:
                _carry_json(docs, JSON_SECTIONS[m.path[1]], preset[m.path[1]], m)
                continue
            if m.path[:2] != MS_T or len(m.path) != 3:
                continue
            key = m.path[2]
            if m.value == DELETE and key in example and "${" in str(example[key]):
                continue  # a layout variable: the plan fills it (TP, PP, CP, MBS, GBS)
            flags.pop(key, None)
            value = example.get(key) if m.value == DELETE else m.value  # deleted: the example's value
            flags.update(argv_flags(to_flags({key: value})))
        argv = [payload["argv"][0]]
        for key, values in flags.items():
            argv += [f"--{key}", *values]
        out = {
            **payload,
            "argv": argv,
            "nproc_per_node": nproc,
            "world_size": nproc * payload["nnodes"],
            "env": env,
        }
        return {**out, "json": docs} if "json" in payload else out

    def comparable(self, payload: Any) -> Any:
        flags = {k: v for k, v in argv_flags(payload["argv"][1:]).items() if k not in ("load", *MM_OWNED)}
        return (flags, payload["world_size"], payload["argv"][0], payload.get("json"), payload.get("env"))

    def worker(self) -> list[str] | None:
        import importlib.util
        import sys

        found = self.checkouts()
        if not isinstance(found, tuple) or importlib.util.find_spec("torch") is None:
            return None
        return [sys.executable, str(WORKERS / "mm_worker.py"), *found]

    def unavailable(self) -> str:
        found = self.checkouts()
        return found if isinstance(found, str) else "torch is not importable in this python"

    def stand_ins(self) -> list[dict[str, str]]:
        return _stand_ins("mm_worker.py")


def _stand_ins(worker: str, *version: str) -> list[dict[str, str]]:
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(WORKERS / worker), "--stand-ins", *version],
        capture_output=True,
        text=True,
        check=True,
    )
    return list(json.loads(done.stdout))


ADAPTERS: dict[str, Adapter] = {
    "llamafactory": LlamaFactory("llamafactory"),
    "verl": Verl("verl"),
    "mindspeed-llm": MindSpeedLLM("mindspeed-llm"),
    "mindspeed-llm@26.1.0": MindSpeedLLM26("mindspeed-llm@26.1.0"),
    "mindspeed-rl": MindSpeedRL("mindspeed-rl"),
    "mindspeed-mm": MindSpeedMM("mindspeed-mm"),
}


def mutations_reach(case: Case) -> bool:
    """Whether every mutation is of a key the framework's payload carries (else the framework is not
    asked: the key is ours alone)."""
    return all(m.path[:2] == ("backend_config", "training") for m in case.mutations)
