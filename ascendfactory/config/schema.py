"""The experiment file, modelled once. Every field is documented where it is declared.

An experiment file (what `ascendfactory-cli config` writes, what `train <yaml>` reads) has:

- identity: `backend`, `af_model_name`, `exp_name`, `af_output_dir`;
- `env`: the launch topology (MASTER_ADDR, MASTER_PORT, NNODES, NODE_RANK, NPUS_PER_NODE) plus any
  extra UPPER_CASE variables (HCCL_*, GLOO_SOCKET_IFNAME, ...) exported to every step;
- run options (`stage`, `ckpt_load_type`, `user_converted_ckpt_path`, `train_auto_resume`, ...);
- `backend_config`: the chosen framework's own configuration, in its own key style (dash keys such as
  `tensor-model-parallel-size` for MindSpeed-LLM and the embedded `torch` backend). The backend adapter
  validates it against that framework's real argument names.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ascendfactory.config.report_to import ReportTo
from ascendfactory.monitors import MonitorConfig, TensorboardConfig

_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _not_a_bool(value: Any) -> Any:
    """YAML's `true` is no number: pydantic would read it as 1 (`MASTER_PORT: true` -> port 1)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {str(value).lower()}")
    return value


Int = Annotated[int, BeforeValidator(_not_a_bool)]  # an integer; true/false refused
Float = Annotated[float, BeforeValidator(_not_a_bool)]


class EnvConfig(BaseModel):
    """Launch topology. Every node runs the same command; only `NODE_RANK` differs.

    Extra UPPER_CASE keys (e.g. `HCCL_CONNECT_TIMEOUT`, `GLOO_SOCKET_IFNAME`) are exported to every step.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    MASTER_ADDR: str = Field(
        "localhost", description="Address of the NODE_RANK 0 machine (torchrun rendezvous)."
    )
    MASTER_PORT: Int = Field(6000, ge=1, le=65535, description="Rendezvous port on MASTER_ADDR.")
    NNODES: Int = Field(1, ge=1, le=100_000, description="Number of machines in the job.")
    NODE_RANK: Int = Field(0, ge=0, description="This machine's rank, 0..NNODES-1.")
    NPUS_PER_NODE: Int | None = Field(
        None,
        ge=1,
        le=1024,  # bounds every search over layouts; no machine has more
        description="Devices (processes) per machine. Precedence: ASCEND_RT_VISIBLE_DEVICES / "
        "CUDA_VISIBLE_DEVICES when set > this key > 8 on NPU machines, the GPU count on CUDA "
        "machines, 1 on CPU (see config.devices.resolve_devices_per_node).",
    )

    @model_validator(mode="after")
    def _check(self) -> EnvConfig:
        # With NNODES left to its default a cluster platform may still supply it (config.topology checks
        # the final pair).
        if "NNODES" in self.model_fields_set and self.NODE_RANK >= self.NNODES:
            raise ValueError(
                f"NODE_RANK ({self.NODE_RANK}) must be < NNODES ({self.NNODES}); "
                f"set --env.NODE_RANK to a value in 0..{self.NNODES - 1}"
            )
        import difflib

        known = [k for k in type(self).model_fields]
        for key, value in (self.model_extra or {}).items():
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
            if close:
                raise ValueError(
                    f"env.{key} looks like a misspelling of env.{close[0]}; "
                    f"write env.{close[0]} (extra env keys are exported as variables)"
                )
            if not _ENV_NAME.match(key):
                raise ValueError(f"env.{key}: extra env keys must be UPPER_CASE environment variable names")
            if isinstance(value, (dict, list)):
                raise ValueError(f"env.{key}: must be a scalar (it is exported as an environment variable)")
        return self

    def extra_vars(self) -> dict[str, str]:
        """The extra UPPER_CASE variables, as strings, to export to every step."""
        out = {}
        for k, v in (self.model_extra or {}).items():
            if v is None:
                continue
            out[k] = ("1" if v else "0") if isinstance(v, bool) else str(v)
        return out


class AutoResumeConfig(BaseModel):
    """How `train_auto_resume` retries the training step."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: Int = Field(3, ge=1, description="Restarts of the training step after a failure.")
    backoff_s: Float = Field(5.0, ge=0, le=3600, description="Seconds to wait before each restart.")


class MemoryCheckConfig(BaseModel):
    """The pre-launch memory estimate (`ascendfactory-cli estimate`, the `memory` section of `--dry-run`)."""

    model_config = ConfigDict(extra="forbid")

    on_exceed: Literal["error", "warn", "off"] = Field(
        "error",
        description="What a real run does when the estimated per-device peak (plus the reserve) exceeds "
        "the device memory: error (stop before anything starts, with the cheapest fixes), warn, or off.",
    )
    device_memory_gb: Float | None = Field(
        None, gt=0, description="Memory of one device in GiB; overrides npu-smi / nvidia-smi and `device`."
    )
    device: str | None = Field(
        None,
        description="A known device when this machine has none to probe (the cluster's): "
        "ascend-910b1..b4, ascend-910, a100-40gb, a100-80gb, a800-80gb, h100-80gb, h100-nvl, h800-80gb, "
        "h20, h200, l40s (`ascendfactory/memory/devices.py` cites each size).",
    )

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str | None) -> str | None:
        from ascendfactory.memory.devices import DEVICES

        if v is not None and v.lower() not in DEVICES:
            close = [d for d in DEVICES if d.startswith(v.lower())] or difflib.get_close_matches(
                v.lower(), list(DEVICES), n=3, cutoff=0.5
            )
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise PydanticCustomError(
                "device",
                "is not a known device",
                {"got": repr(v), "fix": f"{hint}use one of {', '.join(DEVICES)}, or set device_memory_gb"},
            )
        return v


class ExperimentConfig(BaseModel):
    """One experiment: what to train, with which backend, where the outputs go."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    backend: str = Field(
        "torch",
        min_length=1,
        description="Training framework that runs the experiment: a registered backend "
        "(`ascendfactory-cli experiments` lists them); checked against the backend registry when loaded.",
    )
    af_model_name: str = Field(
        ...,
        min_length=1,
        description="Model id from the catalog (`ascendfactory-cli models`), e.g. qwen2.5-7b. Supplies "
        "architecture facts for validation when no HF config.json is reachable.",
    )
    exp_name: str = Field(..., min_length=1, description="Experiment name, e.g. full-4k, lora-4k, grpo.")
    af_output_dir: str = Field(..., min_length=1, description="Root of every output and log of the run.")

    env: EnvConfig = Field(
        default_factory=lambda: EnvConfig.model_validate({}),
        description="Launch topology and exported variables.",
    )

    accelerator: Literal["auto", "cpu"] = Field(
        "auto",
        description="What the training processes run on. auto: the node's NPUs or GPUs, one process per "
        "device (env.NPUS_PER_NODE of them; a real run asking more than the node has visible is refused "
        "before launch), CPU processes on a node without any. cpu: CPU processes (gloo) even on a node with "
        "accelerators; backend torch only (the quickstarts use it, so they give the same figures on every "
        "machine).",
    )

    stage: str | None = Field(
        None,
        description="Training stage, one of the backend's stages (`ascendfactory-cli experiments` lists "
        "them). MindSpeed-LLM / torch: pt (pretrain_gpt.py) or sft (posttrain_gpt.py --stage sft), default "
        "backend_config.training.stage, else sft; torch also grpo; mindspeed-mm: pt, sft; llamafactory: "
        "pt, sft, dpo; verl: ppo, grpo, dapo; mindspeed-rl: grpo.",
    )
    ckpt_load_type: Annotated[Literal[0, 1, 2], BeforeValidator(_not_a_bool)] = Field(
        1,
        description="0: load no weights (random init). 1: load the weights only (a fine-tuning start). "
        "2: load weights + optimizer + RNG (true resume from user_converted_ckpt_path).",
    )
    user_converted_ckpt_path: str | None = Field(
        None,
        description="Weights in the backend's training format to load: converted HF weights (ckpt_load_type "
        "1) or a saved checkpoint (ckpt_load_type 2). Given => the weight conversion step is skipped.",
    )
    train_auto_resume: bool = Field(
        False,
        description="Fault recovery: when training fails, and whenever the same command is run again, "
        "resume from the newest complete checkpoint the run saved under {af_output_dir}. Highest load "
        "priority: it wins over user_converted_ckpt_path once the run has saved a checkpoint.",
    )
    auto_resume: AutoResumeConfig = Field(
        default_factory=lambda: AutoResumeConfig.model_validate({}),
        description="Retry policy for train_auto_resume.",
    )
    save_total_limit: Int = Field(
        0,
        ge=0,
        description="Keep the newest N complete checkpoints (0 keeps all). The checkpoint a resume would "
        "load is never deleted.",
    )
    convert_mg2hf_at_last: bool = Field(True, description="Convert the final checkpoint to HF safetensors.")
    hf_save_dir: str | None = Field(
        None, description="Where the final HF weights go (default {af_output_dir}/ckpt_converted_mg2hf)."
    )
    processed_data_dir: str | None = Field(
        None,
        description="Already preprocessed data (6.5.90x key). Given => preprocessing is skipped; "
        "same as backend_config.training.data-path.",
    )
    model_name_or_path: str | None = Field(
        None,
        description="HF model directory (6.5.90x key); same as "
        "backend_config.training.tokenizer-name-or-path when that is not set.",
    )
    dataset: str | None = Field(
        None,
        description="Raw dataset path (6.5.90x key); same as "
        "backend_config.preprocess_data.input when that is not set.",
    )
    scripts_dir: str | None = Field(
        None,
        description="Framework checkout to run in (the MindSpeed-LLM, MindSpeed-MM or MindSpeed-RL "
        "directory). Default: env var AF_MINDSPEED_LLM_DIR / AF_MINDSPEED_MM_DIR / AF_MINDSPEED_RL_DIR.",
    )
    check_data_fit: bool = Field(
        True,
        description="SFT data against the sequence length, before training (backends torch and "
        "llamafactory): count the samples whose answer lies entirely past seq-length / cutoff_len (they "
        "train on nothing) and those cut short, warn with the counts and the length that keeps 95% of the "
        "answers whole, and refuse when most samples would train on nothing. false: warn only.",
    )
    shared_filesystem: bool = Field(
        True,
        description="Multi-node: af_output_dir is on a filesystem every node sees (as on ModelArts). "
        "Then only NODE_RANK 0 converts and preprocesses; the others wait for its manifest. false: every "
        "node does them locally.",
    )
    node_wait_timeout_s: Float = Field(
        1800.0,
        gt=0,
        description="Multi-node: how long other nodes wait for node 0's outputs, and how long "
        "torchrun waits for its peers (rendezvous / collective timeout).",
    )
    monitor_config: MonitorConfig | None = Field(
        None,
        description="Training monitor (MindSpore Transformers' monitor_config keys): monitor_on, dump_path, "
        "target, invert, step_interval, local_loss_format, local_norm_format, device_local_norm_format, "
        "optimizer_state_format, weight_state_format, throughput_baseline, print_struct "
        "(ascendfactory/monitors.py documents each).",
    )
    tensorboard: TensorboardConfig | None = Field(
        None,
        description="TensorBoard output: tensorboard_dir (or env MA_SUMMARY_LOG_DIR), "
        "tensorboard_queue_size, log_loss_scale_to_tensorboard, log_timers_to_tensorboard.",
    )
    report_to: ReportTo | None = Field(
        None,
        description="Experiment trackers: a list of tensorboard, mlflow, wandb, swanlab, or a mapping with "
        "settings per tracker (project, run_name, tracking_uri / dir, mode). Offline first: MLflow to a "
        "SQLite store under {af_output_dir}/trackers, W&B offline, SwanLab local. Each backend reaches them "
        "through its framework's own keys; a key the user wrote in the framework's spelling wins. "
        "ascendfactory/config/report_to.py documents every setting.",
    )
    memory_check: MemoryCheckConfig = Field(
        default_factory=lambda: MemoryCheckConfig.model_validate({}),
        description="Pre-launch memory estimate: on_exceed (error|warn|off), device_memory_gb, device.",
    )
    backend_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The backend's own configuration, in its own key style; validated by the backend.",
    )

    @field_validator("af_output_dir")
    @classmethod
    def _no_tilde_surprise(cls, v: str) -> str:
        import os

        return os.path.expanduser(v)
