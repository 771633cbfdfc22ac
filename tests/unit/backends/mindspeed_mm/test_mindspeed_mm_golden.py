"""Golden tests: `cfgs/golden/qwen25-vl-7b-mm-*.yaml` plan what MindSpeed-MM's own Qwen2.5-VL-7B example
runs, in both generations: the torchrun flags and exported variables of
examples/qwen2.5vl/finetune_qwen2_5_vl_7b.sh, the README's `mm-convert Qwen2_5_VLConverter hf_to_mm /
mm_to_hf` commands for the 7B, and the json files (data_7b.json, model_7b.json, mindspeed_mm/tools/tools.json)
the training reads.

Expected values are transcribed from Ascend/MindSpeed-MM at branch 2.1.0 (commit b09d6f14b001) and master
(commit 57069cd55a8a), those files. The experiment is planned from a (stand-in) MindSpeed-MM checkout as the
working directory, so the example's relative paths resolve as MindSpeed-MM resolves them; the script's
placeholders are the plan's own files: ${MM_DATA} etc. are mm_config/*.json, ${SAVE_PATH} saved_checkpoints.
Values compare as numbers where they are numbers (1.0e-5 == 1e-05), flags in the script's order.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment
from tests.conftest import REPO
from tests.unit.backends.flag_pairs import pairs
from tests.unit.backends.mindspeed_mm.mm_helpers import make_mm_checkout

GOLDEN = REPO / "cfgs" / "golden"

# finetune_qwen2_5_vl_7b.sh, 2.1.0: GPT_ARGS, MM_ARGS, OUTPUT_ARGS, the last flag of the torchrun line.
TRAIN_2_1_0 = """
--use-mcore-models --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --context-parallel-size 1
--micro-batch-size 1 --global-batch-size 192 --tokenizer-type NullTokenizer --vocab-size 152064
--seq-length 1024 --make-vocab-size-divisible-by 1 --normalization RMSNorm --use-fused-rmsnorm --swiglu
--use-fused-swiglu --lr 1.0e-5 --lr-decay-style cosine --weight-decay 0 --train-iters 10000
--lr-warmup-fraction 0.1 --clip-grad 0.0 --adam-beta1 0.9 --adam-beta2 0.999 --no-gradient-accumulation-fusion
--seed 42 --bf16 --load ${LOAD_PATH} --variable-seq-lengths --use-distributed-optimizer --no-load-optim
--no-load-rng --no-save-optim --no-save-rng --num-workers 8
--mm-data ${MM_DATA} --mm-model ${MM_MODEL} --mm-tool ${MM_TOOL}
--log-interval 1 --save-interval 10000 --eval-interval 10000 --eval-iters 5000 --save ${SAVE_PATH}
--distributed-backend nccl
"""
# The same script on master: PP 2 (GRAD_ACC_STEP 48, so GBS 1 x 48 x DP 4 = 192 again), Ulysses CP algorithm,
# no masked-softmax fusion, flash attention, a distributed timeout, torch checkpoints and --log-tps.
TRAIN_MASTER = """
--use-mcore-models --tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --context-parallel-size 1
--context-parallel-algo ulysses_cp_algo --micro-batch-size 1 --global-batch-size 192
--tokenizer-type NullTokenizer --vocab-size 152064 --seq-length 1024 --make-vocab-size-divisible-by 1
--normalization RMSNorm --use-fused-rmsnorm --swiglu --use-fused-swiglu --no-masked-softmax-fusion --lr 1.0e-5
--lr-decay-style cosine --weight-decay 0 --train-iters 10000 --lr-warmup-fraction 0.1 --clip-grad 0.0
--adam-beta1 0.9 --adam-beta2 0.999 --seed 42 --bf16 --load ${LOAD_PATH} --use-flash-attn
--variable-seq-lengths --use-distributed-optimizer --no-load-optim --no-load-rng --no-save-optim --no-save-rng
--num-workers 8 --distributed-timeout-minutes 20
--mm-data ${MM_DATA} --mm-model ${MM_MODEL} --mm-tool ${MM_TOOL}
--log-interval 1 --save-interval 10000 --eval-interval 10000 --eval-iters 5000 --save ${SAVE_PATH}
--ckpt-format torch --log-tps
--distributed-backend nccl
"""
DISTRIBUTED_ARGS = "--nproc_per_node 8 --nnodes 1 --node_rank 0 --master_addr localhost --master_port 6000"
# The script's exports (both generations; the toolkit's set_env.sh is sourced by the user, doctor checks it).
ENV = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "ASCEND_SLOG_PRINT_TO_STDOUT": "0",
    "ASCEND_GLOBAL_LOG_LEVEL": "3",
    "TASK_QUEUE_ENABLE": "2",
    "COMBINED_ENABLE": "1",
    "CPU_AFFINITY_CONF": "1",
    "HCCL_CONNECT_TIMEOUT": "1200",
    "NPU_ASD_ENABLE": "0",
    "ASCEND_LAUNCH_BLOCKING": "0",
    "ACLNN_CACHE_LIMIT": "100000",
}
# README (examples/qwen2.5vl/README.md), "# 7b" hf_to_mm and the mm_to_hf example.
HF_TO_MM = """
Qwen2_5_VLConverter hf_to_mm --cfg.mm_dir ckpt/mm_path/Qwen2.5-VL-7B-Instruct
--cfg.hf_config.hf_dir ckpt/hf_path/Qwen2.5-VL-7B-Instruct --cfg.parallel_config.llm_pp_layers ${LLM_NESTED}
--cfg.parallel_config.vit_pp_layers ${VIT_NESTED} --cfg.parallel_config.tp_size 1
"""
MM_TO_HF = """
Qwen2_5_VLConverter mm_to_hf --cfg.save_hf_dir ckpt/mm_to_hf/Qwen2.5-VL-7B-Instruct --cfg.mm_dir ${SAVE_PATH}
--cfg.hf_config.hf_dir ckpt/hf_path/Qwen2.5-VL-7B-Instruct --cfg.parallel_config.llm_pp_layers ${LLM}
--cfg.parallel_config.vit_pp_layers ${VIT} --cfg.parallel_config.tp_size 1
"""
LISTS = {
    "2.1.0": {"LLM": "[1,10,10,7]", "VIT": "[32,0,0,0]"},
    "master": {"LLM": "[12,16]", "VIT": "[32,0]"},
}

# data_7b.json (the same in both generations); ${CHECKOUT}: the example's ./ paths, from the MindSpeed-MM dir.
DATA_7B: dict[str, Any] = {
    "dataset_param": {
        "dataset_type": "huggingface",
        "preprocess_parameters": {
            "model_name_or_path": "${CHECKOUT}/ckpt/hf_path/Qwen2.5-VL-7B-Instruct",
            "use_fast_tokenizer": True,
            "split_special_tokens": False,
            "image_max_pixels": 262144,
            "image_min_pixels": 0,
            "video_max_pixels": 16384,
            "video_min_pixels": 0,
            "video_fps": 2.0,
            "video_maxlen": 64,
        },
        "basic_parameters": {
            "template": "qwen2vl",
            "dataset_dir": "${CHECKOUT}/data",
            "dataset": "${CHECKOUT}/data/mllm_format_llava_instruct_data.json",
            "cache_dir": "${CHECKOUT}/data/cache_dir",
            "train_on_prompt": False,
            "mask_history": False,
            "preprocessing_batch_size": 1000,
            "preprocessing_num_workers": 16,
            "max_samples": None,
            "tool_format": None,
        },
        "attr": {
            "system": None,
            "images": "images",
            "videos": None,
            "messages": "messages",
            "role_tag": "role",
            "content_tag": "content",
            "user_tag": "user",
            "assistant_tag": "assistant",
            "observation_tag": None,
            "function_tag": None,
            "system_tag": None,
        },
    },
    "dataloader_param": {
        "dataloader_mode": "sampler",
        "drop_last": True,
        "sampler_type": "BaseRandomBatchSampler",
        "collate_param": {"model_name": "qwen2vl", "ignore_pad_token_for_loss": True},
        "pin_memory": True,
        "shuffle": True,
    },
}

# model_7b.json at 2.1.0.
MODEL_7B_2_1_0: dict[str, Any] = {
    "model_id": "qwen2_5vl",
    "img_context_token_id": 151655,
    "vision_start_token_id": 151652,
    "image_encoder": {
        "vision_encoder": {
            "model_id": "qwen2vit",
            "num_layers": 32,
            "hidden_size": 1280,
            "ffn_hidden_size": 3420,
            "llm_hidden_size": 3584,
            "gated_linear_unit": True,
            "bias_activation_fusion": True,
            "num_attention_heads": 16,
            "hidden_dropout": 0.0,
            "attention_dropout": 0.0,
            "in_channels": 3,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "layernorm_epsilon": 1e-06,
            "normalization": "RMSNorm",
            "fp16": False,
            "bf16": True,
            "params_dtype": "bf16",
            "activation_func": "silu",
            "freeze": True,
            "use_fused_rotary_pos_emb": True,
            "post_layer_norm": False,
            "pipeline_num_layers": [32, 0, 0, 0],
            "intermediate_size": 3420,
            "tokens_per_second": 2,
            "window_attn_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31],
        },
        "vision_projector": {
            "model_id": "lnmlp",
            "num_layers": 1,
            "num_attention_heads": 1,
            "gated_linear_unit": False,
            "bias_activation_fusion": False,
            "add_bias_linear": True,
            "input_size": 1280,
            "hidden_size": 3584,
            "ffn_hidden_size": 5120,
            "activation_func": "gelu",
            "bf16": True,
            "params_dtype": "bf16",
            "freeze": True,
            "layernorm_epsilon": 1e-06,
            "normalization": "RMSNorm",
        },
    },
    "text_decoder": {
        "model_id": "qwen2_5_lm",
        "num_layers": 28,
        "pipeline_num_layers": [1, 10, 10, 7],
        "hidden_size": 3584,
        "ffn_hidden_size": 18944,
        "num_attention_heads": 28,
        "seq_length": 1024,
        "max_position_embeddings": 128000,
        "vocab_size": 152064,
        "rope_theta": 1000000.0,
        "untie_embeddings_and_output_weights": True,
        "disable_bias_linear": True,
        "attention_dropout": 0.0,
        "init_method_std": 0.01,
        "hidden_dropout": 0.0,
        "position_embedding_type": "mrope",
        "normalization": "RMSNorm",
        "activation_func": "silu",
        "use_fused_rotary_pos_emb": True,
        "attention_softmax_in_fp32": True,
        "params_dtype": "bf16",
        "bf16": True,
        "parallel_output": True,
        "group_query_attention": True,
        "num_query_groups": 4,
        "mrope_section": [16, 24, 24],
        "rope_scaling": None,
        "gated_linear_unit": True,
        "bias_activation_fusion": True,
        "layernorm_epsilon": 1e-06,
        "add_bias_linear": False,
        "add_qkv_bias": True,
    },
    "text_encoder": None,
    "video_encoder": None,
}


def model_7b_master() -> dict[str, Any]:
    """model_7b.json on master: 2.1.0's with the PP=2 lists, the ViT's attention_mask_type, no projector
    heads, and a `patch` section."""
    m = copy.deepcopy(MODEL_7B_2_1_0)
    m["image_encoder"]["vision_encoder"]["pipeline_num_layers"] = [32, 0]
    m["image_encoder"]["vision_encoder"]["attention_mask_type"] = "general"
    del m["image_encoder"]["vision_projector"]["num_attention_heads"]
    m["text_decoder"]["pipeline_num_layers"] = [12, 16]
    m["patch"] = {"bridge_patch": False}
    return m


def tools(generation: str) -> dict[str, Any]:
    """mindspeed_mm/tools/tools.json (master adds analyse_flag and mem_info); ./ paths from the checkout."""
    static = {
        "level": "level1",
        "with_stack": False,
        "with_memory": False,
        "record_shapes": False,
        "with_cpu": True,
        "save_path": "${CHECKOUT}/npu_profiling",
        "start_step": 10,
        "end_step": 11,
        "data_simplification": False,
        "aic_metrics_type": "PipeUtilization",
    }
    memory = {
        "enable": False,
        "start_step": 0,
        "end_step": 2,
        "save_path": "${CHECKOUT}/memory_snapshot",
        "dump_ranks": [0],
        "stacks": "all",
        "max_entries": None,
    }
    if generation == "master":
        static["analyse_flag"] = True
        memory["mem_info"] = False
    return {
        "profile": {
            "enable": False,
            "profile_type": "static",
            "ranks": [0, 1, 2, 3],
            "static_param": static,
            "dynamic_param": {"config_path": "path to dynamic config folder"},
        },
        "memory_profile": memory,
        "sorafeature": {"save_path": "${CHECKOUT}/sora_features"},
    }


# -- helpers ----------------------------------------------------------------------------------------------
def fill(text: str, paths: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: paths[m.group(1)], text)


def absolute(tokens: list[str], base: Path) -> list[str]:
    """The README's relative paths (ckpt/...) as the plan writes them: absolute against the checkout."""
    return [str(base / t) if t.startswith("ckpt/") else t for t in tokens]


def fill_json(doc: Any, checkout: Path) -> Any:
    return json.loads(json.dumps(doc).replace("${CHECKOUT}", str(checkout)))


@pytest.fixture(params=["2.1.0", "master"])
def golden(request, clean_env, tmp_path, monkeypatch):
    """(generation, checkout, plan) of the golden experiment planned from a checkout of that generation."""
    generation = request.param
    checkout = make_mm_checkout(tmp_path / "MindSpeed-MM", generation)
    monkeypatch.setenv("AF_MINDSPEED_MM_DIR", str(checkout))
    monkeypatch.chdir(checkout)
    loaded = load_experiment(GOLDEN / f"qwen25-vl-7b-mm-{generation}.yaml")
    return generation, checkout, make_plan(loaded, dry_run=True, environ=dict(os.environ))


def paths(generation: str, checkout: Path) -> dict[str, str]:
    out = checkout / "output" / "qwen2.5-vl-7b-finetune"
    lists = LISTS[generation]
    return {
        "LOAD_PATH": str(checkout / "ckpt/mm_path/Qwen2.5-VL-7B-Instruct"),
        "SAVE_PATH": str(out / "saved_checkpoints"),
        "MM_DATA": str(out / "mm_config" / "data.json"),
        "MM_MODEL": str(out / "mm_config" / "model.json"),
        "MM_TOOL": str(out / "mm_config" / "tools.json"),
        "LLM": lists["LLM"],
        "VIT": lists["VIT"],
        "LLM_NESTED": f"[{lists['LLM']}]",
        "VIT_NESTED": f"[{lists['VIT']}]",
    }


# -- the tests --------------------------------------------------------------------------------------------
def test_generation_comes_from_the_checkout(golden):
    generation, checkout, plan = golden
    assert plan.facts["generation"] == generation
    assert plan.facts["mindspeed_mm_dir"] == str(checkout)
    assert plan.facts["converter"] == "Qwen2_5_VLConverter"


def test_train_is_the_example_script(golden):
    generation, checkout, plan = golden
    train = plan.step("train")
    argv = train.argv
    entry = argv.index("pretrain_vlm.py")
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert argv[3:entry] == [*DISTRIBUTED_ARGS.split(), "--tee", "3"]
    want = TRAIN_2_1_0 if generation == "2.1.0" else TRAIN_MASTER
    assert pairs(argv[entry + 1 :]) == pairs(shlex.split(fill(want, paths(generation, checkout))))
    assert train.cwd == str(checkout)
    assert train.env == ENV


def test_hf_to_mm_is_the_readme_command(golden):
    generation, checkout, plan = golden
    step = plan.step("hf2mg")
    assert step.argv[1:3] == ["-m", "checkpoint.convert_cli"]  # mm-convert = checkpoint.convert_cli:main
    want = absolute(shlex.split(fill(HF_TO_MM, paths(generation, checkout))), checkout)
    assert step.argv[3:] == want
    assert step.cwd == str(checkout) and step.env == ENV


def test_mm_to_hf_is_the_readme_command_on_the_training_output(golden):
    generation, checkout, plan = golden
    step = plan.step("mg2hf")
    want = absolute(shlex.split(fill(MM_TO_HF, paths(generation, checkout))), checkout)
    assert step.argv[3:] == want


def test_the_json_files_are_the_examples(golden):
    generation, checkout, plan = golden
    p = paths(generation, checkout)
    written = {Path(f).name: json.loads(text) for f, text in plan.files.items() if f.endswith(".json")}
    assert sorted(written) == ["data.json", "model.json", "tools.json"]
    assert {p["MM_DATA"], p["MM_MODEL"], p["MM_TOOL"]} <= set(plan.files)
    assert written["data.json"] == fill_json(DATA_7B, checkout)
    assert written["model.json"] == (MODEL_7B_2_1_0 if generation == "2.1.0" else model_7b_master())
    assert written["tools.json"] == fill_json(tools(generation), checkout)


def test_output_tree_and_summary_spec(golden):
    generation, checkout, plan = golden
    out = checkout / "output" / "qwen2.5-vl-7b-finetune"
    assert plan.checkpoints is not None and plan.checkpoints.root == str(out / "saved_checkpoints")
    assert plan.step("mg2hf").outputs == [str(checkout / "ckpt/mm_to_hf/Qwen2.5-VL-7B-Instruct")]
    assert plan.step("plot").outputs == [str(out / "training_loss.png")]
    assert str(out / "exp-config.yaml") in plan.files
    assert plan.logs.format == "megatron" and plan.logs.loss_rank == "last"
    assert plan.logs.loss_keys == ("loss",) and plan.logs.throughput.formula == "mindspeed_mm"
    assert plan.logs.naming.run_log == "run_log-N{nnodes}-{rank}"
    assert plan.logs.naming.device_info == "npu_info-R{rank}"
    assert plan.step("preprocess").skipped
