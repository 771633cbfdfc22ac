"""The parse-back property: what the memory estimate reads is what the framework parses from what the plan
hands it. For every shipped template and quickstart, and for variations of each made by the differential
harness's case generator (`tests/diffval/cases.make_case`, over the keys the estimate reads), the plan's
payload is parsed with the framework's own argument definitions, independently of the plan:

    torch           the train argv through the embedded trainer's parser (`engine.train.flags.parse_args`),
                    the model from config.json; stage grpo: the yaml through its `read_trainer_yaml`
    mindspeed-llm   the train argv through an argparse parser built from MindSpeed-LLM 2.1.0's / Megatron-LM
                    core_r0.8.0's add_argument definitions (types, nargs, defaults: `mindspeed_llm/keys/`),
                    then Megatron's `validate_args` derivations (DP, the global batch, VPP, SP off at TP 1)
    mindspeed-mm    the same with MindSpeed-MM 2.1.0's definitions (`mindspeed_mm/keys/`), the LLM from the
                    model.json the plan writes
    mindspeed-rl    the rendered yaml over MindSpeed-RL 2.3.0's config-class defaults
    (`common/mindspeed_rl_experiment/keys/`)
    llamafactory    the train yaml through LLaMA-Factory's HfArgumentParser, in its environment
    verl            the train step's Hydra overrides composed against verl's own config, in its environment

and every input of the estimate (layout, batch, sequence, precision, sharding, recompute, LoRA, offload,
the model's shape) must equal the parsed value: 0 mismatches.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.diffval.backends import ADAPTERS, DEMO_MODEL, REPO
from tests.diffval.cases import Base, Case, KeySpec, make_case
from tests.diffval.ours import verdict

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _at_the_repository_root(monkeypatch):
    monkeypatch.chdir(REPO)  # the quickstarts' relative paths


T = ("backend_config", "training")
MEGATRON_KEYS = {  # what a Megatron-style estimate reads, with the kind of value a variation tries
    "tensor-model-parallel-size": "layout",
    "pipeline-model-parallel-size": "layout",
    "context-parallel-size": "layout",
    "micro-batch-size": "int",
    "global-batch-size": "int",
    "seq-length": "int",
    "bf16": "bool",
    "fp16": "bool",
    "use-distributed-optimizer": "bool",
    "sequence-parallel": "bool",
    "recompute-granularity": "recompute",
    "recompute-method": "method",
    "recompute-num-layers": "int",
    "recompute-activations": "bool",
    "num-layers-per-virtual-pipeline-stage": "int",
    "lora-r": "int",
    "lora-target-modules": "targets",
    "use-flash-attn": "bool",
    "untie-embeddings-and-output-weights": "bool",
    "make-vocab-size-divisible-by": "int",
}
CHOICES = {
    "recompute": ("full", "selective"),
    "method": ("uniform", "block"),
    "targets": (),
}
VARIATIONS = {"torch": 24, "mindspeed-llm": 24, "mindspeed-mm": 12, "mindspeed-rl": 12, "llamafactory": 20}


def _spec(path: tuple[str, ...], kind: str) -> KeySpec:
    if kind in CHOICES:
        return KeySpec(path, "str", CHOICES[kind]) if CHOICES[kind] else KeySpec(path, "list")
    return KeySpec(path, kind)


def _megatron_keys(tree: dict[str, Any], skip: tuple[str, ...] = ()) -> list[KeySpec]:
    specs = [_spec((*T, k), v) for k, v in MEGATRON_KEYS.items() if k not in skip]
    return specs + [KeySpec(("env", "NPUS_PER_NODE"), "layout")] * 4


# -- the framework's parse ------------------------------------------------------------------------------
def _argparse_from(specs: dict[str, tuple[str, str, Any]]) -> argparse.ArgumentParser:
    """An argparse parser from generated add_argument facts: name -> (kind, nargs, default)."""
    p = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    for name, (kind, nargs, default) in specs.items():
        default = None if isinstance(default, str) and default.startswith("<computed") else default
        if kind == "flag":
            p.add_argument(f"--{name}", action="store_true", default=default)
            continue
        kw: dict[str, Any] = {"default": default, "type": {"int": int, "float": float}.get(kind, str)}
        if nargs == "append":
            kw["action"] = "append"
        elif nargs:
            kw["nargs"] = int(nargs) if nargs.isdigit() else nargs
        p.add_argument(f"--{name}", **kw)
    return p


def _megatron_parse(
    argv: list[str], specs: dict[str, tuple[str, str, Any]], world: int
) -> argparse.Namespace:
    ns, _ = _argparse_from(specs).parse_known_args(argv)
    # Megatron-LM core_r0.8.0 megatron/training/arguments.py validate_args: DP (:182), the default global
    # batch (:249), recompute-activations as selective (:221), VPP from layers per chunk (:269-272),
    # sequence parallelism off at TP 1 (:468-469)
    mp = ns.tensor_model_parallel_size * ns.pipeline_model_parallel_size * ns.context_parallel_size
    ns.data_parallel_size = world // mp
    if ns.global_batch_size is None:
        ns.global_batch_size = ns.micro_batch_size * ns.data_parallel_size
    if ns.recompute_activations:
        ns.recompute_granularity = "selective"
    ns.virtual_pipeline_model_parallel_size = None
    if ns.num_layers_per_virtual_pipeline_stage is not None:
        per_stage = ns.num_layers // ns.pipeline_model_parallel_size
        ns.virtual_pipeline_model_parallel_size = per_stage // ns.num_layers_per_virtual_pipeline_stage
    if ns.tensor_model_parallel_size == 1:
        ns.sequence_parallel = False
    return ns


def _layout_inputs(ns: argparse.Namespace, dp: int) -> dict[str, Any]:
    full = ns.recompute_granularity == "full"
    return {
        "tp": ns.tensor_model_parallel_size,
        "pp": ns.pipeline_model_parallel_size,
        "cp": ns.context_parallel_size,
        "dp": dp,
        "vpp": ns.virtual_pipeline_model_parallel_size or 1,
        "mbs": ns.micro_batch_size,
        "gbs": ns.global_batch_size or ns.micro_batch_size * dp,
        "seq": ns.seq_length,
        "precision": "bf16" if ns.bf16 else "fp16" if ns.fp16 else "fp32",
        "distributed_optimizer": bool(ns.use_distributed_optimizer),
        "sequence_parallel": bool(ns.sequence_parallel) and ns.tensor_model_parallel_size > 1,
        "recompute": ns.recompute_granularity or "none",
        "recompute_method": (ns.recompute_method or "uniform") if full else None,
        "recompute_num_layers": (ns.recompute_num_layers or 1) if full else None,
        "lora_rank": ns.lora_r if ns.lora_target_modules else 0,
        "lora_targets": tuple(ns.lora_target_modules or ()),
    }


def _job_inputs(job: Any) -> dict[str, Any]:
    full = job.recompute == "full"
    return {
        "tp": job.tp,
        "pp": job.pp,
        "cp": job.cp,
        "dp": job.dp,
        "vpp": job.vpp,
        "mbs": job.mbs,
        "gbs": job.gbs,
        "seq": job.seq,
        "precision": job.precision,
        "distributed_optimizer": job.distributed_optimizer,
        "sequence_parallel": job.sequence_parallel,
        "recompute": job.recompute,
        "recompute_method": job.recompute_method if full else None,
        "recompute_num_layers": job.recompute_num_layers if full else None,
        "lora_rank": job.lora_rank,
        "lora_targets": tuple(job.lora_targets),
    }


def _shape_of(job: Any) -> dict[str, Any]:
    s = job.shape
    return {
        "layers": s.layers,
        "hidden": s.hidden,
        "ffn": s.ffn,
        "heads": s.heads,
        "kv_heads": s.kv_heads,
        "vocab": s.vocab,
        "tied": s.tied,
    }


def _megatron_shape(ns: argparse.Namespace) -> dict[str, Any]:
    return {
        "layers": ns.num_layers,
        "hidden": ns.hidden_size,
        "ffn": ns.ffn_hidden_size,
        "heads": ns.num_attention_heads,
        "kv_heads": ns.num_query_groups if ns.group_query_attention else ns.num_attention_heads,
        "vocab": ns.padded_vocab_size,
        "tied": not ns.untie_embeddings_and_output_weights,
    }


def _hf_shape(model_dir: str) -> dict[str, Any]:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return {
        "layers": cfg["num_hidden_layers"],
        "hidden": cfg["hidden_size"],
        "ffn": cfg["intermediate_size"],
        "heads": cfg["num_attention_heads"],
        "kv_heads": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
        "vocab": cfg["vocab_size"],
        "tied": bool(cfg.get("tie_word_embeddings", False)),
    }


def _train_argv(plan: Any, after: str) -> list[str]:
    argv = list(plan.step("train").launch.entry)
    return argv[argv.index(after) + 1 :]


def parsed_torch(plan: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    from ascendfactory.engine.train.flags import parse_args

    ns, _ = parse_args(_train_argv(plan, "ascendfactory.engine.train"))
    world = plan.step("train").launch.world_size
    if ns.tensor_model_parallel_size == 1:
        ns.sequence_parallel = False
    dp = world // (ns.tensor_model_parallel_size * ns.pipeline_model_parallel_size * ns.context_parallel_size)
    inputs = _layout_inputs(ns, dp)
    if ns.num_layers_per_virtual_pipeline_stage is None and ns.virtual_pipeline_model_parallel_size:
        inputs["vpp"] = ns.virtual_pipeline_model_parallel_size
    elif ns.num_layers_per_virtual_pipeline_stage:
        layers = _hf_shape(ns.tokenizer_name_or_path)["layers"]
        inputs["vpp"] = layers // ns.pipeline_model_parallel_size // ns.num_layers_per_virtual_pipeline_stage
    return inputs, _hf_shape(ns.tokenizer_name_or_path)


def parsed_mindspeed_llm(plan: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    from ascendfactory.backends.mindspeed_llm.keys import specs

    version = plan.run.framework.release.version  # the MindSpeed-LLM version the plan targets
    table = {n: (s.kind, s.nargs, s.default) for n, s in specs("training", version).items()}
    launch = plan.step("train").launch
    ns = _megatron_parse(list(launch.entry)[1:], table, launch.world_size)
    return _layout_inputs(ns, ns.data_parallel_size), _megatron_shape(ns)


def parsed_mindspeed_mm(plan: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    from ascendfactory.backends.mindspeed_mm.keys import training_defaults, training_values

    defaults = training_defaults("2.1.0")
    table = {n: (k, nargs, defaults.get(n)) for n, (k, nargs, _) in training_values("2.1.0").items()}
    launch = plan.step("train").launch
    argv = list(launch.entry)[1:]
    ns = _megatron_parse(argv, table, launch.world_size)
    model = json.loads(plan.files[ns.mm_model])["text_decoder"]
    heads = model["num_attention_heads"]
    shape = {
        "layers": model["num_layers"],
        "hidden": model["hidden_size"],
        "ffn": model["ffn_hidden_size"],
        "heads": heads,
        "kv_heads": model["num_query_groups"] if model.get("group_query_attention") else heads,
        "vocab": ns.vocab_size,
        "tied": not model.get("untie_embeddings_and_output_weights", False),
    }
    return _layout_inputs(ns, ns.data_parallel_size), shape


def _rl_yaml(plan: Any) -> dict[str, Any]:
    from ascendfactory.backends.common.mindspeed_rl_experiment.tree import TRAIN_CONFIG

    return yaml.safe_load(plan.files[os.path.join(plan.output_dir, TRAIN_CONFIG + ".yaml")])


def parsed_mindspeed_rl(plan: Any) -> dict[str, Any]:
    """MindSpeed-RL's MegatronConfig / RLConfig / GenerateConfig views of the yaml (its classes' defaults,
    `common/mindspeed_rl_experiment/keys/2.3.0.txt`), and the numbers the estimate takes from them."""
    from ascendfactory.backends.common.mindspeed_rl_experiment import keys
    from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import build_views

    doc = _rl_yaml(plan)
    name = (doc.get("megatron_training") or {}).get("model")
    views = build_views(keys.latest(), doc, name)
    actor, rl, gen = views["actor"], views["rl"], views["generate"]
    tp, pp, cp = (
        actor[k] or 1
        for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")
    )
    return {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "dp": rl["actor_resource"]["num_npus"] // (tp * pp * cp),
        "mbs": actor["micro_batch_size"],
        "gbs": rl["mini_batch_size"],  # RLConfig.__init__: in samples (x n_samples_per_prompt)
        "seq": actor["seq_length"],
        "precision": "bf16" if actor["bf16"] else "fp16" if actor.get("fp16") else "fp32",
        "distributed_optimizer": bool(actor["use_distributed_optimizer"]),
        "sequence_parallel": bool(actor["sequence_parallel"]) and tp > 1,
        "recompute": actor.get("recompute_granularity") or "none",
        "gpu_memory_utilization": gen["gpu_memory_utilization"],
        "offload": tuple(bool(gen[f"offload_train_{k}"]) for k in ("param", "grad", "optimizer")),
    }


def parsed_grpo(plan: Any) -> dict[str, Any]:
    """The embedded GRPO trainer's own reading of the yaml (`read_trainer_yaml`)."""
    from ascendfactory.engine.rl.config import read_trainer_yaml

    doc = _rl_yaml(plan)
    grpo = read_trainer_yaml(doc)
    a = grpo.args
    world = plan.step("train").launch.world_size
    tp, pp, cp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size
    return {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "dp": world // (tp * pp * cp),
        "mbs": a.micro_batch_size,
        "gbs": grpo.rl["mini_batch_size"] * grpo.n,
        "seq": a.seq_length,
        "precision": "bf16" if a.bf16 else "fp16" if a.fp16 else "fp32",
        "distributed_optimizer": bool(a.use_distributed_optimizer),
        "sequence_parallel": bool(a.sequence_parallel) and tp > 1,
        "recompute": a.recompute_granularity or "none",
    }


def _rl_job_inputs(job: Any) -> dict[str, Any]:
    a = job.actor
    return {
        "tp": a.tp,
        "pp": a.pp,
        "cp": a.cp,
        "dp": a.dp,
        "mbs": a.mbs,
        "gbs": a.gbs,
        "seq": a.seq,
        "precision": a.precision,
        "distributed_optimizer": a.distributed_optimizer,
        "sequence_parallel": a.sequence_parallel,
        "recompute": a.recompute,
        "gpu_memory_utilization": job.gpu_memory_utilization,
        "offload": (job.offload_param, job.offload_grad, job.offload_optimizer),
    }


# -- cases ----------------------------------------------------------------------------------------------
def _default_rank(bases: list[Base]) -> list[Base]:
    """Each LoRA base again without `lora-r`: the rank is then the framework's default (audit A3)."""
    out = list(bases)
    for base in bases:
        training = base.tree.get("backend_config", {}).get("training") or {}
        if training.get("lora-target-modules") and "lora-r" in training:
            tree = copy.deepcopy(base.tree)
            del tree["backend_config"]["training"]["lora-r"]
            out.append(Base(base.name + " (no lora-r)", tree))
    return out


def _accepted(backend: str, bases: list[Base], keys_of: Any, n: int, workdir: Path) -> list[tuple[str, Any]]:
    """The bases, then up to `n` accepted variations of them (a refused variation says nothing here)."""
    bases = _default_rank(bases)
    plans = []
    for base in bases:
        ours = verdict(
            Case(id=base.name, base=base.name, tree=copy.deepcopy(base.tree)), workdir, dry_run=True
        )
        assert ours.accepted, (base.name, ours.messages)
        plans.append((base.name, ours.plan))
    index = 0
    while len(plans) < len(bases) + n and index < 40 * n:
        case = make_case(backend, bases, keys_of, 7, index, max_mutations=2)
        index += 1
        ours = verdict(case, workdir, dry_run=True)
        if ours.accepted and ours.plan is not None and ours.plan.memory is not None:
            plans.append((f"{case.id} {case.describe()}", ours.plan))
    return plans


def _torch_bases(workdir: Path) -> list[Base]:
    from tests.diffval.backends import _template

    out = [
        Base(name, yaml.safe_load((REPO / "cfgs" / name).read_text()))
        for name in ("quickstart.yaml", "quickstart_grpo_sft.yaml")
    ]
    for exp in ("full-4k", "lora-4k", "tiny-sft"):
        tree = _template("torch", exp)
        tree["backend_config"]["training"]["tokenizer-name-or-path"] = str(DEMO_MODEL)
        tree["backend_config"]["preprocess_data"] = {"input": str(REPO / "cfgs" / "data" / "demo_sft.jsonl")}
        tree["env"] = {**tree.get("env", {}), "NPUS_PER_NODE": 2}
        tree["backend_config"]["training"]["seq-length"] = 256
        out.append(Base(f"torch/{exp}", tree))
    for base in out:
        base.tree["af_output_dir"] = str(workdir / "out" / base.name.replace("/", "_"))
    return out


def _golden(backend: str, workdir: Path) -> list[Base]:
    """The golden experiments of `cfgs/golden/` (planned as a dry run: their paths are a cluster's)."""
    out = []
    for path in sorted((REPO / "cfgs" / "golden").glob("*.yaml")):
        tree = yaml.safe_load(path.read_text())
        if tree.get("backend") == backend:
            tree["af_output_dir"] = str(workdir / "out" / path.stem)
            out.append(Base(f"golden/{path.name}", tree))
    return out


def _check(name: str, got: dict[str, Any], want: dict[str, Any], mismatches: list[str]) -> None:
    for key, value in want.items():
        if got.get(key) != value:
            mismatches.append(f"{name}: {key} estimate {got.get(key)!r} != parsed {value!r}")


def _megatron_cases(backend: str, tmp_path: Path) -> list[tuple[str, Any]]:
    if backend == "torch":
        bases = _torch_bases(tmp_path)
        return _accepted(backend, bases, _megatron_keys, VARIATIONS[backend], tmp_path)
    adapter = ADAPTERS[backend]
    bases = adapter.bases(tmp_path) + _golden(backend, tmp_path)
    skip = (
        ("pipeline-model-parallel-size", "num-layers-per-virtual-pipeline-stage")
        if backend == "mindspeed-mm"
        else ()
    )
    return _accepted(backend, bases, lambda t: _megatron_keys(t, skip), VARIATIONS[backend], tmp_path)


@pytest.mark.parametrize("backend", ["torch", "mindspeed-llm", "mindspeed-mm"])
def test_megatron_estimate_inputs_are_what_the_program_parses(backend, tmp_path):
    from ascendfactory.backends.registry import get_backend

    parse = {
        "torch": parsed_torch,
        "mindspeed-llm": parsed_mindspeed_llm,
        "mindspeed-mm": parsed_mindspeed_mm,
    }
    mismatches: list[str] = []
    cases = _megatron_cases(backend, tmp_path)
    assert len(cases) >= VARIATIONS[backend] // 2, "too few variations were accepted"
    for name, plan in cases:
        if not hasattr(plan.run, "launch"):
            continue  # MindSpeed-LLM's FSDP2 trainer (a yaml, not Megatron's argparse): not covered here yet
        job = get_backend(backend).memory_target(plan.run).job
        inputs, shape = parse[backend](plan)
        _check(name, _job_inputs(job), inputs, mismatches)
        _check(name, _shape_of(job), shape, mismatches)
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:30])


def _rl_keys(tree: dict[str, Any]) -> list[KeySpec]:
    bc = ("backend_config",)
    return [
        KeySpec((*bc, "actor_config", "tensor_model_parallel_size"), "layout"),
        KeySpec((*bc, "actor_config", "micro_batch_size"), "int"),
        KeySpec((*bc, "actor_config", "recompute_granularity"), "str", ("full", "selective")),
        KeySpec((*bc, "megatron_training", "use_distributed_optimizer"), "bool"),
        KeySpec((*bc, "megatron_training", "bf16"), "bool"),
        KeySpec((*bc, "megatron_training", "sequence_parallel"), "bool"),
        KeySpec((*bc, "megatron_training", "seq_length"), "int"),
        KeySpec((*bc, "generate_config", "gpu_memory_utilization"), "float"),
        KeySpec((*bc, "generate_config", "offload_train_optimizer"), "bool"),
        KeySpec((*bc, "generate_config", "offload_train_grad"), "bool"),
        KeySpec(("env", "NPUS_PER_NODE"), "layout"),
    ]


def test_rl_estimate_inputs_are_what_mindspeed_rl_and_the_grpo_trainer_parse(tmp_path):
    from ascendfactory.backends.registry import get_backend

    mismatches: list[str] = []
    bases = ADAPTERS["mindspeed-rl"].bases(tmp_path)
    cases = _accepted("mindspeed-rl", bases, _rl_keys, VARIATIONS["mindspeed-rl"], tmp_path)
    for name, plan in cases:
        job = get_backend("mindspeed-rl").memory_target(plan.run).job
        want = parsed_mindspeed_rl(plan)
        if want["recompute"] not in ("none", "full", "selective"):
            continue  # Megatron's parser refuses it (choices): the framework never runs it
        _check(name, _rl_job_inputs(job), want, mismatches)
    grpo = yaml.safe_load((REPO / "cfgs" / "quickstart_grpo.yaml").read_text())
    grpo["af_output_dir"] = str(tmp_path / "out" / "grpo")
    for name, plan in _accepted("torch", [Base("quickstart_grpo.yaml", grpo)], _rl_keys, 6, tmp_path):
        job = get_backend("torch").memory_target(plan.run).job
        want = parsed_grpo(plan)
        got = _rl_job_inputs(job)
        _check(name, {k: got[k] for k in want}, want, mismatches)
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:30])


# -- LLaMA-Factory and verl, in their own environments ----------------------------------------------------
def _lf_keys(tree: dict[str, Any]) -> list[KeySpec]:
    return [
        KeySpec((*T, "per_device_train_batch_size"), "int"),
        KeySpec((*T, "gradient_accumulation_steps"), "int"),
        KeySpec((*T, "cutoff_len"), "int"),
        KeySpec((*T, "finetuning_type"), "str", ("lora", "freeze", "full")),
        KeySpec((*T, "lora_rank"), "int"),
        KeySpec((*T, "pure_bf16"), "bool"),
        KeySpec((*T, "disable_gradient_checkpointing"), "bool"),
        KeySpec((*T, "freeze_trainable_layers"), "int"),
        KeySpec((*T, "flash_attn"), "str", ("auto", "disabled", "sdpa")),
        KeySpec(("env", "NPUS_PER_NODE"), "layout"),
    ]


def _env_python(kind: str) -> str | None:
    if kind == "llamafactory":
        from ascendfactory.backends.llamafactory import environment
    else:
        from ascendfactory.backends.verl import environment  # type: ignore[no-redef]
    env, _ = environment.find_env(None, os.environ)
    return None if environment.missing(env) else environment.python_of(env)


def test_llamafactory_estimate_inputs_are_what_its_parser_holds(tmp_path):
    from ascendfactory.backends.llamafactory.backend import TRAIN_YAML
    from ascendfactory.backends.llamafactory.memory import deepspeed_stage
    from ascendfactory.backends.registry import get_backend

    py = _env_python("llamafactory")
    if py is None:
        pytest.skip("the LLaMA-Factory environment is not installed (sh install.sh llamafactory)")
    bases = ADAPTERS["llamafactory"].bases(tmp_path)
    cases = _accepted("llamafactory", bases, _lf_keys, VARIATIONS["llamafactory"], tmp_path)
    requests = [
        {"id": i, "args": yaml.safe_load(plan.files[os.path.join(plan.output_dir, TRAIN_YAML)])}
        for i, (_, plan) in enumerate(cases)
    ]
    done = subprocess.run(
        [py, str(REPO / "tests" / "support" / "lf_parse_worker.py")],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=600,
    )
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    mismatches: list[str] = []
    for i, (name, plan) in enumerate(cases):
        reply = replies[i]
        assert "values" in reply, (name, reply.get("error"), done.stderr[-2000:])
        v = reply["values"]
        job = get_backend("llamafactory").memory_target(plan.run).job
        stage, off_opt, off_param, _ = deepspeed_stage(v["deepspeed"])
        got = {
            "batch": job.batch,
            "grad_accum": job.grad_accum,
            "seq": job.seq,
            "finetuning": job.finetuning,
            "lora_rank": job.lora_rank,
            "freeze_trainable_layers": job.freeze_trainable_layers,
            "pure_bf16": job.pure_bf16,
            "precision": job.precision,
            "gradient_checkpointing": job.gradient_checkpointing,
            "quantization_bit": job.quantization_bit,
            "flash_attention": job.flash_attention,
            "zero": (job.zero, job.offload_optimizer, job.offload_param),
            "devices": job.devices,
        }
        want = {
            "batch": v["per_device_train_batch_size"],
            "grad_accum": v["gradient_accumulation_steps"],
            "seq": v["cutoff_len"],
            "finetuning": v["finetuning_type"],
            "lora_rank": v["lora_rank"],
            "freeze_trainable_layers": v["freeze_trainable_layers"],
            "pure_bf16": v["pure_bf16"],
            "precision": "bf16" if v["bf16"] or v["pure_bf16"] else "fp16" if v["fp16"] else "fp32",
            "gradient_checkpointing": not v["disable_gradient_checkpointing"],
            "quantization_bit": v["quantization_bit"],
            "flash_attention": v["flash_attn"] != "disabled",
            "zero": (stage, off_opt, off_param),
            "devices": plan.step("train").launch.world_size,
        }
        _check(name, got, want, mismatches)
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:30])


def test_verl_estimate_inputs_are_what_its_composed_config_holds(tmp_path):
    from ascendfactory.backends.registry import get_backend
    from tests.diffval.backends import _template

    py = _env_python("verl")
    if py is None:
        pytest.skip("the verl environment is not installed (sh install.sh verl)")
    compose = REPO / "ascendfactory" / "backends" / "common" / "hydra" / "programs" / "hydra_compose.py"
    mismatches: list[str] = []
    variations = [
        {},
        {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2},
        {"actor_rollout_ref.actor.fsdp_config.param_offload": True},
        {"actor_rollout_ref.actor.fsdp_config.optimizer_offload": True},
        {"actor_rollout_ref.rollout.gpu_memory_utilization": 0.6},
        {"actor_rollout_ref.model.enable_gradient_checkpointing": False},
    ]
    for exp in ("grpo", "ppo", "dapo"):
        for i, changes in enumerate(variations if exp == "grpo" else variations[:1]):
            tree = _template("verl", exp)
            bc = tree["backend_config"]
            bc["actor_rollout_ref"]["model"]["path"] = str(DEMO_MODEL)
            if isinstance(bc.get("critic"), dict) and isinstance(bc["critic"].get("model"), dict):
                bc["critic"]["model"]["path"] = str(DEMO_MODEL)
            for dotted, value in changes.items():
                node = bc
                *parents, last = dotted.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[last] = value
            tree["af_output_dir"] = str(tmp_path / "out" / f"{exp}{i}")
            ours = verdict(Case(id=f"verl/{exp}/{i}", base=exp, tree=tree), tmp_path, dry_run=True)
            assert ours.accepted, (exp, changes, ours.messages)
            plan = ours.plan
            overrides = list(plan.step("train").launch.driver[3:])
            done = subprocess.run(
                [py, str(compose), "--package=verl", "--config-dir=trainer/config"],
                input=json.dumps({"overrides": overrides, "config_name": "ppo_trainer"}),
                capture_output=True,
                text=True,
                timeout=300,
            )
            config = json.loads(done.stdout.splitlines()[-1])["config"]
            job = get_backend("verl").memory_target(plan.run).job

            def get(dotted: str, cfg: Any = config) -> Any:
                for part in dotted.split("."):
                    cfg = cfg.get(part) if isinstance(cfg, dict) else None
                return cfg

            a = "actor_rollout_ref."
            want = {
                "batch": get(a + "actor.ppo_micro_batch_size_per_gpu"),
                "seq": get("data.max_prompt_length") + get("data.max_response_length"),
                "gradient_checkpointing": bool(get(a + "model.enable_gradient_checkpointing")),
                "offload_param": bool(get(a + "actor.fsdp_config.param_offload")),
                "offload_optimizer": bool(get(a + "actor.fsdp_config.optimizer_offload")),
                "gpu_memory_utilization": get(a + "rollout.gpu_memory_utilization"),
                "reference": bool(get(a + "actor.use_kl_loss")) or bool(get("algorithm.use_kl_in_reward")),
                "critic": get("algorithm.adv_estimator") == "gae",
                "devices": get("trainer.n_gpus_per_node") * get("trainer.nnodes"),
            }
            got = {
                "batch": job.actor.batch,
                "seq": job.actor.seq,
                "gradient_checkpointing": job.actor.gradient_checkpointing,
                "offload_param": job.actor.offload_param and job.offload_param and job.offload_grad,
                "offload_optimizer": job.actor.offload_optimizer and job.offload_optimizer,
                "gpu_memory_utilization": job.gpu_memory_utilization,
                "reference": job.reference,
                "critic": job.critic is not None,
                "devices": job.actor.devices,
            }
            _check(f"verl/{exp} {changes}", got, want, mismatches)
    assert not mismatches, f"{len(mismatches)} mismatches:\n" + "\n".join(mismatches[:30])


if __name__ == "__main__":  # pragma: no cover - a manual run prints the mismatches
    sys.exit(pytest.main([__file__, "-q", "-m", "integration"]))
