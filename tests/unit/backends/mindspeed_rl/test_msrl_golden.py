"""Golden tests: MindSpeed-RL's own Qwen2.5-7B GRPO example, planned by the mindspeed-rl backend.

Expected values are transcribed from Ascend/MindSpeed-RL (master 05a90d77cb6c, and 2.1.0 d9e8db94dce3 where
it differs): `configs/grpo_qwen25_7b_A3.yaml`, `configs/model/qwen25_7b.yaml`,
`configs/datasets/deepscaler.yaml`, `examples/grpo/grpo_trainer_qwen25_7b.sh`; and from Ascend/MindSpeed-LLM
a2c0733b9c86 (the commit MindSpeed-RL 2.3.0 and master pin):
`examples/mcore/qwen25/ckpt_convert_qwen25_{hf2mcore,mcore2hf}.sh`. Relative paths of the examples
(`./Qwen2.5-7B`, `./dataset/...`, `./ckpt`) become the plan's absolute ones; `load`/`save` are the plan's
converted weights and saved_checkpoints.
"""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from msrl_helpers import experiment

from ascendfactory.backends.common.mindspeed_rl_experiment.read import load_yaml
from ascendfactory.backends.planner import make_plan
from ascendfactory.config.load import load_experiment

# configs/grpo_qwen25_7b_A3.yaml (master 05a90d77), its `defaults: - model: [qwen25_7b]` aside.
A3 = yaml.safe_load(
    """
megatron_training:
  model: qwen25_7b
  use_fused_rmsnorm: true
  use_mcore_models: true
  sequence_parallel: true
  use_flash_attn: true
  no_masked_softmax_fusion: true
  attention_softmax_in_fp32: true
  no_gradient_accumulation_fusion: true
  use_fused_swiglu: true
  use_fused_rotary_pos_emb: true
  bf16: true
  use_distributed_optimizer: true
  tokenizer_type: PretrainedFromHF
  tokenizer_name_or_path: ./Qwen2.5-7B
  global_batch_size: 32
  seq_length: 2048
  save_interval: 100
  train_iters: 500
  stage: ray_grpo
  attention_dropout: 0.0
  init_method_std: 0.01
  hidden_dropout: 0.0
  distributed_backend: nccl
  no_shared_storage: true
  dataset_additional_keys: ['labels',]
  data_path: ./dataset/deepscaler/data
  split: 100,0,0
  no_shuffle: false
  full_shuffle_instruction_dataset: false
  seed: 1
  reuse_fp32_param: false
actor_config:
  model: qwen25_7b
  micro_batch_size: 4
  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 2
  lr: 1.0e-6
  lr_decay_style: constant
  min_lr: 0
  weight_decay: 0.01
  lr_warmup_fraction: 0.0
  clip_grad: 1.0
  adam_beta1: 0.9
  adam_beta2: 0.95
  finetune: true
  load: ./ckpt
  save: ./ckpt
  no_load_optim: true
  no_load_rng: true
rl_config:
  guarantee_order: false
  use_integrated_worker: true
  blocking: true
  gamma: 1.0
  lam: 0.95
  actor_forward_micro_batch_size: 4
  ref_forward_micro_batch_size: 4
  adv_estimator: group_norm
  kl_penalty: low_var_kl
  kl_ctrl_type: fixed
  init_kl_coef: 0.001
  mini_batch_size: 32
  max_prompt_length: 2048
  epochs: 1
  clip_ratio: 0.2
  entropy_coeff: 0.0
  shuffle_mini_batch: false
  n_samples_per_prompt: 8
  rule_reward: true
  verifier_function: ["math_17k_acc"]
  verifier_weight: [1.0]
  log_max_throughput: false
  num_cpus_for_local_task: 1.0
  use_tensorboard: true
  actor_resource:
    num_npus: 16
generate_config:
  trust_remote_code: true
  offload_train_optimizer: true
  offload_train_grad: true
  offload_train_param: true
  infer_tensor_parallel_size: 1
  infer_pipeline_parallel_size: 1
  infer_expert_parallel_size: 1
  max_num_seqs: 1024
  max_model_len: 4096
  max_num_batched_tokens: 8192
  dtype: "bfloat16"
  gpu_memory_utilization: 0.4
  sampling_config:
    logprobs: 1
    max_tokens: 2048
    top_p: 1.0
    top_k: -1
    min_p: 0.0
    temperature: 1.0
    detokenize: false
"""
)
# configs/model/qwen25_7b.yaml (master 05a90d77; the same keys and values on 2.1.0)
QWEN25_7B = {
    "use_mcore_models": True,
    "num_layers": 28,
    "hidden_size": 3584,
    "ffn_hidden_size": 18944,
    "num_attention_heads": 28,
    "rotary_base": 1000000,
    "max_position_embeddings": 32768,
    "make_vocab_size_divisible_by": 1,
    "padded_vocab_size": 152064,
    "untie_embeddings_and_output_weights": True,
    "add_qkv_bias": True,
    "disable_bias_linear": True,
    "group_query_attention": True,
    "num_query_groups": 4,
    "position_embedding_type": "rope",
    "norm_epsilon": 1e-6,
    "normalization": "RMSNorm",
    "swiglu": True,
    "attention_softmax_in_fp32": True,
}
# configs/datasets/deepscaler.yaml (master 05a90d77)
DEEPSCALER = {
    "input": "./dataset/deepscaler.json",
    "tokenizer_name_or_path": "./model_from_hf/qwen25-7b",
    "output_prefix": "./dataset/data",
    "handler_name": "R1AlpacaStyleInstructionHandler",
    "tokenizer_type": "HuggingFaceTokenizer",
    "workers": 8,
    "log_interval": 1000,
    "prompt_type": "qwen_r1",
    "map_keys": {"prompt": "problem", "query": "", "response": "answer", "system": ""},
    "dataset_additional_keys": ["labels"],
}
# examples/grpo/grpo_trainer_qwen25_7b.sh (master 05a90d77): its exports, NPUS_PER_NODE=16, NNODES=1, the
# head's `ray start ... --resources='{"NPU": '$NPUS_PER_NODE'}'`, then
# `python cli/train_grpo.py --config-name $YAML`.
SCRIPT_ENV = {
    "RAY_DEDUP_LOGS": "0",
    "HYDRA_FULL_ERROR": "1",
    "TASK_QUEUE_ENABLE": "2",
    "HCCL_IF_BASE_PORT": "24703",
    "MALLOC_MMAP_THRESHOLD_": "512768",
    "LCAL_COMM_ID": "127.0.0.1:27001",
}
# MindSpeed-LLM a2c0733 ckpt_convert_qwen25_hf2mcore.sh (its TP 4 / PP 2 set to the actor's 2 / 2)
HF2MG = (
    "--use-mcore-models --model-type GPT --load-model-type hf --save-model-type mg "
    "--target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 --add-qkv-bias --load-dir {HF} "
    "--save-dir {OUT}/converted_hf2mg_weight_TP2PP2 --tokenizer-model {HF}/tokenizer.json "
    "--model-type-hf llama2 --params-dtype bf16"
)
# ckpt_convert_qwen25_mcore2hf.sh: --save-dir is the plan's output, staged with the HF config (hence
# --load-hf-from-config, as for the mindspeed-llm backend's golden test).
MG2HF = (
    "--use-mcore-models --model-type GPT --model-type-hf llama2 --load-model-type mg --save-model-type hf "
    "--target-tensor-parallel-size 1 --target-pipeline-parallel-size 1 --add-qkv-bias "
    "--load-dir {OUT}/saved_checkpoints --save-dir {OUT}/converted_mg2hf_weight --load-hf-from-config"
)


def a3_experiment(
    tmp_path: Path, version: str = "master", a3: dict[str, Any] | None = None
) -> dict[str, Any]:
    bc = copy.deepcopy(a3 or A3)
    hf = tmp_path / "Qwen2.5-7B"
    bc["megatron_training"]["tokenizer_name_or_path"] = str(hf)
    bc["megatron_training"]["data_path"] = str(tmp_path / "dataset/deepscaler/data")
    for key in ("load", "save"):  # the plan's: the converted weights, saved_checkpoints
        del bc["actor_config"][key]
    bc["mindspeed_rl_version"] = version
    return {"backend_config": bc}


def plan_json(tmp_path: Path, changes: dict[str, Any]) -> dict[str, Any]:
    tree = yaml.safe_load(experiment(tmp_path, {}).read_text())
    tree["backend_config"] = changes["backend_config"]
    path = tmp_path / "a3.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    plan = make_plan(
        load_experiment(path), dry_run=True, environ={"AF_THIRD_PARTY_DIR": str(tmp_path / "3p")}
    )
    return {"plan": plan, "json": json.loads(json.dumps(plan.to_dict()))}


def expected_yaml(tmp_path: Path, a3: dict[str, Any]) -> dict[str, Any]:
    out = tmp_path / "OUT"
    want = copy.deepcopy(a3)
    want["megatron_training"]["tokenizer_name_or_path"] = str(tmp_path / "Qwen2.5-7B")
    want["megatron_training"]["data_path"] = str(tmp_path / "dataset/deepscaler/data")
    want["actor_config"]["load"] = str(out / "converted_hf2mg_weight_TP2PP2")
    want["actor_config"]["save"] = str(out / "saved_checkpoints")
    return {"model": {"qwen25_7b": QWEN25_7B}, **want}


@pytest.mark.parametrize("version", ["master", "2.3.0"])
def test_the_a3_example_plans_mindspeed_rls_own_yaml(tmp_path, clean_env, version):
    got = plan_json(tmp_path, a3_experiment(tmp_path, version))
    plan = got["plan"]
    text = plan.files[str(tmp_path / "OUT" / "mindspeed_rl_grpo.yaml")]
    assert load_yaml(text) == expected_yaml(tmp_path, A3)


def test_the_2_1_0_a3_example_is_checked_with_2_1_0_keys(tmp_path, clean_env):
    """configs/grpo_qwen25_7b_A3.yaml on 2.1.0 (d9e8db94) has use_ascend_coc, coc_fused_kernel and
    coc_parallel_num in megatron_training and no reuse_fp32_param."""
    a3 = copy.deepcopy(A3)
    del a3["megatron_training"]["reuse_fp32_param"]
    a3["megatron_training"] = {
        "model": "qwen25_7b",
        "use_ascend_coc": True,
        "coc_fused_kernel": True,
        "coc_parallel_num": 2,
        **{k: v for k, v in a3["megatron_training"].items() if k != "model"},
    }
    plan = plan_json(tmp_path, a3_experiment(tmp_path, "2.1.0", a3))["plan"]
    text = plan.files[str(tmp_path / "OUT" / "mindspeed_rl_grpo.yaml")]
    assert load_yaml(text) == expected_yaml(tmp_path, a3)
    assert plan.logs.plot_metrics == ("grpo/math_17k_acc_rewards/mean", "response_length/mean")


def test_the_train_step_is_the_example_scripts_ray_launch(tmp_path, clean_env):
    plan = plan_json(tmp_path, a3_experiment(tmp_path))["plan"]
    out = str(tmp_path / "OUT")
    train = plan.step("train")
    assert train.env == SCRIPT_ENV  # no jemalloc on this machine: LD_PRELOAD only where the library is
    ray = train.launch
    assert ray.kind == "ray" and ray.nnodes == 1 and ray.node_rank == 0
    assert dict(ray.node_resources) == {"NPU": 16.0}  # ray start --resources='{"NPU": 16}'
    # every NPU, and the CPUs of the placement group (8 per NPU), the rule reward (1.0) and the train task
    assert dict(ray.resources) == {"NPU": 16.0, "CPU": 8 * 16 + 1.0 + 1}
    assert (ray.head_address, ray.port) == ("10.0.0.1", 6766)
    driver = list(ray.driver)
    cut = driver.index("--")
    assert driver[cut + 1 :] == [
        driver[0],
        "cli/train_grpo.py",
        "--config-path",
        out,
        "--config-name",
        "mindspeed_rl_grpo",
        f"hydra.run.dir={out}/.af/hydra/train",
    ]
    assert driver[1].endswith("programs/metric_lines.py")
    assert driver[2:6] == [
        "--match",
        r"iteration:\s*\d+\s*/\s*\d+",
        "--to",
        f"{out}/logs/grpo_metrics-{{time}}.log",
    ]
    assert train.cwd == "<MINDSPEED_RL_DIR>"  # no checkout here: the dry run shows the placeholder
    argv = train.argv
    assert argv[2:4] == ["head", "--port"] and "pkill" not in argv and "stop" not in argv
    assert plan.checkpoints.root == f"{out}/saved_checkpoints"


def test_data_given_skips_preprocessing_and_the_converters_are_mindspeed_llms(tmp_path, clean_env):
    plan = plan_json(tmp_path, a3_experiment(tmp_path))["plan"]
    out, hf = str(tmp_path / "OUT"), str(tmp_path / "Qwen2.5-7B")
    assert (
        plan.step("preprocess").skip_reason == f"preprocessed data given: {tmp_path}/dataset/deepscaler/data"
    )
    hf2mg = plan.step("hf2mg")
    assert hf2mg.argv[1] == "convert_ckpt.py"
    assert shlex.join(hf2mg.argv[2:]) == HF2MG.format(HF=hf, OUT=out)
    assert hf2mg.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    mg2hf = plan.step("mg2hf")
    cut = mg2hf.argv.index("--")
    assert mg2hf.argv[cut + 2] == "convert_ckpt.py"
    assert shlex.join(mg2hf.argv[cut + 3 :]) == MG2HF.format(OUT=out)


def test_the_dataset_yaml_is_deepscalers(tmp_path, clean_env):
    changes = a3_experiment(tmp_path)
    del changes["backend_config"]["megatron_training"]["data_path"]
    src = tmp_path / "dataset" / "deepscaler.json"
    changes["backend_config"]["preprocess_data"] = {
        **{k: v for k, v in DEEPSCALER.items() if k not in ("tokenizer_name_or_path", "output_prefix")},
        "input": str(src),
    }
    plan = plan_json(tmp_path, changes)["plan"]
    out = tmp_path / "OUT"
    data_yaml = load_yaml(plan.files[str(out / "mindspeed_rl_data.yaml")])
    assert data_yaml == {
        **DEEPSCALER,
        "input": str(src),
        "tokenizer_name_or_path": str(tmp_path / "Qwen2.5-7B"),
        "output_prefix": str(out / "preprocessed_data" / "deepscaler"),
    }
    pre = plan.step("preprocess")
    # examples/data/preprocess_data.sh: PYTHONPATH=<repo>, python cli/preprocess_data.py <config name>
    assert pre.argv[1:] == [
        "cli/preprocess_data.py",
        "mindspeed_rl_data",
        "--config-path",
        str(out),
        f"hydra.run.dir={out}/.af/hydra/preprocess",
    ]
    assert pre.env == {"PYTHONPATH": "<MINDSPEED_RL_DIR>"} and pre.mkdirs == [str(out / "preprocessed_data")]
    train_yaml = load_yaml(plan.files[str(out / "mindspeed_rl_grpo.yaml")])
    assert train_yaml["megatron_training"]["data_path"] == str(out / "preprocessed_data" / "deepscaler")
