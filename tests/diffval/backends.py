"""Per backend: the bases (every shipped template and quickstart, pointed at the demo model and data), the
keys a case varies (what the template holds plus the framework's other keys), the payload our plan hands
the framework, and the framework's worker.

A refused case has no plan; its payload is the base's plan payload with the case's mutations applied at
the place the plan would put them (for an accepted case the harness checks that this is what the plan
did put there, so the mapping cannot drift from the plan).
"""

from __future__ import annotations

import copy
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
    from ascendfactory.backends.templates import render_experiment

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
        from ascendfactory.backends.llamafactory.args import train_keys
        from ascendfactory.backends.llamafactory.environment import VERSION

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
            if m.path[:2] == LF_T and len(m.path) == 3:
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


class Verl(Adapter):
    """Our verdict is `--dry-run`'s (a real `train` stops on a machine without a GPU or NPU before it would
    hand verl anything), composed against the shipped key lists (`env_dir` points nowhere), so that the
    rules of ours that stand in for verl's Hydra composition are what is compared."""

    dry_run = True

    def bases(self, workdir: Path) -> list[Base]:
        out = []
        for exp in ("grpo", "ppo", "dapo"):
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
        from ascendfactory.backends.verl.run import OWNED, PATH_KEYS

        sch = schema.load(str(tree["backend_config"].get("model_engine", "dp")))
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
        from ascendfactory.backends.verl.overrides import format_value

        texts = list(payload)
        for m in mutations:
            key = VERL_LAYOUT.get(m.path) or ".".join(m.path[1:])
            texts = [t for t in texts if t.split("=", 1)[0].lstrip("+") != key]
            if m.value != DELETE:
                texts.insert(0, f"{key}={format_value(m.value)}")
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


ADAPTERS: dict[str, Adapter] = {"llamafactory": LlamaFactory("llamafactory"), "verl": Verl("verl")}


def mutations_reach(case: Case) -> bool:
    """Whether every mutation is of a key the framework's payload carries (else the framework is not
    asked: the key is ours alone)."""
    return all(m.path[:2] == ("backend_config", "training") for m in case.mutations)
