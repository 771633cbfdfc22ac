"""The mindspeed-llm plan: argument names, converter choice, load decisions, flags, real-run checks."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascendfactory.backends.common.megatron.read import to_flags
from ascendfactory.backends.mindspeed_llm.keys import KINDS, names_file, nearest, valid_names
from ascendfactory.backends.mindspeed_llm.versions import VERSIONS
from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from ascendfactory.errors import ConfigError
from ascendfactory.plan import Plan

BASE: dict[str, Any] = {
    "backend": "mindspeed-llm",
    "af_model_name": "qwen2.5-7b",
    "exp_name": "t",
    "af_output_dir": "OUT",
    "env": {"NPUS_PER_NODE": 8},
    "stage": "sft",
    "backend_config": {
        "preprocess_data": {
            "input": "data.jsonl",
            "handler-name": "AlpacaStyleInstructionHandler",
            "prompt-type": "qwen",
        },
        "training": {
            "tensor-model-parallel-size": 2,
            "pipeline-model-parallel-size": 2,
            "micro-batch-size": 1,
            "global-batch-size": 16,
            "seq-length": 4096,
            "train-iters": 10,
            "bf16": True,
            "tokenizer-name-or-path": "HF",
        },
    },
}


def merge(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    for k, v in src.items():
        nested = isinstance(v, dict) and v and isinstance(dst.get(k), dict)
        dst[k] = merge(dst[k], v) if nested else v
    return dst


def plan_for(tmp_path: Path, changes: dict[str, Any] | None = None, *, dry_run: bool = True) -> Plan:
    tree = merge(copy.deepcopy(BASE), changes or {})
    tree["af_output_dir"] = str(tmp_path / tree["af_output_dir"])
    training = tree["backend_config"].get("training") or {}
    if training.get("tokenizer-name-or-path") == "HF":
        training["tokenizer-name-or-path"] = str(tmp_path / "HF")
    pre = tree["backend_config"].get("preprocess_data") or {}
    if pre.get("input") == "data.jsonl":
        pre["input"] = str(tmp_path / "data.jsonl")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return make_plan(load_experiment(path), dry_run=dry_run, environ=dict(os.environ))


def problems_of(tmp_path: Path, changes: dict[str, Any], **kw: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, changes, **kw)
    return {p.key: f"{p.message} | {p.fix}" for p in e.value.problems}


def train_flags(plan: Plan) -> dict[str, list[str]]:
    argv = plan.step("train").argv
    entry = next(i for i, a in enumerate(argv) if a.endswith("_gpt.py"))
    flags: dict[str, list[str]] = {}
    for tok in argv[entry + 1 :]:
        if tok.startswith("--"):
            key = tok[2:]
            assert key not in flags, f"--{key} passed twice"
            flags[key] = []
        else:
            flags[key].append(tok)
    return flags


# -- argument names -----------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_names_files_carry_their_source_and_the_example_flags(version: str) -> None:
    here = Path(__file__).resolve().parents[4] / "ascendfactory" / "backends" / "mindspeed_llm" / "keys"
    for kind in KINDS:
        filename = names_file(kind, version)
        header = [line for line in (here / filename).read_text().splitlines() if line.startswith("#")]
        assert any("Ascend/MindSpeed-LLM @" in line for line in header), filename
        assert any("scripts/gen_mindspeed_args.py --version" in line for line in header), filename
        assert len(valid_names(kind, version)) > 30
    training = valid_names("training", version)
    v1, v2 = valid_names("convert_v1", version), valid_names("convert_v2", version)
    assert {"micro-batch-size", "lora-target-modules", "use-fused-rmsnorm", "stage"} <= training
    assert "hf-cfg-dir" in v2 and "hf-cfg-dir" not in v1
    assert "tokenizer-model" in v1 and "tokenizer-model" not in v2


def test_the_versions_lists_differ_where_their_sources_do() -> None:
    old, new = valid_names("training", "2.1.0"), valid_names("training", "26.1.0")
    # Megatron core_v0.12.1's checkpoint format and MindSpeed-LLM 26.1.0's finetune flag are new ...
    assert {"ckpt-format", "no-pad-to-seq-lengths"} <= new - old
    # ... and 2.1.0's PPO/SimPO flags and --use-fused-mlp are gone (mindspeed_llm/training/arguments.py 2.1.0)
    assert {"ppo-epochs", "simpo-beta", "use-fused-mlp"} <= old - new
    assert "MagistralTokenizer" in dict.fromkeys(
        __import__("ascendfactory.backends.mindspeed_llm.keys", fromlist=["specs"])
        .specs("preprocess", "26.1.0")["tokenizer-type"]
        .choices
    )


def test_nearest_prefers_the_dashed_spelling() -> None:
    names = valid_names("training", "26.1.0")
    assert nearest("micro_batch_size", names) == ["micro-batch-size"]
    assert "global-batch-size" in nearest("global-bach-size", names)


def test_unknown_keys_in_every_section_are_reported_with_suggestions(tmp_path: Path, clean_env) -> None:
    found = problems_of(
        tmp_path,
        {
            "backend_config": {
                "training": {"micro_batch_size": 2, "learning-rate": 1e-5},
                "preprocess_data": {"worker": 4},
                "convert_ckpt_hf2mg": {"hf-cfg-dir": "x"},  # v2-only flag; converter v1 below
                "converter": "v1",
                "mindspeed_llm_version": "2.1.0",
            }
        },
    )
    k = "backend_config."
    assert "did you mean: micro-batch-size?" in found[k + "training.micro_batch_size"]
    assert (
        "not an argument of MindSpeed-LLM 2.1.0 / Megatron-LM core_r0.8.0"
        in found[k + "training.learning-rate"]
    )
    assert "workers" in found[k + "preprocess_data.worker"]
    assert "convert_ckpt.py (v1)" in found[k + "convert_ckpt_hf2mg.hf-cfg-dir"]


def test_unknown_names_and_layout_problems_come_together(tmp_path: Path, clean_env) -> None:
    found = problems_of(
        tmp_path, {"backend_config": {"training": {"tensor-model-parallel-size": 3, "bogus-flag": True}}}
    )
    assert "backend_config.training.bogus-flag" in found
    assert "backend_config.training.tensor-model-parallel-size" in found


@pytest.mark.parametrize(
    ("version", "algo", "ulysses", "refused"),
    [
        ("2.1.0", None, None, True),  # 2.1.0's default, ulysses_cp_algo: heads split by TP x CP
        ("2.1.0", "megatron_cp_algo", None, False),  # a ring: heads split by TP alone
        ("2.1.0", "hybrid_cp_algo", 2, False),  # heads split by TP x ulysses-degree-in-cp
        ("26.1.0", None, None, False),  # 26.1.0's default, megatron_cp_algo
        ("26.1.0", "ulysses_cp_algo", None, True),
    ],
)
def test_the_heads_are_checked_against_the_cp_algorithm_the_version_runs(
    tmp_path: Path, clean_env, version, algo, ulysses, refused
) -> None:
    """Qwen2.5-7B's 28 heads on 8 devices at TP 2 x CP 4: MindSpeed's _validate_cp_args refuses them only
    where the algorithm splits the heads by CP (ulysses) or by a ulysses degree that does not divide them."""
    training: dict[str, Any] = {"pipeline-model-parallel-size": 1, "context-parallel-size": 4}
    training |= {"context-parallel-algo": algo} if algo else {}
    training |= {"ulysses-degree-in-cp": ulysses} if ulysses else {}
    change = {"backend_config": {"mindspeed_llm_version": version, "training": training}}
    if refused:
        found = problems_of(tmp_path, change)
        assert (
            "tp(2) * cp(4) = 8 does not divide num_attention_heads(28)"
            in found["backend_config.training.tensor-model-parallel-size"]
        )
    else:
        flags = train_flags(plan_for(tmp_path, change))
        assert flags["context-parallel-size"] == ["4"]


def test_a_section_that_is_not_a_mapping_is_an_error(tmp_path: Path, clean_env) -> None:
    found = problems_of(tmp_path, {"backend_config": {"convert_ckpt_hf2mg": ["--x"]}})
    assert "must be a mapping" in found["backend_config.convert_ckpt_hf2mg"]


# -- converter choice ---------------------------------------------------------------------------------
def test_without_a_checkout_the_plan_targets_26_1_0_and_says_so(tmp_path: Path, clean_env) -> None:
    plan = plan_for(tmp_path)
    assert plan.facts["mindspeed_llm_version"] == "26.1.0" and plan.facts["megatron"] == "core_v0.12.1"
    assert plan.facts["converter"] == "v2" and plan.step("hf2mg").argv[1] == "convert_ckpt_v2.py"
    assert any("planning for MindSpeed-LLM 26.1.0" in w for w in plan.warnings)
    assert plan.step("train").cwd == "<MINDSPEED_LLM_DIR>"
    flags = train_flags(plan)  # what every 26.1.0 example passes
    assert flags["ckpt-format"] == ["torch"] and flags["transformer-impl"] == ["local"]


def test_a_chosen_2_1_0_plans_as_before(tmp_path: Path, clean_env) -> None:
    plan = plan_for(tmp_path, {"backend_config": {"mindspeed_llm_version": "2.1.0"}})
    assert plan.facts["mindspeed_llm_version"] == "2.1.0" and plan.facts["megatron"] == "core_r0.8.0"
    assert plan.facts["converter"] == "v1" and plan.step("hf2mg").argv[1] == "convert_ckpt.py"
    flags = train_flags(plan)
    assert "ckpt-format" not in flags and "transformer-impl" not in flags
    assert not any("planning for" in w for w in plan.warnings)  # the version is the user's


@pytest.mark.parametrize("value", ["2.3.0", 26.1, ["26.1.0"]])
def test_a_version_not_planned_for_is_named_with_the_choices(tmp_path: Path, clean_env, value) -> None:
    found = problems_of(tmp_path, {"backend_config": {"mindspeed_llm_version": value}})
    assert "not a MindSpeed-LLM version" in found["backend_config.mindspeed_llm_version"]
    assert "2.1.0 (end of life" in found["backend_config.mindspeed_llm_version"]


def write_package_info(root: Path, minor: int) -> None:
    (root / "megatron" / "core").mkdir(parents=True, exist_ok=True)
    (root / "megatron" / "core" / "package_info.py").write_text(f"MAJOR = 0\nMINOR = {minor}\nPATCH = 1\n")


@pytest.mark.parametrize(
    "minor, markers, version, note",
    [
        (8, (), "2.1.0", None),
        (12, ("pretrain_deepseek4.py",), "26.1.0", None),
        (12, (), "26.1.0", "release before 26.1.0"),
    ],
)
def test_the_version_is_read_from_the_checkout_s_megatron(
    tmp_path: Path, clean_env, fake_checkout, monkeypatch, minor, markers, version, note
) -> None:
    root = fake_checkout(tmp_path / "msllm")
    write_package_info(root, minor)
    for marker in markers:
        (root / marker).write_text("")
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(root))
    plan = plan_for(tmp_path)
    assert plan.facts["mindspeed_llm_version"] == version
    assert f"core 0.{minor}" in plan.facts["mindspeed_llm_version_reason"]
    assert (
        any(note in w for w in plan.warnings)
        if note
        else not any("release before" in w for w in plan.warnings)
    )


def test_a_chosen_version_the_checkout_is_not_is_refused_on_a_real_run(
    tmp_path: Path, clean_env, fake_checkout, monkeypatch
) -> None:
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", "/opt/toolkit")
    (tmp_path / "HF").mkdir()
    (tmp_path / "data.jsonl").write_text("{}\n")
    root = fake_checkout(tmp_path / "msllm")
    write_package_info(root, 8)
    found = problems_of(
        tmp_path,
        {"scripts_dir": str(root), "backend_config": {"mindspeed_llm_version": "26.1.0"}},
        dry_run=False,
    )
    assert "runs on core_v0.12.1" in found["backend_config.mindspeed_llm_version"]


@pytest.mark.parametrize("has_v2, version", [(True, "v2"), (False, "v1")])
def test_converter_follows_the_installed_version(
    tmp_path: Path, clean_env, fake_checkout, monkeypatch, has_v2: bool, version: str
) -> None:
    root = fake_checkout(tmp_path / "msllm", v2=has_v2)
    monkeypatch.setenv("AF_MINDSPEED_LLM_DIR", str(root))
    plan = plan_for(tmp_path)
    assert plan.facts["converter"] == version
    assert not any("defaulting" in w for w in plan.warnings)
    assert plan.step("hf2mg").cwd == str(root)


def test_explicit_converter_wins_and_a_bad_value_is_named(tmp_path: Path, checkout) -> None:
    assert plan_for(tmp_path, {"backend_config": {"converter": "v2"}}).facts["converter"] == "v2"
    found = problems_of(tmp_path, {"backend_config": {"converter": "v3"}})
    assert "v1 (convert_ckpt.py) or v2" in found["backend_config.converter"]


def test_real_run_refuses_a_converter_the_checkout_lacks(tmp_path: Path, checkout, monkeypatch) -> None:
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", "/opt/toolkit")
    (tmp_path / "HF").mkdir()
    (tmp_path / "data.jsonl").write_text("{}\n")
    found = problems_of(tmp_path, {"backend_config": {"converter": "v2"}}, dry_run=False)
    assert "convert_ckpt_v2.py not found" in found["backend_config.converter"]
    ok = plan_for(tmp_path, {"backend_config": {"converter": "v1"}}, dry_run=False)
    assert ok.facts["converter"] == "v1"


# -- real run vs dry run: checkout and toolkit ----------------------------------------------------------
def test_real_run_without_checkout_or_toolkit_is_a_clear_error(tmp_path: Path, clean_env) -> None:
    (tmp_path / "HF").mkdir()
    (tmp_path / "data.jsonl").write_text("{}\n")
    found = problems_of(tmp_path, {}, dry_run=False)
    assert "install.sh mindspeed-llm" in found["scripts_dir"]
    assert "set_env.sh" in found["(environment)"]


def test_dry_run_only_warns_about_checkout_and_toolkit(tmp_path: Path, clean_env) -> None:
    warnings = " ".join(plan_for(tmp_path).warnings)
    assert "MindSpeed-LLM directory" in warnings and "Ascend toolkit" in warnings


def test_scripts_dir_wins_over_the_environment(tmp_path: Path, checkout, fake_checkout) -> None:
    other = fake_checkout(tmp_path / "other")
    assert plan_for(tmp_path, {"scripts_dir": str(other)}).step("train").cwd == str(other)


def test_checkout_without_megatron_is_refused_on_a_real_run(
    tmp_path: Path, clean_env, fake_checkout, monkeypatch
) -> None:
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", "/opt/toolkit")
    (tmp_path / "HF").mkdir()
    (tmp_path / "data.jsonl").write_text("{}\n")
    root = fake_checkout(tmp_path / "msllm", megatron=False)
    found = problems_of(tmp_path, {"scripts_dir": str(root)}, dry_run=False)
    assert "no megatron/ folder" in found["scripts_dir"]


# -- load decisions, LoRA, save flags -------------------------------------------------------------------
LORA = {
    "backend_config": {
        "training": {"lora-r": 8, "lora-alpha": 16, "lora-target-modules": ["linear_qkv", "linear_proj"]}
    }
}


def test_type1_loads_converted_weights_with_finetune(tmp_path: Path, clean_env) -> None:
    plan = plan_for(tmp_path)
    flags = train_flags(plan)
    converted = str(tmp_path / "OUT" / "converted_weight_TP2PP2")
    assert flags["load"] == [converted] and plan.step("hf2mg").outputs == [converted]
    assert {"finetune", "no-load-optim", "no-load-rng"} <= set(flags)


def test_resume_type2_loads_without_finetune_and_skips_conversion(tmp_path: Path, clean_env) -> None:
    plan = plan_for(tmp_path, {"ckpt_load_type": 2, "user_converted_ckpt_path": "/ckpt/run1"})
    flags = train_flags(plan)
    assert flags["load"] == ["/ckpt/run1"]
    assert not {"finetune", "no-load-optim", "no-load-rng"} & set(flags)
    assert plan.step("hf2mg").skipped


def test_auto_resume_picks_saved_checkpoints(tmp_path: Path, clean_env) -> None:
    saved = tmp_path / "OUT" / "saved_checkpoints"
    (saved / "iter_0000020" / "mp_rank_00_000").mkdir(parents=True)
    (saved / "iter_0000020" / "mp_rank_00_000" / "model_optim_rng.pt").write_bytes(b"x")
    (saved / "latest_checkpointed_iteration.txt").write_text("20")
    plan = plan_for(tmp_path, {"train_auto_resume": True, "user_converted_ckpt_path": "/elsewhere"})
    flags = train_flags(plan)
    assert flags["load"] == [str(saved)] and "finetune" not in flags
    assert plan.step("hf2mg").skipped


def test_auto_resume_reads_a_torch_dist_checkpoint_of_26_1_0(tmp_path: Path, clean_env) -> None:
    """Files as Megatron core_v0.12.1's dist_checkpointing writes them (tests/unit/test_checkpoints.py)."""
    saved = tmp_path / "OUT" / "saved_checkpoints"
    it = saved / "iter_0000020"
    it.mkdir(parents=True)
    for name in ("common.pt", "__0_0.distcp", "__1_0.distcp", ".metadata"):
        (it / name).write_bytes(b"x")
    (it / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    (saved / "latest_checkpointed_iteration.txt").write_text("20")
    changes = {
        "train_auto_resume": True,
        "convert_mg2hf_at_last": False,
        "backend_config": {"training": {"ckpt-format": "torch_dist"}},
    }
    plan = plan_for(tmp_path, changes)
    flags = train_flags(plan)
    assert flags["load"] == [str(saved)] and "finetune" not in flags
    assert flags["ckpt-format"] == ["torch_dist"] and plan.facts["checkpoint_format"] == "torch_dist"
    assert plan.facts["load_reason"].startswith("train_auto_resume")


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"backend_config": {"training": {"ckpt-format": "torch_dist"}}}, "ckpt-format"),
        ({"backend_config": {"training": {"ckpt-format": None}}}, "ckpt-format"),  # Megatron's default
        (
            {"backend_config": {"mindspeed_llm_version": "2.1.0", "training": {"use-dist-ckpt": True}}},
            "use-dist-ckpt",
        ),
    ],
)
def test_a_distributed_checkpoint_format_cannot_be_converted_back(
    tmp_path: Path, clean_env, changes, key
) -> None:
    found = problems_of(tmp_path, changes)
    message = found["backend_config.training." + key]
    assert "torch_dist checkpoints" in message and "ckpt-format: torch" in message
    kept = plan_for(tmp_path, merge(copy.deepcopy(changes), {"convert_mg2hf_at_last": False}))
    assert kept.facts["checkpoint_format"] == "torch_dist" and kept.step("mg2hf").skipped


def test_the_plan_saves_the_torch_layout_by_default(tmp_path: Path, clean_env) -> None:
    for version in ("2.1.0", "26.1.0"):
        plan = plan_for(tmp_path, {"backend_config": {"mindspeed_llm_version": version}})
        assert plan.facts["checkpoint_format"] == "torch"


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"ckpt_load_type": 2, "user_converted_ckpt_path": "/ckpt"}, "ckpt_load_type"),
        ({"backend_config": {"training": {"finetune": False}}}, "backend_config.training.finetune"),
    ],
)
def test_lora_resume_is_refused(tmp_path: Path, clean_env, changes: dict[str, Any], key: str) -> None:
    found = problems_of(tmp_path, merge(copy.deepcopy(LORA), changes))
    assert "LoRA" in found[key] and "resume" in found[key]


def test_lora_auto_resume_with_a_checkpoint_is_refused(tmp_path: Path, clean_env) -> None:
    saved = tmp_path / "OUT" / "saved_checkpoints" / "iter_0000005" / "mp_rank_00"
    saved.mkdir(parents=True)
    (saved / "model_optim_rng.pt").write_bytes(b"x")
    (saved.parents[1] / "latest_checkpointed_iteration.txt").write_text("5")
    found = problems_of(tmp_path, merge(copy.deepcopy(LORA), {"train_auto_resume": True}))
    assert "LoRA" in found["train_auto_resume"]


def test_no_save_flags_only_when_asked_and_with_a_warning(tmp_path: Path, clean_env) -> None:
    plain = plan_for(tmp_path)
    assert not {"no-save-optim", "no-save-rng"} & set(train_flags(plain))
    asked = plan_for(
        tmp_path, {"train_auto_resume": True, "backend_config": {"training": {"no-save-optim": True}}}
    )
    assert "no-save-optim" in train_flags(asked)
    assert any("no-save-optim" in w and "resuming will fail" in w for w in asked.warnings)


def test_the_hf_model_directory_is_required(tmp_path: Path, clean_env) -> None:
    found = problems_of(
        tmp_path,
        {
            "backend_config": {
                "preprocess_data": None,
                "training": {"tokenizer-name-or-path": None, "data-path": "/data/alpaca"},
            }
        },
    )
    assert "HF model directory" in found["backend_config.training.tokenizer-name-or-path"]


def test_save_elsewhere_is_refused(tmp_path: Path, clean_env) -> None:
    found = problems_of(tmp_path, {"backend_config": {"training": {"save": "/tmp/x"}}})
    assert "saved_checkpoints" in found["backend_config.training.save"]


# -- flags ----------------------------------------------------------------------------------------------
def test_to_flags_renders_bools_lists_and_numbers() -> None:
    options = {
        "bf16": True,
        "fp16": False,
        "seed": None,
        "lora-target-modules": ["a", "b"],
        "lr": 1.25e-6,
        "split": "100,0,0",
    }
    assert to_flags(options) == [
        "--bf16",
        "--lora-target-modules",
        "a",
        "b",
        "--lr",
        "1.25e-06",
        "--split",
        "100,0,0",
    ]


def test_user_values_win_over_filled_ones(tmp_path: Path, clean_env) -> None:
    flags = train_flags(
        plan_for(
            tmp_path,
            {
                "backend_config": {
                    "training": {
                        "add-qkv-bias": False,
                        "max-position-embeddings": 32768,
                        "split": "98,2,0",
                        "distributed-backend": "gloo",
                        "use-flash-attn": True,
                    }
                }
            },
        )
    )
    assert "add-qkv-bias" not in flags
    assert flags["max-position-embeddings"] == ["32768"] and flags["split"] == ["98,2,0"]
    assert flags["distributed-backend"] == ["gloo"] and flags["use-flash-attn"] == []


def test_architecture_flags_follow_the_model(tmp_path: Path, clean_env) -> None:
    qwen3 = train_flags(
        plan_for(
            tmp_path,
            {
                "af_model_name": "qwen3-0.6b",
                "backend_config": {
                    "training": {
                        "tensor-model-parallel-size": 1,
                        "pipeline-model-parallel-size": 1,
                        "global-batch-size": 8,
                    }
                },
            },
        )
    )
    assert "qk-layernorm" in qwen3 and qwen3["kv-channels"] == ["128"]
    assert "add-qkv-bias" not in qwen3 and "untie-embeddings-and-output-weights" not in qwen3
    llama = train_flags(plan_for(tmp_path, {"af_model_name": "llama2-7b"}))
    assert "group-query-attention" not in llama and llama["norm-epsilon"] == ["1e-05"]


def test_hf_config_json_wins_over_the_catalog(tmp_path: Path, clean_env) -> None:
    hf = tmp_path / "HF"
    hf.mkdir()
    config = {
        "model_type": "qwen2",
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 8192,
        "rope_theta": 10000.0,
    }
    (hf / "config.json").write_text(json.dumps(config))
    flags = train_flags(plan_for(tmp_path))
    assert flags["num-layers"] == ["4"] and flags["padded-vocab-size"] == ["1000"]
    assert flags["rotary-base"] == ["10000"]


def test_sft_and_pt_entry_points_and_data_paths(tmp_path: Path, clean_env) -> None:
    sft = plan_for(tmp_path)
    argv = sft.step("train").argv
    assert "posttrain_gpt.py" in argv
    flags = train_flags(sft)
    prefix = str(tmp_path / "OUT" / "preprocess_data" / "data")
    assert flags["data-path"] == [prefix] and flags["stage"] == ["sft"] and flags["prompt-type"] == ["qwen"]
    assert "is-instruction-dataset" in flags
    pt = plan_for(
        tmp_path,
        {
            "stage": "pt",
            "backend_config": {
                "preprocess_data": {"handler-name": "GeneralPretrainHandler", "prompt-type": None}
            },
        },
    )
    assert "pretrain_gpt.py" in pt.step("train").argv
    flags = train_flags(pt)
    assert flags["data-path"] == [prefix + "_text_document"] and "stage" not in flags
    assert "is-instruction-dataset" not in flags


def test_preprocess_runs_in_the_checkout_and_creates_its_folder(tmp_path: Path, checkout) -> None:
    step = plan_for(tmp_path).step("preprocess")
    assert step.mkdirs == [str(tmp_path / "OUT" / "preprocess_data")]  # the runner creates it first
    program = step.argv
    assert program[1] == "preprocess_data.py" and step.cwd == str(checkout)
    assert program[program.index("--input") + 1] == str(tmp_path / "data.jsonl")
    assert program[program.index("--tokenizer-type") + 1] == "PretrainedFromHF"
    assert program[program.index("--handler-name") + 1] == "AlpacaStyleInstructionHandler"


def test_environment_reaches_the_steps(tmp_path: Path, clean_env, monkeypatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    plan = plan_for(tmp_path, {"env": {"HCCL_CONNECT_TIMEOUT": 1200}})
    assert plan.env["HCCL_CONNECT_TIMEOUT"] == "1200"
    env = plan.step("train").env
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and env["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_final_conversion_can_be_disabled_or_redirected(tmp_path: Path, clean_env) -> None:
    off = plan_for(tmp_path, {"backend_config": {"convert_ckpt_mg2hf": None}})
    assert off.step("mg2hf").skipped
    to = plan_for(tmp_path, {"hf_save_dir": str(tmp_path / "hf_out")}).step("mg2hf")
    assert to.argv[to.argv.index("--save-dir") + 1] == str(tmp_path / "hf_out")


# -- data blends ----------------------------------------------------------------------------------------
# Megatron's `--data-path` is nargs '*', read by megatron.core.datasets.utils.get_blend_from_list: an odd
# count is a list of prefixes; an even count is (weight, prefix) pairs when every first word of a pair is a
# number, a list of prefixes when none is, and fails its assertion on a mix.
@pytest.mark.parametrize(
    "given, words",
    [
        ([0.3, "/d/a", 0.7, "rel/b"], ["0.3", "/d/a", "0.7", "REL/rel/b"]),
        ("0.3 /d/a 0.7 /d/b", ["0.3", "/d/a", "0.7", "/d/b"]),
        (["/d/a", "/d/b", "/d/c"], ["/d/a", "/d/b", "/d/c"]),
        (["/d/a", "/d/b"], ["/d/a", "/d/b"]),
        ("/my data/a", ["/my data/a"]),  # one path with a space, not a blend
    ],
)
def test_a_data_blend_reaches_megatron_word_for_word(tmp_path: Path, clean_env, given: Any, words: list[str]):
    plan = plan_for(tmp_path, {"backend_config": {"training": {"data-path": given}}})
    want = [w.replace("REL/", str(Path.cwd()) + "/") for w in words]
    assert train_flags(plan)["data-path"] == want
    assert plan.step("preprocess").skipped


@pytest.mark.parametrize(
    "given, fragment",
    [
        ([0.3, "/d/a", "/d/b", 0.7], "some datasets have a weight and some do not"),
        ([0.3, "/d/a", 0.7], "3 words, 2 of them numbers: weights need a prefix each"),
        ([0.3, 1, 0.7, "/d/b"], "a number stands where a dataset prefix belongs"),
        ([0, "/d/a", 0, "/d/b"], "the weights must sum to more than 0"),
        ([True, "/d/a"], "must be a path"),
    ],
)
def test_a_wrong_data_blend_is_named(tmp_path: Path, clean_env, given: Any, fragment: str):
    found = problems_of(tmp_path, {"backend_config": {"training": {"data-path": given}}})
    assert fragment in found["backend_config.training.data-path"], found


def test_the_embedded_trainer_refuses_a_blend(tmp_path: Path, clean_env):
    found = problems_of(
        tmp_path, {"backend": "torch", "backend_config": {"training": {"data-path": [0.5, "/a", 0.5, "/b"]}}}
    )
    assert "the embedded trainer reads one dataset prefix" in found["backend_config.training.data-path"]


@pytest.mark.parametrize(
    "model, version, converter, warned",
    [
        ("qwen3-8b", "26.1.0", "v2", True),  # model_cfg.json: no qkv_split per_group for qwen3
        ("qwen2.5-7b", "26.1.0", "v2", False),  # qwen25 has it
        ("qwen3-8b", "26.1.0", "v1", False),
        ("qwen3-8b", "2.1.0", "v1", False),
    ],
)
def test_the_final_v2_conversion_of_an_ungrouped_qkv_family_is_warned(
    tmp_path: Path, clean_env, model: str, version: str, converter: str, warned: bool
) -> None:
    changes = {
        "af_model_name": model,
        "backend_config": {"mindspeed_llm_version": version, "converter": converter},
    }
    warnings = [w for w in plan_for(tmp_path, changes).warnings if "scrambled q/k/v" in w]
    assert bool(warnings) == warned


def test_2_1_0_v1_conversion_of_mla_above_tp1_is_refused(tmp_path: Path, clean_env) -> None:
    """2.1.0's convert_ckpt.py stops in its saver for DeepSeek at TP > 1 (BaseMindSpeedLLM.v1_mla_above_tp1);
    TP 1, given converted weights, 26.1.0's v2 and Qwen3-MoE are planned."""
    moe = {
        "af_model_name": "deepseek-v2-lite-16b",
        "backend_config": {
            "mindspeed_llm_version": "2.1.0",
            "training": {
                "pipeline-model-parallel-size": 1,
                "expert-model-parallel-size": 2,
                "sequence-parallel": True,
            },
        },
    }
    problems = problems_of(tmp_path, moe)
    assert (
        "cannot convert the multi-head latent attention"
        in problems["backend_config.training.tensor-model-parallel-size"]
    )
    tp1 = merge(copy.deepcopy(moe), {"backend_config": {"training": {"tensor-model-parallel-size": 1}}})
    assert plan_for(tmp_path, tp1).step("hf2mg").argv[1] == "convert_ckpt.py"
    given = merge(copy.deepcopy(moe), {"user_converted_ckpt_path": str(tmp_path / "mg")})
    assert plan_for(tmp_path, given).step("hf2mg").skipped
    v2 = merge(copy.deepcopy(moe), {"backend_config": {"mindspeed_llm_version": "26.1.0"}})
    assert plan_for(tmp_path, v2).step("hf2mg").argv[1] == "convert_ckpt_v2.py"
    qwen = merge(copy.deepcopy(moe), {"af_model_name": "qwen3-30b-a3b"})
    assert plan_for(tmp_path, qwen).step("hf2mg").argv[1] == "convert_ckpt.py"


def test_a_model_type_the_targeted_converter_does_not_accept_is_refused_before_launch(
    tmp_path: Path, clean_env
) -> None:
    """2.1.0's convert_ckpt.py has no `--model-type-hf deepseek3` (keys/convert_v1_2.1.0.txt, from its
    parser): both conversion steps are refused, each with its own way round; 26.1.0's v2 converts it; given
    weights and no final conversion plan."""
    v3 = {
        "af_model_name": "deepseek-v3-671b",
        "backend_config": {
            "mindspeed_llm_version": "2.1.0",
            "training": {
                "tensor-model-parallel-size": 1,
                "pipeline-model-parallel-size": 1,
                "expert-model-parallel-size": 8,
            },
        },
    }
    with pytest.raises(ConfigError) as e:
        plan_for(tmp_path, v3)
    problems = [p for p in e.value.problems if p.key == "model_name_or_path"]
    assert [p.message.split(" step")[0] for p in problems] == ["the hf2mg", "the mg2hf"]
    assert all("--model-type-hf deepseek3" in p.message for p in problems)
    assert all("mindspeed_llm_version to 26.1.0, whose convert_ckpt_v2.py" in p.fix for p in problems)
    assert "user_converted_ckpt_path" in problems[0].fix and "convert_ckpt_mg2hf: null" in problems[1].fix
    at_26 = merge(copy.deepcopy(v3), {"backend_config": {"mindspeed_llm_version": "26.1.0"}})
    assert "deepseek3" in plan_for(tmp_path, at_26).step("hf2mg").argv
    own = merge(
        copy.deepcopy(v3),
        {"user_converted_ckpt_path": str(tmp_path / "mg"), "backend_config": {"convert_ckpt_mg2hf": None}},
    )
    plan = plan_for(tmp_path, own)
    assert plan.step("hf2mg").skipped and (plan.step("mg2hf") is None or plan.step("mg2hf").skipped)
