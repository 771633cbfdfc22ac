"""The MindSpeed-RL keys the embedded GRPO trainer reads, as data (names and defaults are MindSpeed-RL's).

Sections of the yaml (`cli/train_grpo.py`'s Hydra config) and what happens to each key:

- `megatron_training` + `actor_config` (+ the `model` entry they name), merged as MindSpeed-RL merges
  them (actor_config wins): the keys in `MEGATRON_RL` are read here; every other key becomes the
  Megatron flag `--key-with-dashes` (a true bool a bare flag, false/None dropped, a list repeated values,
  as MindSpeed-RL's `parse_args_from_config` does) and goes through the SFT trainer's flag list
  (`engine/train/flags.py`): honoured, architecture (checked against config.json), performance (ignored)
  or refused by name.
- `rl_config`: `RL_HONOURED` are implemented; `RL_IGNORED` change only scheduling on a Ray cluster and are
  accepted without effect; `RL_FIXED` are accepted only at the one value this trainer implements; any
  other key is refused by name.
- `generate_config` (vLLM's settings): `GENERATE_HONOURED`, `GENERATE_IGNORED`, `GENERATE_FIXED`; and
  `generate_config.sampling_config` (`SAMPLING`).
- `profiler_config`, `msprobe_config`: accepted while profiling and dumping are off (`OFF_SECTIONS`).
- `ref_config`, `reward_config` and any other section: refused (integrated worker only, rule rewards only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KL_PENALTIES = ("kl", "abs", "mse", "low_var_kl")  # rl_config.kl_penalty (algorithms.kl_penalty)


@dataclass(frozen=True)
class Sampling:
    """The rollout's sampling settings (`generate_config.sampling_config`, vLLM's names)."""

    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1  # <= 0: off
    top_p: float = 1.0
    min_p: float = 0.0


# rl_config keys implemented: key -> (MindSpeed-RL default, meaning)
RL_HONOURED: dict[str, tuple[Any, str]] = {
    "n_samples_per_prompt": (1, "responses sampled per prompt (a GRPO group)"),
    "mini_batch_size": (1, "prompts per optimizer step; GBS / mini_batch_size steps per epoch"),
    "epochs": (1, "passes over each rollout"),
    "clip_ratio": (0.2, "PPO clip range of the importance ratio"),
    "entropy_coeff": (0.0, "entropy bonus weight"),
    "kl_penalty": ("low_var_kl", "kl | abs | mse | low_var_kl (the KL loss estimator)"),
    "kl_ctrl_type": ("fixed", "fixed | adaptive (adaptive changes only with use_kl_in_reward)"),
    "init_kl_coef": (0.01, "KL loss coefficient"),
    "kl_horizon": (1000, "adaptive KL horizon (> 0)"),
    "kl_target": (100.0, "adaptive KL target"),
    "verifier_function": (["base_acc"], "rule verifiers by name (engine/rl/verifiers.py)"),
    "verifier_weight": ([1.0], "one weight per verifier"),
    "shuffle_mini_batch": (False, "shuffle the rollout's samples before splitting into mini-batches"),
    "use_tensorboard": (False, "TensorBoard scalars `train/<metric>` from the first rank"),
    "use_wandb": (False, "W&B run of the first rank's scalars (engine/rl/trackers.py)"),
    "wandb_project": ("", "W&B project (needed with use_wandb)"),
    "wandb_exp_name": ("", "W&B run name (default: the project)"),
    "wandb_save_dir": ("", "W&B folder (default: <save>/wandb; the mode from WANDB_MODE)"),
    "use_swanlab": (False, "SwanLab experiment of the first rank's scalars (MindSpeed-RL master)"),
    "swanlab_project": ("", "SwanLab project (needed with use_swanlab)"),
    "swanlab_exp_name": ("", "SwanLab experiment name (default: the project)"),
    "swanlab_mode": ("", "local | offline | cloud | disabled (default: SWANLAB_MODE, else local)"),
    "swanlab_save_dir": ("", "SwanLab log folder (default: SWANLAB_LOG_DIR, else ./swanlog)"),
    "log_max_throughput": (True, "TPS from the max (true) or mean (false) prompt/response length"),
    "actor_forward_micro_batch_size": (None, "samples per forward of the old-log-prob pass"),
    "ref_forward_micro_batch_size": (None, "samples per forward of the reference pass"),
    "max_prompt_length": (512, "longest prompt in tokens; a longer one is an error"),
    "actor_resource": ({"num_npus": None}, "num_npus: must equal the number of processes when set"),
    "integrated_mode_config": (None, "ref_model_load_path: where the frozen reference is loaded from"),
    "gamma": (1.0, "GAE discount (unused by group_norm)"),
    "lam": (0.95, "GAE lambda (unused by group_norm)"),
}
# rl_config keys about Ray, placement and transfer-dock scheduling: no effect on the numerics here.
RL_IGNORED = (
    "runtime_env_path",
    "hccl_buffersize",
    "blocking",
    "guarantee_order",
    "num_cpus_for_local_task",
    "num_cpus_for_placement_group",
    "verifier_parallel",
    "verifier_timeout",
    "actor_rollout_dispatch_size",
    "actor_logprob_dispatch_size",
    "ref_dispatch_size",
    "reward_dispatch_size",
    "adv_dispatch_size",
    "actor_update_dispatch_size",
    "kl_dispatch_size",
    "use_remove_padding",
    "use_dp_batch_balance",
    "token_level_loss",
    "data_strategy",
    "zmq_communication",
    "max_packing_token_size",
    "num_samples_per_step",
    "tp_split_expert",
)
# rl_config keys accepted at one value only: key -> (the value implemented, what else would need)
RL_FIXED: dict[str, tuple[Any, str]] = {
    "use_integrated_worker": (True, "separate reference/reward workers"),
    "adv_estimator": ("group_norm", "advantage estimators other than GRPO's group_norm"),
    "rule_reward": (True, "a reward model"),
    "use_kl_in_reward": (False, "the KL penalty in the reward"),
    "is_multimodal": (False, "multimodal models"),
    "use_dynamic_bsz": (False, "dynamic batch sizes"),
    "clip_higher_enable": (False, "DAPO's clip-higher"),
    "overlong_buffer_enable": (False, "DAPO's overlong penalty"),
    "filter_groups_enable": (False, "DAPO's dynamic sampling"),
    "multi_turn_enable": (False, "multi-turn tool use"),
    "partial_rollout_max_split": (1, "partial rollouts"),
    "share_backbone": (False, "a shared LoRA backbone"),
    "reference_resource": (None, "a separate reference worker"),
    "reward_resource": (None, "a reward model worker"),
}

GENERATE_HONOURED: dict[str, tuple[Any, str]] = {
    "max_model_len": (2048, "prompt + response limit (>= seq_length)"),
    "dtype": ("bfloat16", "rollout compute dtype: bfloat16 | float16 | float32"),
    "infer_tensor_parallel_size": (8, "accepted; the rollout runs on the actor's own TP layout"),
    "infer_pipeline_parallel_size": (1, "must be 1"),
}
GENERATE_IGNORED = (
    "tokenizer_name_or_path",
    "trust_remote_code",
    "data_parallel_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "offload_train_optimizer",
    "offload_train_grad",
    "offload_train_param",
    "enable_prefix_caching",
    "num_scheduler_steps",
    "enforce_eager",
    "torchair_graph",
    "ascend_scheduler_config_enabled",
    "infer_expert_parallel_size",
    "limit_mm_image_per_prompt",
    "limit_mm_video_per_prompt",
)
GENERATE_FIXED: dict[str, tuple[Any, str]] = {"enable_expert_parallel": (False, "expert parallelism")}
# sampling_config: key -> (MindSpeed-RL default, meaning); logprobs/detokenize are vLLM output options
SAMPLING: dict[str, tuple[Any, str]] = {
    "max_tokens": (128, "longest response"),
    "temperature": (0.2, "sampling temperature (0 = greedy)"),
    "top_p": (1.0, "nucleus sampling mass"),
    "top_k": (50, "top-k sampling (-1 = off)"),
    "min_p": (0.0, "min-p sampling"),
    "seed": (None, "rollout seed (default: megatron_training.seed)"),
    "logprobs": (1, "accepted (vLLM output option)"),
    "detokenize": (False, "accepted (vLLM output option)"),
}

# megatron_training / actor_config keys read here rather than passed to the Megatron flag parser
MEGATRON_RL: dict[str, str] = {
    "model": "the name of the `model` entry with the architecture keys",
    "stage": "must be ray_grpo",
    "dataset_additional_keys": "must list labels (the reference answers)",
    "tokenizer_type": "PretrainedFromHF or HuggingFaceTokenizer",
    "prompt_type": "used at preprocessing",
    "prompt_type_path": "used at preprocessing",
    "is_instruction_dataset": "accepted",
    "use_kv_cache": "accepted (the rollout always uses a KV cache)",
    "do_sample": "accepted (sampling follows sampling_config)",
    "tokenizer_padding_side": "accepted",
    "no_shared_storage": "accepted",
    "enable_high_availability": "accepted",
    "use_tp_pp_dp_mapping": "accepted",
    "pad_to_multiple_of": "accepted",
    "dataloader_type": "accepted",
    "ai_framework": "must be unset (None)",
    "npu_deterministic": "accepted (the embedded trainer is deterministic on CPU)",
    "shape_order": "accepted",
    "no_check_for_nan_in_loss_and_grad": "accepted",
    "accumulate_allreduce_grads_in_fp32": "accepted",
    "ddp_bucket_size": "accepted",
    "use_ascend_coc": "accepted",
    "swap_optimizer": "accepted",
    "transformer_impl": "accepted",
    "gemm_gradient_accumulation_fusion": "accepted",
    "moe_tp_extend_ep": "accepted",
}
# MindSpeed-RL's MegatronConfig defaults where they differ from Megatron flags left out (master 05a90d77,
# backends/common/mindspeed_rl_experiment/keys/master.txt): MindSpeed-RL passes them to Megatron, so an
# experiment that does not set them trains with them. Applied here under the model entry and the two sections.
MEGATRON_DEFAULTS: dict[str, Any] = {
    "bf16": True,
    "attention_dropout": 0.1,
    "hidden_dropout": 0.1,
    "make_vocab_size_divisible_by": 128,
    "normalization": "LayerNorm",
    "position_embedding_type": "learned_absolute",
    "norm_epsilon": 1e-05,
    "rotary_base": 10000,
}
STAGE = "ray_grpo"
TOKENIZER_TYPES = ("PretrainedFromHF", "HuggingFaceTokenizer")
OFF_SECTIONS: dict[str, tuple[str, ...]] = {
    "profiler_config": ("profile", "mstx"),
    "msprobe_config": ("msprobe",),
}
KNOWN_SECTIONS = (
    "defaults",
    "model",
    "megatron_training",
    "actor_config",
    "rl_config",
    "generate_config",
    *OFF_SECTIONS,
)
