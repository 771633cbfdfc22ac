"""mindspeed-mm pre-flight checks, table-driven: each row changes the base experiment and names the key and
the message it must produce (dry runs: no checkout here, generation 2.1.0 unless a row says master)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.backends.mindspeed_mm.mm_helpers import (
    QWEN25_VL_7B,
    make_hf_dir,
    plan_for,
    problems_of,
    real_site,
)

T = "backend_config.training."
D = "backend_config.data.dataset_param."
M = "backend_config.model."
H = "backend_config.convert_ckpt_hf2mg.cfg."
G = "backend_config.convert_ckpt_mg2hf.cfg."
LLM = "text_decoder.pipeline_num_layers"
VIT = "image_encoder.vision_encoder.pipeline_num_layers"


def model(vit: list[int] | None = None, llm: list[int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if vit is not None:
        out["image_encoder"] = {"vision_encoder": {"pipeline_num_layers": vit}}
    if llm is not None:
        out["text_decoder"] = {"pipeline_num_layers": llm}
    return {"backend_config": {"model": out}}


def training(**flags: Any) -> dict[str, Any]:
    return {"backend_config": {"training": {k.replace("_", "-"): v for k, v in flags.items()}}}


def section(name: str, value: Any) -> dict[str, Any]:
    return {"backend_config": {name: value}}


def data(**sections: Any) -> dict[str, Any]:
    return {"backend_config": {"data": {"dataset_param": sections}}}


# Qwen2.5-VL-7B facts here: 28 LLM layers, 28 heads, 4 KV groups; ViT 32 layers, 16 heads (catalog).
ROWS: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "world size vs TP*PP*CP",
        {"env": {"NPUS_PER_NODE": 6}},
        T + "tensor-model-parallel-size",
        "world size (6) is not divisible by tensor parallel size (1) times pipeline parallel size (4) times "
        "context parallel size (1)",
    ),
    (
        "GBS vs MBS*DP",
        training(global_batch_size=101),
        T + "global-batch-size",
        "global batch size (101) is not divisible by micro batch size (1) times data parallel size (2) "
        "[micro-batch-size x world / (TP x PP x CP) = 2] | "
        "nearest valid: 100 or 102",
    ),
    (
        "TP vs LLM heads",
        {"env": {"NPUS_PER_NODE": 32}, **training(tensor_model_parallel_size=8, global_batch_size=16)},
        T + "tensor-model-parallel-size",
        "num_attention_heads (28, model.json text_decoder.num_attention_heads) must be a multiple of "
        "tensor_model_parallel_size (8) | TP values that divide the LLM heads, KV groups and ViT heads here: "
        "1, 2, 4",
    ),
    (
        "TP vs KV groups",
        {"env": {"NPUS_PER_NODE": 32}, **training(tensor_model_parallel_size=8, global_batch_size=16)},
        T + "tensor-model-parallel-size",
        "num_query_groups (4, model.json text_decoder.num_query_groups) must be a multiple of "
        "tensor_model_parallel_size (8)",
    ),
    (
        "LLM list length vs PP",
        model(llm=[12, 16]),
        M + LLM,
        "length of pipeline_num_layers must equal to pipeline-model-parallel-size, but got "
        "pipeline_num_layers length:2 and pipeline-model-parallel-size:4",
    ),
    (
        "ViT list length vs PP",
        model(vit=[32, 0]),
        M + VIT,
        "length of pipeline_num_layers must equal to pipeline-model-parallel-size, but got "
        "pipeline_num_layers length:2 and pipeline-model-parallel-size:4",
    ),
    (
        "LLM list sum vs the HF layer count",
        model(llm=[1, 10, 10, 6]),
        M + LLM,
        "sums to 27 ([1, 10, 10, 6]), but the model has 28 layers (catalog); MindSpeed-MM does not check "
        "this",
    ),
    (
        "ViT list sum vs the HF vision depth",
        model(vit=[31, 0, 0, 0]),
        M + VIT,
        "sums to 31 ([31, 0, 0, 0]), but the model has 32 layers (catalog)",
    ),
    (
        "ViT layers before LLM layers",
        model(vit=[30, 2, 0, 0]),
        M + VIT,
        "stage 1 holds ViT layers after stage 0 started the LLM ([30, 2, 0, 0] with [1, 10, 10, 7]); every "
        "ViT layer must come before the first LLM layer",
    ),
    (
        "a stage of frozen layers only",
        model(llm=[0, 10, 10, 8]),
        M + LLM,
        "pipeline stage(s) 0 hold no trainable layer (ViT [32, 0, 0, 0], LLM [0, 10, 10, 8]; the ViT is "
        "frozen)"
        ": such a stage has no gradients | give every stage LLM layers, or add "
        "backend_config.training.enable-dummy-optimizer: true",
    ),
    (
        "an empty stage",
        model(llm=[10, 10, 8, 0]),
        M + LLM,
        "pipeline stage(s) 3 hold no trainable layer",
    ),
    (
        "pipeline list not flat (virtual pipeline)",
        model(llm=[[1, 10, 10, 7]]),
        M + LLM,
        "must be a flat list of non-negative layer counts, one per pipeline stage (got [[1, 10, 10, 7]])",
    ),
    (
        "hf_to_mm lists vs the training's",
        section("convert_ckpt_hf2mg", {"cfg": {"parallel_config": {"llm_pp_layers": [2, 9, 10, 7]}}}),
        H + "parallel_config.llm_pp_layers",
        "is [2, 9, 10, 7], but the training splits the layers as [1, 10, 10, 7] (backend_config.model "
        "pipeline_num_layers); mm-convert does not check this",
    ),
    (
        "hf_to_mm nested lists vs the training's",
        section(
            "convert_ckpt_hf2mg", {"cfg": {"parallel_config": {"vit_pp_layers": [[32, 0, 0, 0], [0, 0]]}}}
        ),
        H + "parallel_config.vit_pp_layers",
        "has 2 virtual-pipeline chunks; this backend plans no virtual pipeline",
    ),
    (
        "mm_to_hf tp_size vs the training's TP",
        section("convert_ckpt_mg2hf", {"cfg": {"parallel_config": {"tp_size": 2}}}),
        G + "parallel_config.tp_size",
        "is 2, but the training runs with tensor-model-parallel-size 1; mm-convert does not check this",
    ),
    (
        "mm-convert option that does not exist",
        section("convert_ckpt_hf2mg", {"cfg": {"parallel_config": {"tp": 1}}}),
        H + "parallel_config.tp",
        "is not an option of mm-convert Qwen2_5_VLConverter hf_to_mm in MindSpeed-MM 2.1.0 (your key) "
        "(did you "
        "mean: cfg.parallel_config.tp_size",
    ),
    (
        "mm-convert option of master only",
        section("convert_ckpt_hf2mg", {"cfg": {"common_model_config": {"enable_canonical_hf_struct": True}}}),
        H + "common_model_config.enable_canonical_hf_struct",
        "is not an option of mm-convert Qwen2_5_VLConverter hf_to_mm in MindSpeed-MM 2.1.0",
    ),
    (
        "hf_to_mm and mm_to_hf on different weight layouts (master)",
        {
            **model([32, 0], [12, 16]),
            "backend_config": {
                **model([32, 0], [12, 16])["backend_config"],
                "generation": "master",
                "training": {"pipeline-model-parallel-size": 2},
                "convert_ckpt_hf2mg": {"cfg": {"common_model_config": {"enable_canonical_hf_struct": True}}},
            },
        },
        G + "common_model_config.enable_canonical_hf_struct",
        "is False, but hf_to_mm converts with True: the final conversion must read the layout",
    ),
    (
        "mm-convert options outside cfg",
        section("convert_ckpt_hf2mg", {"mm_dir": "/x"}),
        "backend_config.convert_ckpt_hf2mg.mm_dir",
        "mm-convert options go under cfg | write backend_config.convert_ckpt_hf2mg.cfg.mm_dir",
    ),
    (
        "cutoff_len",
        data(basic_parameters={"cutoff_len": 2048}),
        D + "basic_parameters.cutoff_len",
        "is rejected by MindSpeed-MM: '`cutoff_len` is deprecated, please use `seq_length` instead.' | "
        "remove "
        "it; the cutoff is backend_config.training.seq-length",
    ),
    (
        "a DataArguments key that does not exist",
        data(basic_parameters={"datasets": "x.json"}),
        D + "basic_parameters.datasets",
        "is not a field of dataset_param.basic_parameters in MindSpeed-MM 2.1.0 (a TypeError at start-up) "
        "(did you mean: dataset",
    ),
    (
        "a DataArguments key of master only",
        data(basic_parameters={"enable_thinking": True}),
        D + "basic_parameters.enable_thinking",
        "is not a field of dataset_param.basic_parameters in MindSpeed-MM 2.1.0",
    ),
    (
        "a ProcessorArguments key that does not exist",
        data(preprocess_parameters={"image_max_pixel": 1}),
        D + "preprocess_parameters.image_max_pixel",
        "(did you mean: image_max_pixels",
    ),
    (
        "a DatasetAttr key that does not exist",
        data(attr={"image": "images"}),
        D + "attr.image",
        "is not a field of dataset_param.attr",
    ),
    (
        "a dataloader keyword that does not exist",
        {"backend_config": {"data": {"dataloader_param": {"shufle": True}}}},
        "backend_config.data.dataloader_param.shufle",
        "(did you mean: shuffle",
    ),
    (
        "a required data.json section removed",
        data(dataset_type=None),
        D + "dataset_type",
        "is missing: MindSpeed-MM stops with 'Key parameter missing: dataset_type'",
    ),
    (
        "a training flag that does not exist",
        training(use_fused_rmsnorms=True),
        T + "use-fused-rmsnorms",
        "not an argument of pretrain_vlm.py in MindSpeed-MM 2.1.0 (did you mean: use-fused-rmsnorm",
    ),
    (
        "a training flag of master only",
        {"backend_config": {"training": {"ckpt-format": "torch"}}},
        T + "ckpt-format",
        "not an argument of pretrain_vlm.py in MindSpeed-MM 2.1.0",
    ),
    (
        "a flag the plan writes",
        {"backend_config": {"training": {"mm-data": "x.json"}}},
        T + "mm-data",
        "is written by the plan: mm_config/data.json from backend_config.data",
    ),
    (
        "MindSpeed-MM's rejected VPP flag",
        {"backend_config": {"training": {"num-layers-per-virtual-pipeline-stage": 2}}},
        T + "num-layers-per-virtual-pipeline-stage",
        "MindSpeed-MM Error: --num-layers-per-virtual-pipeline-stage is deprecated, please use "
        "--virtual-pipeline-model-parallel-size instead",
    ),
    (
        "save elsewhere",
        training(save="/elsewhere"),
        T + "save",
        "training saves into",
    ),
    (
        "a size below 1",
        training(micro_batch_size=0),
        T + "micro-batch-size",
        "must be an integer >= 1 (got 0)",
    ),
    (
        "model.json against the weights",
        {"backend_config": {"model": {"text_decoder": {"num_layers": 30}}}},
        M + "text_decoder.num_layers",
        "is 30, but the weights have 28 (catalog) | remove backend_config.model.text_decoder.num_layers",
    ),
    (
        "an unknown backend_config section",
        section("preprocess_data", {"input": "x"}),
        "backend_config.preprocess_data",
        "unknown section | sections are: data, model, tool, training, convert_ckpt_hf2mg, "
        "convert_ckpt_mg2hf, "
        "generation",
    ),
    (
        "a generation that does not exist",
        section("generation", "2.0"),
        "backend_config.generation",
        "'2.0' is not a MindSpeed-MM generation | use 2.1.0 (MindSpeed-MM 2.1.0 and older) or master",
    ),
    (
        "CUDA_DEVICE_MAX_CONNECTIONS with TP",
        {
            "env": {"NPUS_PER_NODE": 8, "CUDA_DEVICE_MAX_CONNECTIONS": 8},
            **training(tensor_model_parallel_size=2, pipeline_model_parallel_size=4),
        },
        "env.CUDA_DEVICE_MAX_CONNECTIONS",
        "is 8, but TP=2 / CP=1 needs 1 | remove env.CUDA_DEVICE_MAX_CONNECTIONS",
    ),
    (
        "a stage that is not sft",
        {"stage": "pt"},
        "stage",
        "'pt' is not a stage of backend mindspeed-mm | use one of: sft",
    ),
    (
        "the HF directory is missing",
        {
            "backend_config": {
                "data": {"dataset_param": {"preprocess_parameters": {"model_name_or_path": None}}}
            }
        },
        D + "preprocess_parameters.model_name_or_path",
        "required: the HF model directory",
    ),
    (
        "convert_ckpt_hf2mg: null",
        section("convert_ckpt_hf2mg", None),
        "backend_config.convert_ckpt_hf2mg",
        "cannot be null: the training loads the converted weights | to use weights converted elsewhere set "
        "user_converted_ckpt_path",
    ),
    (
        "hf_to_mm into the HF directory",
        section("convert_ckpt_hf2mg", {"cfg": {"mm_dir": "HF"}}),
        H + "mm_dir",
        "HF: mm-convert would write into the original weights",
    ),
    (
        "an mm_dir that is not a path",
        section("convert_ckpt_hf2mg", {"cfg": {"mm_dir": 5}}),
        H + "mm_dir",
        "5 is not a path | give a directory path as text",
    ),
    (
        "an hf_dir that is a list",
        section("convert_ckpt_mg2hf", {"cfg": {"hf_config": {"hf_dir": [1]}}}),
        G + "hf_config.hf_dir",
        "[1] is not a path",
    ),
    (
        "mm_to_hf into the HF directory",
        {"hf_save_dir": "HF"},
        G + "save_hf_dir",
        "HF: mm-convert would write into the original weights",
    ),
    (
        "processed_data_dir",
        {"processed_data_dir": "/data/x"},
        "processed_data_dir",
        "MindSpeed-MM reads no preprocessed data: it tokenizes the dataset at start-up",
    ),
    (
        "a model without a MindSpeed-MM example",
        {"af_model_name": "qwen2.5-7b"},
        "af_model_name",
        "'qwen2.5-7b' has no MindSpeed-MM example in generation 2.1.0 | use one of: qwen2.5-vl-3b, "
        "qwen2.5-vl-7b, qwen2.5-vl-32b, qwen2.5-vl-72b",
    ),
]


@pytest.mark.parametrize("changes, key, fragment", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_each_check_names_the_key_and_the_numbers(clean_env, tmp_path, changes, key, fragment):
    found = problems_of(tmp_path, changes)
    assert any(k == key and fragment in text for k, text in found), found


def test_the_base_experiment_plans(clean_env, tmp_path):
    plan = plan_for(tmp_path)
    assert [s.name for s in plan.steps] == ["preprocess", "hf2mg", "train", "mg2hf", "plot"]


def test_dummy_optimizer_allows_a_frozen_stage(clean_env, tmp_path):
    changes = model(llm=[0, 10, 10, 8])
    changes["backend_config"]["training"] = {"enable-dummy-optimizer": True}
    plan = plan_for(tmp_path, changes)
    assert "--enable-dummy-optimizer" in plan.step("train").argv


@pytest.mark.parametrize(
    "changes",
    [
        data(basic_parameters={"enable_thinking": True}),
        {"backend_config": {"training": {"ckpt-format": "torch"}}},
        {
            "backend_config": {
                name: {"cfg": {"common_model_config": {"enable_canonical_hf_struct": True}}}
                for name in ("convert_ckpt_hf2mg", "convert_ckpt_mg2hf")
            }
        },
    ],
    ids=["DataArguments.enable_thinking", "--ckpt-format", "enable_canonical_hf_struct"],
)
def test_master_accepts_its_own_keys(clean_env, tmp_path, changes):
    changes = {**changes, "backend_config": {**changes["backend_config"], "generation": "master"}}
    changes["backend_config"]["model"] = model([32, 0], [12, 16])["backend_config"]["model"]
    changes["backend_config"]["training"] = {
        **changes["backend_config"].get("training", {}),
        "pipeline-model-parallel-size": 2,
    }
    plan = plan_for(tmp_path, changes)
    assert plan.facts["generation"] == "master"


def test_vit_heads_are_checked_against_tp(clean_env, tmp_path):
    """A model whose ViT heads (12) are the only thing TP=8 does not divide."""
    config = {**QWEN25_VL_7B, "num_attention_heads": 32, "num_key_value_heads": 8}
    config["vision_config"] = {**config["vision_config"], "num_heads": 12}
    make_hf_dir(tmp_path / "HF", config)
    changes = {
        "env": {"NPUS_PER_NODE": 32},
        "backend_config": {
            "training": {"tensor-model-parallel-size": 8, "pipeline-model-parallel-size": 4},
            "model": {
                "text_decoder": {"num_attention_heads": 32, "num_query_groups": 8},
                "image_encoder": {"vision_encoder": {"num_attention_heads": 12}},
            },
        },
    }
    found = problems_of(tmp_path, changes)
    assert [text.split(" | ")[0] for _, text in found] == [
        "vision num_attention_heads (12, model.json image_encoder.vision_encoder.num_attention_heads) must "
        "be "
        "a multiple of tensor_model_parallel_size (8)"
    ]


def test_every_problem_is_reported_at_once(clean_env, tmp_path):
    changes = {
        "env": {"NPUS_PER_NODE": 6},
        "backend_config": {
            "model": {"text_decoder": {"pipeline_num_layers": [1, 10, 10, 6]}},
            "data": {"dataset_param": {"basic_parameters": {"cutoff_len": 1}}},
            "training": {"use-fused-rmsnorms": True},
            "convert_ckpt_mg2hf": {"cfg": {"parallel_config": {"tp_size": 2}}},
        },
    }
    keys = {k for k, _ in problems_of(tmp_path, changes)}
    assert {
        T + "tensor-model-parallel-size",
        M + LLM,
        D + "basic_parameters.cutoff_len",
        T + "use-fused-rmsnorms",
        G + "parallel_config.tp_size",
    } <= keys


# -- real runs: the files and the machine ------------------------------------------------------------------
REAL_ROWS: list[tuple[str, Any, str, str]] = [
    (
        "no config.json",
        lambda p: (p / "HF" / "config.json").unlink(),
        D + "preprocess_parameters.model_name_or_path",
        "No config.json in",
    ),
    (
        "no weights",
        lambda p: (p / "HF" / "model-00001-of-00001.safetensors").unlink(),
        D + "preprocess_parameters.model_name_or_path",
        "No *.safetensors files found in",
    ),
    (
        "no index (mm_to_hf needs it)",
        lambda p: (p / "HF" / "model.safetensors.index.json").unlink(),
        D + "preprocess_parameters.model_name_or_path",
        "no model.safetensors.index.json in",
    ),
    (
        "the converted directory given as the HF one",
        lambda p: (p / "HF" / "latest_checkpointed_iteration.txt").write_text("release"),
        D + "preprocess_parameters.model_name_or_path",
        "is a converted MindSpeed-MM checkpoint (latest_checkpointed_iteration.txt / release/), not the HF "
        "model",
    ),
    (
        "no dataset file",
        lambda p: (p / "DATA" / "train.json").unlink(),
        D + "basic_parameters.dataset",
        "train.json does not exist",
    ),
    (
        "no MindSpeed-MM checkout",
        lambda p: (p / "MindSpeed-MM" / "pretrain_vlm.py").unlink(),
        "scripts_dir",
        "is not a MindSpeed-MM directory: pretrain_vlm.py missing",
    ),
    (
        "megatron/ of the other generation",
        lambda p: (p / "MindSpeed-MM" / "megatron" / "core" / "package_info.py").write_text(
            "MAJOR = 0\nMINOR = 12\n"
        ),
        "scripts_dir",
        "megatron is Megatron-LM core 0.12, but MindSpeed-MM 2.1.0 runs on core 0.8",
    ),
]


@pytest.mark.parametrize("damage, key, fragment", [r[1:] for r in REAL_ROWS], ids=[r[0] for r in REAL_ROWS])
def test_a_real_run_checks_its_inputs(clean_env, tmp_path, monkeypatch, damage, key, fragment):
    environ = real_site(tmp_path, monkeypatch)
    plan_for(tmp_path, dry_run=False, environ=environ)  # complete: plans
    damage(tmp_path)
    found = problems_of(tmp_path, {}, dry_run=False, environ=environ)
    assert any(k == key and fragment in text for k, text in found), found


def test_a_real_run_needs_the_toolkit_sourced(clean_env, tmp_path, monkeypatch):
    environ = real_site(tmp_path, monkeypatch)
    environ.pop("ASCEND_TOOLKIT_HOME")
    found = problems_of(tmp_path, {}, dry_run=False, environ=environ)
    assert [k for k, _ in found] == ["(environment)"]
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in found[0][1]


def test_a_dry_run_warns_about_what_a_real_run_refuses(clean_env, tmp_path):
    plan = plan_for(tmp_path)
    text = "\n".join(plan.warnings)
    assert "no MindSpeed-MM checkout found: assuming generation 2.1.0" in text
    assert "Ascend toolkit" in text and "does not exist" in text


def test_explicit_generation_must_match_the_checkout(clean_env, tmp_path, monkeypatch):
    environ = real_site(tmp_path, monkeypatch, generation="2.1.0")
    found = problems_of(tmp_path, section("generation", "master"), dry_run=False, environ=environ)
    assert any(
        k == "backend_config.generation" and "is master, but" in t and "is a 2.1.0 checkout" in t
        for k, t in found
    ), found


def test_an_llm_without_a_vision_encoder_stops_there(clean_env, tmp_path):
    config = {k: v for k, v in QWEN25_VL_7B.items() if k != "vision_config"} | {"model_type": "qwen2"}
    make_hf_dir(tmp_path / "HF", config)
    found = problems_of(tmp_path, {})
    assert [k for k, _ in found] == ["af_model_name"]
    assert "config.json: no vision encoder (vision_config) in the model facts" in found[0][1]


def test_a_complete_conversion_in_mm_dir_is_not_redone(clean_env, tmp_path):
    """Converted weights kept outside the output tree (AscendFactory's ckpts/mm_path/...) are reused."""
    mm_dir = tmp_path / "ckpts" / "converted_weight_TP1PP4"
    changes = section("convert_ckpt_hf2mg", {"cfg": {"mm_dir": str(mm_dir)}})
    assert not plan_for(tmp_path, changes).step("hf2mg").skipped
    (mm_dir / "release").mkdir(parents=True)
    (mm_dir / "latest_checkpointed_iteration.txt").write_text("release")
    for p in range(4):
        shard = mm_dir / "release" / f"mp_rank_00_{p:03d}"
        shard.mkdir()
        (shard / "model_optim_rng.pt").write_bytes(b"")
        if p < 3:
            assert not plan_for(tmp_path, changes).step("hf2mg").skipped  # incomplete: converted again
    plan = plan_for(tmp_path, changes)
    assert (
        plan.step("hf2mg").skip_reason == f"{mm_dir} already holds the TP1 PP4 conversion (release, 4 shards)"
    )
    assert f"--load {mm_dir}" in plan.step("train").command_line()


def test_top_level_model_and_dataset_keys_fill_data_json(clean_env, tmp_path):
    """The 6.5.90x keys model_name_or_path and dataset, when `data` does not set them."""
    changes = {
        "model_name_or_path": str(tmp_path / "HF2"),
        "dataset": "d1.json,d2.json",
        "backend_config": {
            "data": {
                "dataset_param": {
                    "preprocess_parameters": {"model_name_or_path": None},
                    "basic_parameters": {"dataset": None},
                }
            }
        },
    }
    plan = plan_for(tmp_path, changes)
    data = json.loads(next(t for p, t in plan.files.items() if p.endswith("data.json")))
    assert data["dataset_param"]["preprocess_parameters"]["model_name_or_path"] == str(tmp_path / "HF2")
    assert (
        data["dataset_param"]["basic_parameters"]["dataset"]
        == f"{Path.cwd() / 'd1.json'},{Path.cwd() / 'd2.json'}"
    )


def test_auto_resume_continues_saved_checkpoints_and_says_what_it_restarts(clean_env, tmp_path):
    """The Megatron load rule: a complete checkpoint in saved_checkpoints wins; the example's
    --no-save-optim --no-save-rng mean a resume restarts the optimizer and RNG, which the plan says."""
    plan = plan_for(tmp_path)
    saved = plan.checkpoints.root
    for stage in range(4):  # the example's PP 4
        shard = os.path.join(saved, "iter_0000050", f"mp_rank_00_{stage:03d}")
        os.makedirs(shard)
        open(os.path.join(shard, "model_optim_rng.pt"), "wb").close()
    with open(os.path.join(saved, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("50")
    assert f"--load {saved}" not in plan_for(tmp_path).step("train").command_line()  # not asked to resume
    plan = plan_for(tmp_path, {"train_auto_resume": True})
    line = plan.step("train").command_line()
    assert f"--load {saved}" in line and "--no-load-optim" in line and "--no-load-rng" in line
    assert plan.step("hf2mg").skipped
    assert any("a resume restarts it" in w and "optimizer / RNG" in w for w in plan.warnings)
    saving = section("training", {"no-save-optim": False, "no-save-rng": False})
    plan = plan_for(tmp_path, {"train_auto_resume": True, **saving})
    line = plan.step("train").command_line()
    assert "--no-load-optim" not in line and not any("a resume restarts it" in w for w in plan.warnings)


# Found by benchmarks/diff_validate.py --backend mindspeed-mm: MindSpeed-MM 2.1.0 refused these, we accepted.
@pytest.mark.parametrize(
    "flags, key, fragment",
    [
        ({"seq-length": "abc"}, "seq-length", "'abc' is not an integer (pretrain_vlm.py's argparse, "),
        ({"optimizer": [1, 2]}, "optimizer", "is a list, but the flag takes"),
        ({"bert-embedder-type": "x"}, "bert-embedder-type", "'x' is not one of its choices"),
        ({"use-legacy-models": "yes"}, "use-legacy-models", "but --flag takes no value"),
        # flags MindSpeed (077c4137) adds: their values come from keys/training_2.1.0.txt too
        ({"auto-tuning": 1}, "auto-tuning", "but --flag takes no value"),
        ({"profile-stage": "abc"}, "profile-stage", "'abc' is not an integer"),
    ],
)
def test_a_flag_value_argparse_refuses_is_refused(clean_env, tmp_path, flags, key, fragment):
    found = problems_of(tmp_path, {"backend_config": {"training": flags}})
    assert any(k == T + key and fragment in text for k, text in found), found


@pytest.mark.parametrize(
    "flags, key",
    [({"lr": -1.0}, "lr"), ({"min-lr": 1.0e-3}, "min-lr"), ({"lr": 1.0e-6, "min-lr": 1.0e-5}, "min-lr")],
)
def test_min_lr_above_lr_is_refused_as_mindspeed_mm_does(clean_env, tmp_path, flags, key):
    found = problems_of(tmp_path, {"backend_config": {"training": flags}})
    assert any(k == T + key and "args.min_lr should <= args.lr" in text for k, text in found), found


def test_min_lr_at_or_below_lr_plans(clean_env, tmp_path):
    plan_for(tmp_path, {"backend_config": {"training": {"lr": 1.0e-5, "min-lr": 1.0e-5}}})
    plan_for(tmp_path, {"backend_config": {"training": {"min-lr": 0.0, "lr": False}}})


@pytest.mark.parametrize(
    "flags, key, fragment",
    [
        ({"model-parallel-size": 1}, "model-parallel-size", "--model-parallel-size is no longer valid"),
        ({"batch-size": 1}, "batch-size", "--batch-size argument is no longer valid"),
        ({"rampup-batch-size": [1, 1, 10]}, "rampup-batch-size", "no batch-size rampup for iteration-based"),
        ({"train-samples": 100}, "train-samples", "expected iteration-based training"),
        ({"expert-model-parallel-size": 2}, "expert-model-parallel-size", "num_experts must be non None"),
    ],
)
def test_mindspeed_mm_validate_args_rules_on_flags(clean_env, tmp_path, flags, key, fragment):
    found = problems_of(tmp_path, {"backend_config": {"training": flags}})
    assert any(k == T + key and fragment in text for k, text in found), found


@pytest.mark.parametrize(
    "flags, key, fragment",
    [
        ({"moe-train-capacity-factor": 0}, "moe-train-capacity-factor", "must be greater than 0.0"),
        ({"moe-tp-extend-ep": True}, "moe-tp-extend-ep", "the model has no experts"),
        ({"distribute-saved-activations": True}, "distribute-saved-activations", "above 1 (it is"),
        (
            {
                "distribute-saved-activations": True,
                "recompute-granularity": "selective",
                "tensor-model-parallel-size": 2,
            },
            "distribute-saved-activations",
            "recompute-granularity: full",
        ),
    ],
)
def test_mindspeed_and_megatron_wrapper_rules_found_by_the_harness(clean_env, tmp_path, flags, key, fragment):
    """MindSpeed's validate_args_wrapper and Megatron's validate_args refuse these (the differential
    harness found them accepted by us)."""
    found = problems_of(tmp_path, {"backend_config": {"training": flags}})
    assert any(k == T + key and fragment in text for k, text in found), found


def test_a_positive_capacity_factor_plans(clean_env, tmp_path):
    plan_for(tmp_path, {"backend_config": {"training": {"moe-train-capacity-factor": 1.5}}})


def test_a_deprecated_flag_given_false_is_omitted_and_plans(clean_env, tmp_path):
    plan_for(tmp_path, {"backend_config": {"training": {"model-parallel-size": False, "batch-size": None}}})


@pytest.mark.parametrize(
    "flags, key",
    [
        ({"start-weight-decay": 0.1}, "start-weight-decay"),
        ({"weight-decay-incr-style": "linear", "start-weight-decay": 0.1}, "weight-decay-incr-style"),
    ],
)
def test_weight_decay_bounds_follow_the_style(clean_env, tmp_path, flags, key):
    found = problems_of(tmp_path, {"backend_config": {"training": flags}})
    assert any(k == T + key and "weight_decay_incr_style" in text for k, text in found), found


def test_a_linear_weight_decay_with_both_bounds_plans(clean_env, tmp_path):
    both = {"weight-decay-incr-style": "linear", "start-weight-decay": 0.0, "end-weight-decay": 0.1}
    plan_for(tmp_path, {"backend_config": {"training": both}})


def test_a_refused_global_batch_is_not_checked_again_as_the_fallback(clean_env, tmp_path):
    found = problems_of(tmp_path, {"backend_config": {"training": {"global-batch-size": "8"}}})
    assert any(k == T + "global-batch-size" for k, _ in found), found
    assert not any("global batch size (1)" in text for _, text in found), found
