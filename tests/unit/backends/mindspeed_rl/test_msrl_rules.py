# ruff: noqa: E501  (the expected messages are data, one per line)
"""Every config-time rule and pre-flight check, table-driven: one experiment change each, every message asserted.

The rule ids are those of ascendfactory/backends/common/mindspeed_rl_experiment/rules.py (R1-R28: validate_rl_args; S1/S2:
parse_training_config's sections) and preflight.py (V/M/T/K/MB/SC/A/D/P: the pre-flight checklist). Each case changes the base experiment (MindSpeed-RL's
grpo_qwen25_7b_A3, msrl_helpers.BASE) and lists every problem reported, in order; a rule that applies only to some
versions is checked on one of them. MindSpeed-RL's own error text is quoted inside each message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from msrl_helpers import DELETE, context

from ascendfactory.backends.common.mindspeed_rl_experiment import keys as keyfiles
from ascendfactory.backends.common.mindspeed_rl_experiment.read import read_config
from ascendfactory.backends.common.mindspeed_rl_experiment.rules import RULES
from ascendfactory.errors import ConfigError


@dataclass(frozen=True)
class Case:
    rule: str
    version: str
    change: dict[str, Any]
    problems: list[tuple[str, str]]  # (key under backend_config, message)


CASES = [
    Case(
        "R1",
        "master",
        {"backend_config": {"actor_config": {"ai_framework": "jax"}}},
        [
            (
                "actor_config.ai_framework",
                "is 'jax'; only mindspore (or no value) is allowed (MindSpeed-RL: \"Invalid value for ai_framework: 'jax'. Only None or mindspore are allowed\")",
            )
        ],
    ),
    Case(
        "R2",
        "master",
        {"backend_config": {"actor_config": {"bf16": False}}},
        [
            (
                "actor_config.bf16",
                'is false: MindSpeed-RL trains in bf16 only (MindSpeed-RL: "megatron_config.bf16 should be true and generate_config.dtype should be bfloat16.")',
            )
        ],
    ),
    Case(
        "R2",
        "master",
        {"backend_config": {"generate_config": {"dtype": "float16"}}},
        [
            (
                "generate_config.dtype",
                "is 'float16': the rollout must run in bfloat16 (MindSpeed-RL: \"megatron_config.bf16 should be true and generate_config.dtype should be bfloat16.\")",
            )
        ],
    ),
    Case(
        "R3",
        "master",
        {"backend_config": {"rl_config": {"reference_resource": {"num_npus": 8}}}},
        [
            (
                "rl_config.reference_resource",
                'is set, but with use_integrated_worker: true the reference model runs on the actor\'s NPUs (MindSpeed-RL: "reference_resource should not be set when use_integrated_worker mode is on.")',
            )
        ],
    ),
    Case(
        "R4",
        "master",
        {"backend_config": {"rl_config": {"reward_resource": {"num_npus": 8}}}},
        [
            (
                "rl_config.reward_resource",
                'is set, but a reward model is not supported with use_integrated_worker: true (MindSpeed-RL: "Reward model is not supported when use_integrated_worker mode is on.")',
            )
        ],
    ),
    Case(
        "R5",
        "master",
        {
            "backend_config": {
                "rl_config": {
                    "use_integrated_worker": False,
                    "integrated_mode_config": {"ref_model_load_path": "/x"},
                    "actor_resource": {"num_npus": 8},
                    "reference_resource": {"num_npus": 8},
                },
                "ref_config": {
                    "micro_batch_size": 4,
                    "tensor_model_parallel_size": 2,
                    "pipeline_model_parallel_size": 2,
                },
                "reward_config": {},
            }
        },
        [
            (
                "rl_config.integrated_mode_config",
                'is set, but use_integrated_worker is false (MindSpeed-RL: "integrated_mode_config should not be set when use_integrated_worker mode is off.")',
            )
        ],
    ),
    Case(
        "S1",
        "master",
        {"backend_config": {"ref_config": {"micro_batch_size": 2}}},
        [
            (
                "ref_config",
                'is given, but with use_integrated_worker: true the reference and reward use the actor\'s config (MindSpeed-RL: "ref_config should not be set when use_integrated_worker mode is on.")',
            )
        ],
    ),
    Case(
        "S2",
        "master",
        {
            "backend_config": {
                "rl_config": {
                    "use_integrated_worker": False,
                    "actor_resource": {"num_npus": 8},
                    "reference_resource": {"num_npus": 8},
                }
            }
        },
        [
            (
                "ref_config",
                "is required with use_integrated_worker: false (cli/train_grpo.py merges it into megatron_training and fails with a TypeError when it is missing)",
            ),
            (
                "reward_config",
                "is required with use_integrated_worker: false (cli/train_grpo.py merges it into megatron_training and fails with a TypeError when it is missing)",
            ),
        ],
    ),
    Case(
        "R6",
        "master",
        {"backend_config": {"generate_config": {"max_model_len": 1024}}},
        [
            (
                "generate_config.max_model_len",
                '1024 is less than megatron_training.seq_length 2048 (MindSpeed-RL: "Sequence length exceeds vLLM max_model_len! Actor.seq_length=2048 vs GenerateConfig.max_model_len=1024")',
            )
        ],
    ),
    Case(
        "R7",
        "master",
        {
            "backend_config": {
                "actor_config": {"context_parallel_size": 2, "context_parallel_algo": "hybrid_cp_algo"}
            }
        },
        [
            (
                "actor_config.context_parallel_algo",
                "'hybrid_cp_algo' with context_parallel_size 2: MindSpeed-RL master supports ulysses_cp_algo and megatron_cp_algo (MindSpeed-RL: \"Now just support ulysses CP and megatron cp(ring)\")",
            )
        ],
    ),
    Case(
        "R7",
        "2.1.0",
        {
            "backend_config": {
                "actor_config": {"context_parallel_size": 2, "context_parallel_algo": "megatron_cp_algo"}
            }
        },
        [
            (
                "actor_config.context_parallel_algo",
                "'megatron_cp_algo' with context_parallel_size 2: MindSpeed-RL 2.1.0 supports ulysses_cp_algo (MindSpeed-RL: \"Now just support ulysses CP\")",
            )
        ],
    ),
    Case(
        "R8",
        "master",
        {
            "backend_config": {
                "actor_config": {
                    "context_parallel_size": 2,
                    "pipeline_model_parallel_size": 1,
                    "context_parallel_algo": "megatron_cp_algo",
                },
                "rl_config": {"use_remove_padding": True},
            }
        },
        [
            (
                "actor_config.reset_attention_mask",
                'must be true with ring context parallel (megatron_cp_algo, CP 2) and use_remove_padding (MindSpeed-RL: "when use ring cp and remove_padding, reset_attention_mask must be true")',
            ),
            (
                "actor_config.reset_attention_mask",
                "must be true with use_remove_padding (MindSpeed-RL: \"'use_remove_padding' feature requires 'reset_attention_mask=True'! \")",
            ),
        ],
    ),
    Case(
        "R7",
        "2.2.0",
        {"backend_config": {"actor_config": {"cp_attention_mask_type": "general"}}},
        [
            (
                "actor_config.cp_attention_mask_type",
                "is 'general'; MindSpeed-RL 2.2.0 supports causal only (MindSpeed-RL: \"Now just support causal cp_attention_mask_type\")",
            )
        ],
    ),
    Case(
        "R8",
        "2.2.0",
        {"backend_config": {"actor_config": {"reset_attention_mask": True}}},
        [
            (
                "actor_config.reset_attention_mask",
                'is true without ring CP >= 2 and use_remove_padding; MindSpeed-RL 2.2.0 refuses it (MindSpeed-RL: "Just when use ring cp >=2 with remove_padding, reset_attention_mask must be true; otherwise should be false")',
            )
        ],
    ),
    Case(
        "R9",
        "master",
        {
            "backend_config": {
                "rl_config": {"use_remove_padding": True},
                "actor_config": {"reset_attention_mask": True},
            }
        },
        [
            (
                "actor_config.no_pad_to_seq_lengths",
                "must be true: use_remove_padding with pipeline parallel size 2 (MindSpeed-RL: \"'use_remove_padding' feature requires 'no_pad_to_seq_lengths=True' when using pipeline parallelism!\")",
            )
        ],
    ),
    Case(
        "R9",
        "2.1.0",
        {
            "backend_config": {
                "rl_config": {"use_remove_padding": True},
                "actor_config": {"reset_position_ids": True},
            }
        },
        [
            (
                "actor_config.variable_seq_lengths",
                "must be true: use_remove_padding with pipeline parallel size 2 (MindSpeed-RL: \"'use_remove_padding' feature requires 'variable_seq_lengths=True' when using pipeline parallelism!\")",
            )
        ],
    ),
    Case(
        "R10",
        "master",
        {
            "backend_config": {
                "rl_config": {"use_remove_padding": True},
                "actor_config": {"no_pad_to_seq_lengths": True},
            }
        },
        [
            (
                "actor_config.reset_attention_mask",
                "must be true with use_remove_padding (MindSpeed-RL: \"'use_remove_padding' feature requires 'reset_attention_mask=True'! \")",
            )
        ],
    ),
    Case(
        "R10",
        "2.2.0",
        {
            "backend_config": {
                "rl_config": {"use_remove_padding": True},
                "actor_config": {"variable_seq_lengths": True},
            }
        },
        [
            (
                "actor_config.reset_position_ids",
                "must be true with use_remove_padding (MindSpeed-RL: \"'use_remove_padding' feature requires 'reset_position_ids=True'! \")",
            )
        ],
    ),
    Case(
        "R11",
        "master",
        {
            "backend_config": {
                "rl_config": {"use_remove_padding": True, "is_multimodal": True},
                "actor_config": {"no_pad_to_seq_lengths": True, "reset_attention_mask": True},
            }
        },
        [
            (
                "rl_config.use_remove_padding",
                "cannot be used with is_multimodal (MindSpeed-RL: \"'multimodal' models cannot use 'use_remove_padding' feature! \")",
            )
        ],
    ),
    Case(
        "R12",
        "master",
        {
            "backend_config": {
                "rl_config": {"actor_resource": {"num_npus": 6}},
                "actor_config": {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 1},
                "megatron_training": {"global_batch_size": 36},
            }
        },
        [
            (
                "rl_config.actor_resource.num_npus",
                "6 NPUs are not divisible by TP x PP x CP = 4 x 1 x 1 = 4 (actor: tensor_model_parallel_size x pipeline_model_parallel_size x context_parallel_size) (MindSpeed-RL: \"Invalid Actor resource allocation! Resource={'num_npus': 6} must be divisible by (tensor_parallel * pipeline_parallel * context_parallel) = 4*1*1=4\")",
            )
        ],
    ),
    Case(
        "R13",
        "master",
        {"backend_config": {"actor_config": {"micro_batch_size": 3}}},
        [
            (
                "actor_config.micro_batch_size",
                '3 does not divide global_batch_size x n_samples_per_prompt = 32 x 8 = 256 (actor) (MindSpeed-RL: "Invalid Actor batch configuration! (global_batch_size * n_samples) = 32*8 = 256 must be divisible by micro_batch_size 3")',
            ),
            (
                "actor_config.micro_batch_size",
                '3 does not divide the 64 samples each actor (num_npus 16 = env.NNODES x env.NPUS_PER_NODE / (TP 2 x PP 2 x CP 1)) data parallel rank gets (global_batch_size 32 // DP 4 x n_samples_per_prompt 8) (MindSpeed-RL: "Actor global_batch_size 32  // data_parallel 4  * n_samples 8 must be divisible by micro_batch_size 3")',
            ),
        ],
    ),
    Case(
        "R14",
        "master",
        {"backend_config": {"generate_config": {"infer_pipeline_parallel_size": 2}}},
        [
            (
                "generate_config.infer_pipeline_parallel_size",
                'is 2: the vLLM rollout has no pipeline parallelism (MindSpeed-RL: "pipeline_parallel for vllm is not supported yet ! ")',
            )
        ],
    ),
    Case(
        "R15",
        "master",
        {"backend_config": {"megatron_training": {"global_batch_size": 30}}},
        [
            (
                "megatron_training.global_batch_size",
                '30 prompts are not divisible by the actor (num_npus 16 = env.NNODES x env.NPUS_PER_NODE / (TP 2 x PP 2 x CP 1)) data parallel size 4 (MindSpeed-RL: "Actor global_batch_size 30 must be divisible by data_parallel_size 4")',
            ),
            (
                "megatron_training.global_batch_size",
                '30 prompts are not divisible by the rollout (num_npus 16 = env.NNODES x env.NPUS_PER_NODE / (infer TP 1 x infer PP 1)) data parallel size 16 (MindSpeed-RL: "Generation global_batch_size 30 must be divisible by data_parallel_size 16")',
            ),
        ],
    ),
    Case(
        "R15",
        "master",
        {"backend_config": {"actor_config": {"micro_batch_size": 128}}},
        [
            (
                "actor_config.micro_batch_size",
                '128 does not divide the 64 samples each actor (num_npus 16 = env.NNODES x env.NPUS_PER_NODE / (TP 2 x PP 2 x CP 1)) data parallel rank gets (global_batch_size 32 // DP 4 x n_samples_per_prompt 8) (MindSpeed-RL: "Actor global_batch_size 32  // data_parallel 4  * n_samples 8 must be divisible by micro_batch_size 128")',
            )
        ],
    ),
    Case(
        "R16",
        "master",
        {"backend_config": {"rl_config": {"actor_rollout_dispatch_size": 6}}},
        [
            (
                "rl_config.actor_rollout_dispatch_size",
                '6 does not divide the 16 samples each rollout (num_npus 16 = env.NNODES x env.NPUS_PER_NODE / (infer TP 1 x infer PP 1)) data parallel rank gets (global_batch_size 32 // DP 16 x n_samples_per_prompt 8) (MindSpeed-RL: "Generation global_batch_size 32  // data_parallel 16  * n_samples 8 must be divisible by micro_batch_size 6")',
            )
        ],
    ),
    Case(
        "R17",
        "master",
        {
            "backend_config": {
                "rl_config": {
                    "use_integrated_worker": False,
                    "actor_resource": {"num_npus": 8},
                    "reference_resource": {"num_npus": 8},
                },
                "ref_config": {
                    "micro_batch_size": 4,
                    "tensor_model_parallel_size": 1,
                    "pipeline_model_parallel_size": 1,
                    "global_batch_size": 36,
                },
                "reward_config": {},
            }
        },
        [
            (
                "ref_config.global_batch_size",
                '36 prompts are not divisible by the reference data parallel size 8 (MindSpeed-RL: "Reference global_batch_size 36 must be divisible by data_parallel_size 8")',
            )
        ],
    ),
    Case(
        "R18",
        "master",
        {
            "backend_config": {"rl_config": {"actor_resource": {"num_npus": 8}}},
            "env": {"NNODES": 3, "NPUS_PER_NODE": 4},
        },
        [
            (
                "megatron_training.global_batch_size",
                '32 prompts are not divisible by the 3 Ray nodes (env.NNODES): the rule reward runs one process per node (MindSpeed-RL: "Reward dispatch size configuration error!global_batch_size 32 must be divisible by the number of nodes in the ray cluster")',
            ),
            (
                "rl_config.reward_dispatch_size",
                '85 (its default) does not divide the 256 samples of an iteration (global_batch_size 32 x n_samples_per_prompt 8) (MindSpeed-RL: "Rule Reward global_batch_size 32 must be divisible by experience_count 85")',
            ),
        ],
    ),
    Case(
        "R19",
        "master",
        {"backend_config": {"rl_config": {"share_backbone": True}}},
        [
            (
                "rl_config.share_backbone",
                'needs LoRA (actor lora_target_modules) (MindSpeed-RL: "The shared backbone can only be used with LoRA.")',
            )
        ],
    ),
    Case(
        "R20",
        "master",
        {"backend_config": {"rl_config": {"adv_dispatch_size": 48}}},
        [
            (
                "rl_config.adv_dispatch_size",
                '48 does not divide the 256 samples of an iteration (global_batch_size 32 x n_samples_per_prompt 8) (MindSpeed-RL: "Advantages global_batch_size 32 must be divisible by experience_count 48")',
            )
        ],
    ),
    Case(
        "R21",
        "master",
        {"backend_config": {"rl_config": {"actor_update_dispatch_size": 32}}},
        [
            (
                "rl_config.actor_update_dispatch_size",
                '32 is less than the samples per actor update and data parallel rank (mini_batch_size 32 x n_samples 8 / actor DP 4 = 64) (MindSpeed-RL: "actor_update_dispatch_size=32 must be >= mini_batch_size/actor_data_parallel_size (256/4=64)")',
            )
        ],
    ),
    Case(
        "R22",
        "2.3.0",
        {"backend_config": {"rl_config": {"actor_logprob_dispatch_size": 128}}},
        [
            (
                "rl_config.actor_logprob_dispatch_size",
                '128 is more than the 64 samples each data parallel worker has (32 x 8 // 4) (MindSpeed-RL: "actor_logprob_dispatch_size 128 cannot be greater than the number of samples generated on each data parallel worker, which is global_batch_size * n_samples_per_prompt // data_parallel_size = 32 * 8 // 4 = 64")',
            )
        ],
    ),
    Case(  # found by the coverage map (tests/diffval/maps/mindspeed-rl-2.3.0.yaml): one process per Ray node
        "R22",
        "2.3.0",
        {
            "env": {"NNODES": 2, "NPUS_PER_NODE": 8},
            "backend_config": {"rl_config": {"dynamic_sampling_dispatch_size": 256}},
        },
        [
            (
                "rl_config.dynamic_sampling_dispatch_size",
                '256 is more than the 128 samples each data parallel worker has (32 x 8 // 2) (MindSpeed-RL: "dynamic_sampling_dispatch_size 256 cannot be greater than the number of samples generated on each data parallel worker, which is global_batch_size * n_samples_per_prompt // num_nodes_in_ray_cluster = 32 * 8 // 2 = 128")',
            )
        ],
    ),
    Case(
        "R23",
        "master",
        {
            "backend_config": {
                "rl_config": {"verifier_function": ["base_acc", "format"], "verifier_weight": [1.0]}
            }
        },
        [
            (
                "rl_config.verifier_weight",
                "has 1 weight(s) for 2 verifier(s) ['base_acc', 'format'] (MindSpeed-RL: \"Verifier function and weight length mismatch: 2 vs 1\")",
            )
        ],
    ),
    Case(
        "R24",
        "master",
        {
            "backend_config": {
                "rl_config": {
                    "overlong_buffer_enable": True,
                    "overlong_buffer": 4096,
                    "rollout_max_tokens": 1024,
                }
            }
        },
        [
            (
                "rl_config.overlong_buffer",
                '4096 must be less than sampling_config.max_tokens 2048 (MindSpeed-RL: "Response max length 2048 must greater than Dapo overlong buffer 4096")',
            ),
            (
                "rl_config.rollout_max_tokens",
                '1024 differs from sampling_config.max_tokens 2048 (MindSpeed-RL: "overlong rollout_max_tokens and generate rollout_max_tokens mismatch: 1024 vs 2048")',
            ),
        ],
    ),
    Case(
        "R25",
        "master",
        {
            "backend_config": {
                "rl_config": {"clip_higher_enable": True, "clip_ratio_low": 0.3, "clip_ratio_high": 0.2}
            }
        },
        [
            (
                "rl_config.clip_ratio_low",
                '0.3 is greater than clip_ratio_high 0.2 (MindSpeed-RL: "clip_ratio_low 0.3 must less than clip_ratio_high 0.2")',
            )
        ],
    ),
    Case(
        "R26",
        "master",
        {
            "backend_config": {
                "rl_config": {
                    "filter_groups_enable": True,
                    "filter_groups_metric": "acc",
                    "filter_groups_train_batch_size": 32,
                }
            }
        },
        [
            (
                "rl_config.filter_groups_metric",
                "'acc' is not one of verifier_function ['math_17k_acc'] (MindSpeed-RL: \"filter_groups_metric acc must in verifier_function ['math_17k_acc']\")",
            )
        ],
    ),
    Case(
        "R26-defaults",
        "master",
        {"backend_config": {"rl_config": {"filter_groups_enable": True}}},
        [  # the defaults the switch makes matter are named with it
            (
                "rl_config.filter_groups_metric",
                "'acc' is not one of verifier_function ['math_17k_acc'] (MindSpeed-RL: \"filter_groups_metric acc must in verifier_function ['math_17k_acc']\") (its default, with filter_groups_enable)",
            ),
            (
                "rl_config.filter_groups_train_batch_size",
                '1 prompts are not divisible by the actor data parallel size 4 (MindSpeed-RL: "ActorForDapo global_batch_size 1 must be divisible by data_parallel_size 4") (its default, with filter_groups_enable)',
            ),
        ],
    ),
    Case(
        "R27",
        "master",
        {"backend_config": {"rl_config": {"partial_rollout_max_split": 2, "guarantee_order": True}}},
        [
            (
                "rl_config.guarantee_order",
                'must be false with partial_rollout_max_split 2 (MindSpeed-RL: "guarantee_order must be false when partial_rollout_max_split > 1")',
            )
        ],
    ),
    Case(
        "R28",
        "master",
        {"backend_config": {"rl_config": {"multi_turn_enable": True, "max_total_response_length": 1024}}},
        [
            (
                "rl_config.max_total_response_length",
                '1024 is less than sampling_config.max_tokens 2048 (MindSpeed-RL: "max_total_response_length must greater than max_tokens:1024 vs 2048")',
            ),
            (
                "rl_config.async_engine",
                'must be true with multi_turn_enable (MindSpeed-RL: "async_engine must be True when multi_turn_enable is True")',
            ),
        ],
    ),
    Case(
        "R-KL",
        "master",
        {"backend_config": {"rl_config": {"kl_dispatch_size": 8}}},
        [
            (
                "rl_config.kl_dispatch_size",
                "is PPO's (the critic's KL dispatch): GRPO has no critic config, and validate_rl_args fails reading its global_batch_size (MindSpeed-RL: \"AttributeError: 'NoneType' object has no attribute 'global_batch_size'\")",
            )
        ],
    ),
    Case(
        "R-VIT",
        "2.3.0",
        {"backend_config": {"rl_config": {"reuse_image_embeds": True}}},
        [
            (
                "rl_config.reuse_image_embeds",
                "is for multimodal GRPO (a ViT config): cli/train_grpo.py passes none, and validate_rl_args fails reading its global_batch_size (MindSpeed-RL: \"AttributeError: 'NoneType' object has no attribute 'global_batch_size'\")",
            )
        ],
    ),
    Case(
        "R-VIT-colocate",
        "master",
        {"backend_config": {"rl_config": {"colocate_actor_and_vit": True}}},
        [
            (
                "rl_config.colocate_actor_and_vit",
                "is for multimodal GRPO (a ViT model on its own vit_resource): cli/train_grpo.py passes no ViT config, and validate_rl_args fails reading the ViT's resources (MindSpeed-RL: \"AttributeError: 'NoneType' object has no attribute 'num_npus'\")",
            )
        ],
    ),
    Case(
        "dispatch-kind",
        "master",
        {"backend_config": {"rl_config": {"reward_dispatch_size": [1, 2]}}},
        [
            (
                "rl_config.reward_dispatch_size",
                "must be a whole number of 1 or more (got [1, 2]): experiences per dispatch (validate_rl_args computes with it)",
            )
        ],
    ),
    Case(
        "V1",
        "master",
        {"backend_config": {"generate_config": {"infer_tensor_parallel_size": 8}}},
        [
            (
                "generate_config.infer_tensor_parallel_size",
                '8 does not divide the model\'s 28 attention heads: vLLM refuses it when the rollout starts (vLLM: "Total number of attention heads (28) must be divisible by tensor parallel size (8).")',
            )
        ],
    ),
    Case(
        "V2",
        "master",
        {
            "backend_config": {
                "generate_config": {"infer_tensor_parallel_size": 7},
                "actor_config": {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4},
            }
        },
        [
            (
                "generate_config.infer_tensor_parallel_size",
                '7 cannot be made from the training layout (TP 1 x train DP 4 = 4 ranks per pipeline stage) (MindSpeed-RL: "Can\'t split train tp size 1 to infer tp size 7 with train dp size 4.")',
            )
        ],
    ),
    Case(
        "V2",
        "master",
        {
            "backend_config": {
                "generate_config": {"infer_tensor_parallel_size": 4},
                "actor_config": {"tensor_model_parallel_size": 7, "pipeline_model_parallel_size": 1},
                "megatron_training": {"global_batch_size": 28},
                "rl_config": {"mini_batch_size": 28},
            },
            "env": {"NPUS_PER_NODE": 28},
        },
        [
            (
                "actor_config.tensor_model_parallel_size",
                "7 does not divide the model's 4 KV groups (num_query_groups)",
            ),
            (
                "generate_config.infer_tensor_parallel_size",
                '4 does not divide the training TP 7 (MindSpeed-RL: "Can\'t gather train tp size 7 to infer tp size 4")',
            ),
        ],
    ),
    Case(
        "M1",
        "master",
        {
            "backend_config": {
                "actor_config": {"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 1},
                "generate_config": {"infer_tensor_parallel_size": 4},
            }
        },
        [
            (
                "actor_config.tensor_model_parallel_size",
                "8 does not divide the model's 28 attention heads (Megatron's validate_args in every worker)",
            ),
            (
                "actor_config.tensor_model_parallel_size",
                "8 does not divide the model's 4 KV groups (num_query_groups)",
            ),
        ],
    ),
    Case(
        "M1",
        "master",
        {
            "backend_config": {
                "actor_config": {"pipeline_model_parallel_size": 8, "tensor_model_parallel_size": 1},
                "megatron_training": {"global_batch_size": 32},
            }
        },
        [("actor_config.pipeline_model_parallel_size", "8 does not divide the model's 28 layers")],
    ),
    Case(
        "T1",
        "master",
        {"backend_config": {"rl_config": {"verifier_function": ["math_acc"]}}},
        [
            (
                "rl_config.verifier_function",
                "'math_acc' is not a verifier of MindSpeed-RL master (did you mean: math_17k_acc, base_acc?): models/rule_verifier.py skips it silently (its reward is 0, no metric is logged)",
            )
        ],
    ),
    Case(
        "T1",
        "2.1.0",
        {"backend_config": {"rl_config": {"verifier_function": ["acc_for_dapo"]}}},
        [
            (
                "rl_config.verifier_function",
                "'acc_for_dapo' is not a verifier of MindSpeed-RL 2.1.0: models/rule_verifier.py skips it silently (its reward is 0, no metric is logged)",
            )
        ],
    ),
    Case(
        "K1",
        "master",
        {"backend_config": {"rl_config": {"kl_ctrl_type": "linear"}}},
        [
            (
                "rl_config.kl_ctrl_type",
                "'linear' is not a KL controller (trainer/base.py raises NotImplementedError)",
            )
        ],
    ),
    Case(
        "K1",
        "master",
        {"backend_config": {"rl_config": {"kl_ctrl_type": "adaptive", "kl_horizon": 0}}},
        [
            (
                "rl_config.kl_horizon",
                'must be larger than 0 with kl_ctrl_type adaptive (MindSpeed-RL: "horizon must be larger than 0. Got 0")',
            )
        ],
    ),
    Case(
        "MB",
        "master",
        {
            "backend_config": {
                "rl_config": {"mini_batch_size": 1, "n_samples_per_prompt": 2},
                "actor_config": {
                    "micro_batch_size": 2,
                    "tensor_model_parallel_size": 1,
                    "pipeline_model_parallel_size": 1,
                },
                "generate_config": {"infer_tensor_parallel_size": 1},
            }
        },
        [
            (
                "rl_config.mini_batch_size",
                "1 prompts x n_samples_per_prompt 2 = 2 samples per update are fewer than the 16 actor data parallel ranks: each rank's mini-batch is empty (torch.split fails in the actor update)",
            )
        ],
    ),
    Case(
        "SC",
        "master",
        {"backend_config": {"generate_config": {"sampling_config": {"temperature": DELETE}}}},
        [
            (
                "generate_config.sampling_config.temperature",
                'is missing: a given sampling_config replaces MindSpeed-RL\'s defaults whole, and the actor reads sampling_config["temperature"] (KeyError on the cluster)',
            )
        ],
    ),
    Case(
        "A1",
        "master",
        {"backend_config": {"megatron_training": {"tokenizer_name_or_path": None}}},
        [
            (
                "megatron_training.tokenizer_name_or_path",
                "required: the HF model directory (tokenizer, config.json; vLLM loads the rollout model's config from it)",
            )
        ],
    ),
    Case(
        "A2",
        "master",
        {"backend_config": {"megatron_training": {"stage": "ray_ppo"}}},
        [("megatron_training.stage", "is 'ray_ppo'; cli/train_grpo.py trains with stage ray_grpo")],
    ),
    Case(
        "A3",
        "master",
        {"backend_config": {"preprocess_data": None}},
        [
            (
                "preprocess_data.input",
                "no training data: neither preprocess_data.input nor megatron_training.data_path is set",
            )
        ],
    ),
    Case(
        "A4",
        "master",
        {"backend_config": {"megatron_training": {"dataset_additional_keys": []}}},
        [
            (
                "megatron_training.dataset_additional_keys",
                'is []: the rule reward reads each prompt\'s answer as data["labels"] (models/rule_verifier.py), so the dataset must carry it',
            )
        ],
    ),
    Case(
        "D1",
        "master",
        {"backend_config": {"preprocess_data": {"handler_name": "GeneralPretrainHandler"}}},
        [
            (
                "preprocess_data.handler_name",
                "'GeneralPretrainHandler' cannot be used with a prompt_type (prompt_type is 'qwen_r1'; the default is 'empty') (MindSpeed-RL: \"If specify prompt_type , handler name must be in: ...\")",
            )
        ],
    ),
    Case(
        "D2",
        "master",
        {"backend_config": {"preprocess_data": {"prompt_type": "qwen2"}}},
        [
            (
                "preprocess_data.prompt_type",
                "'qwen2' is not a template of configs/model/templates.json (did you mean: qwen, qwen3, qwen_r1?) (MindSpeed-RL: \"Template qwen2 does not exist.\")",
            )
        ],
    ),
    Case(
        "D3",
        "master",
        {"backend_config": {"preprocess_data": {"neat_pack": True}}},
        [
            (
                "preprocess_data.neat_pack",
                'needs pack: true (MindSpeed-RL: "Require set `pack` True when `neat-pack` is True.")',
            )
        ],
    ),
    Case(
        "D4",
        "2.2.0",
        {"backend_config": {"preprocess_data": {"enable_thinking": True}}},
        [
            (
                "preprocess_data.enable_thinking",
                "works only with prompt_type qwen3 (got 'qwen_r1') (MindSpeed-RL: \"enable_thinking only support when using qwen3 prompt type\")",
            )
        ],
    ),
    Case(
        "D6",
        "master",
        {"backend_config": {"preprocess_data": {"dataset_additional_keys": []}}},
        [
            (
                "preprocess_data.dataset_additional_keys",
                "lacks ['labels'], which training reads (megatron_training.dataset_additional_keys ['labels']): R1AlpacaStyleInstructionHandler writes one <prefix>_packed_<key>_document file per listed key",
            )
        ],
    ),
    Case(
        "P1",
        "master",
        {
            "backend_config": {
                "rl_config": {"actor_resource": {"num_npus": 32}},
                "megatron_training": {"global_batch_size": 64},
            }
        },
        [
            (
                "rl_config.actor_resource.num_npus",
                "the workers need 32 NPUs (actor 32) but the cluster has 16 (env.NNODES 1 x 16 per node): the placement group would wait forever (workers/scheduler/launcher.py)",
            )
        ],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}-{c.version}-{i}" for i, c in enumerate(CASES)])
def test_rule(tmp_path, clean_env, case):
    with pytest.raises(ConfigError) as e:
        read_config(context(tmp_path, case.change), keys=keyfiles.shipped(case.version))
    got = [(p.key.removeprefix("backend_config."), p.message) for p in e.value.problems]
    assert got == case.problems


def test_every_rule_of_the_spec_has_a_case():
    covered = {c.rule for c in CASES}
    spec = {f"R{i}" for i in range(1, 29)} | {"S1", "S2", "V1", "V2", "M1", "T1", "K1", "MB", "SC", "P1"}
    assert spec <= covered, sorted(spec - covered)


@pytest.mark.parametrize("version", keyfiles.ORDER)
def test_the_base_experiment_passes_every_version(tmp_path, clean_env, version):
    cfg = read_config(context(tmp_path), keys=keyfiles.shipped(version))
    assert cfg.keys.version == version


@pytest.mark.parametrize(
    ("rule", "version", "applies"),
    [
        ("R18", "2.1.0", False),
        ("R18", "2.2.0", True),
        ("R19", "2.3.0", False),
        ("R19", "master", True),
        ("R22", "2.2.0", False),
        ("R22", "2.3.0", True),
        ("R7-2.2.0", "2.2.0", True),
        ("R7-2.2.0", "2.3.0", False),
        ("R28", "2.3.0", False),
        ("R-KL", "2.2.0", False),
        ("R-KL", "2.3.0", True),  # the commit install.sh pins (09b8c125) checks kl_dispatch_size
        ("R-VIT", "2.1.0", False),
    ],
)
def test_rules_apply_to_their_versions(rule, version, applies):
    (found,) = [r for r in RULES if r.id == rule]
    assert found.applies(keyfiles.shipped(version)) is applies


def test_warnings_do_not_stop_the_plan(tmp_path, clean_env):
    change = {
        "backend_config": {"rl_config": {"mini_batch_size": 24}, "generate_config": {"max_model_len": 2048}}
    }
    cfg = read_config(context(tmp_path, change), keys=keyfiles.shipped("master"))
    assert cfg.warnings == (
        "backend_config.rl_config.mini_batch_size: 24 does not divide global_batch_size 32: the last actor update "
        "of each iteration is smaller than the others",
        "backend_config.generate_config.max_model_len: 2048 is less than max_prompt_length 512 + "
        "sampling_config.max_tokens 2048: long prompts leave vLLM less room than max_tokens",
    )


def test_placement_warnings_name_idle_npus_and_a_partial_node(tmp_path, clean_env):
    change = {
        "env": {"NNODES": 2},
        "backend_config": {
            "rl_config": {"actor_resource": {"num_npus": 24}, "mini_batch_size": 48},
            "megatron_training": {"global_batch_size": 48},
        },
    }
    key = "backend_config.rl_config.actor_resource.num_npus"
    cfg = read_config(context(tmp_path, change), keys=keyfiles.shipped("master"))
    assert cfg.warnings == (
        f"{key}: the workers use 24 of the cluster's 32 NPUs",
        f"{key}: 24 NPUs are not a whole number of nodes of 16: the last node gets a partial placement group",
    )
    alone = read_config(context(tmp_path, change), keys=keyfiles.shipped("master"), cluster_checks=False)
    assert alone.warnings == ()  # the placement is the cluster's


def test_cluster_checks_can_be_left_out(tmp_path, clean_env):
    """A backend that runs the same experiment elsewhere (the embedded GRPO) skips vLLM and placement."""
    change = {"backend_config": {"generate_config": {"infer_tensor_parallel_size": 8}}}
    with pytest.raises(ConfigError):
        read_config(context(tmp_path, change), keys=keyfiles.shipped("master"))
    read_config(context(tmp_path, change), keys=keyfiles.shipped("master"), cluster_checks=False)
