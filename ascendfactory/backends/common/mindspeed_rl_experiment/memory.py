"""The memory job of a MindSpeed-RL experiment (backend mindspeed-rl, and torch with `stage: grpo`): the actor
as MindSpeed-RL builds it, its reference on the same devices, and the rollout.

Everything is read from the experiment as MindSpeed-RL will hold it (`MindSpeedRLConfig`): the actor's
`MegatronConfig` view (the model entry, `megatron_training` and `actor_config` merged over the class's own
defaults, e.g. `bf16: True`), the `GenerateConfig` view (`gpu_memory_utilization`, `offload_train_*`) and the
numbers MindSpeed-RL derives (`Derived`: TP, PP, CP, the actor's DP, the mini-batch in samples the actor
updates on, the sequence length, vLLM's max_model_len).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ascendfactory.backends.common.megatron.launch import TrainArgs
from ascendfactory.backends.common.megatron.memory import megatron_job, megatron_shape
from ascendfactory.backends.common.mindspeed_rl_experiment.experiment import MindSpeedRLConfig
from ascendfactory.config.catalog import ModelArch
from ascendfactory.memory.rl import RLJob
from ascendfactory.memory.target import MemoryTarget, spelled_by

RL = "backend_config."
KEYS = {
    "recompute": RL + "actor_config.recompute_granularity",
    "recompute_method": RL + "actor_config.recompute_method",
    "recompute_num_layers": RL + "actor_config.recompute_num_layers",
    "distributed_optimizer": RL + "actor_config.use_distributed_optimizer",
    "sequence_parallel": RL + "actor_config.sequence_parallel",
    "tp": RL + "actor_config.tensor_model_parallel_size",
    "pp": RL + "actor_config.pipeline_model_parallel_size",
    "mbs": RL + "actor_config.micro_batch_size",
    "gpu_memory_utilization": RL + "generate_config.gpu_memory_utilization",
    "offload_train_param": RL + "generate_config.offload_train_param",
    "offload_train_grad": RL + "generate_config.offload_train_grad",
    "offload_train_optimizer": RL + "generate_config.offload_train_optimizer",
}


@dataclass(frozen=True)
class RLRun:
    """What a MindSpeed-RL plan was made from: the experiment as MindSpeed-RL holds it, and the model."""

    rl: MindSpeedRLConfig
    arch: ModelArch | None


def rl_job(run: RLRun, *, engine: str) -> RLJob | None:
    d = run.rl.derived
    args = TrainArgs.from_config(run.rl.actor)
    shape = megatron_shape(args, run.arch)
    if shape is None:
        return None
    actor = megatron_job(args, shape, dp=d.actor_dp, engine=engine).with_(
        tp=d.tp, pp=d.pp, cp=d.cp, gbs=d.mini_batch_samples, seq=d.seq_length, mbs=d.mbs
    )
    gen = run.rl.generate
    return RLJob(
        actor=actor,
        reference=True,
        rollout="hf" if engine == "embedded" else "vllm",
        gpu_memory_utilization=float(gen.get("gpu_memory_utilization") or 0.0),
        offload_param=bool(gen.get("offload_train_param")),
        offload_grad=bool(gen.get("offload_train_grad")),
        offload_optimizer=bool(gen.get("offload_train_optimizer")),
        rollout_sequences=d.mbs,
        rollout_tokens=d.max_model_len or d.seq_length,
    )


def rl_target(run: Any, *, engine: str) -> MemoryTarget | None:
    """The actor (a Megatron job), its reference and the rollout sharing the devices."""
    if not isinstance(run, RLRun):
        return None
    job = rl_job(run, engine=engine)
    if job is None:
        return None
    d = run.rl.derived
    world = d.tp * d.pp * d.cp * d.actor_dp
    notes = ("reference model on the actor's devices (MindSpeed-RL's integrated mode)",)
    return MemoryTarget(job=job, spell=spelled_by(KEYS), world_size=world, notes=notes)
