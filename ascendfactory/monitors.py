"""The training monitor keys of an experiment (docs/sources.md#training-monitor), modelled once (ground
floor).

`monitor_config` and `tensorboard` are top-level keys of the experiment file (`config.schema` validates
them when the file is loaded, so `--dry-run` refuses a bad value) and the embedded trainer reads the same
keys back from the resolved `exp-config.yaml` (`engine.train.monitor`) through the same models.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator


def _as_list(value: Any) -> Any:
    """'log' -> ['log']; null -> []; a list stays a list."""
    return [] if value is None else [value] if isinstance(value, str) else value


Format = Literal["log", "tensorboard"]
FormatSpec = Annotated[list[Format], BeforeValidator(_as_list)]  # written as 'log', a list, or null


class MonitorConfig(BaseModel):
    """Per-step monitor of losses, norms and optimizer state (MindFormers' `monitor_config`)."""

    model_config = ConfigDict(extra="forbid")

    monitor_on: bool = Field(False, description="Turn the monitor on.")
    dump_path: str = Field("./dump", description="Where dumped states go.")
    target: list[str] = Field(
        [".*"], description="Regular expressions of the parameter names watched (a string or a list)."
    )
    invert: bool = Field(False, description="Watch the parameters `target` does NOT match.")
    step_interval: int = Field(1, ge=1, le=1_000_000, description="Watch every N steps.")
    local_loss_format: FormatSpec = Field([], description="'log', 'tensorboard', both (a list) or null.")
    local_norm_format: FormatSpec = Field([], description="Per-parameter gradient norms: as above.")
    device_local_norm_format: FormatSpec = Field([], description="Per-device gradient norms: as above.")
    optimizer_state_format: FormatSpec = Field([], description="Adam moment norms: as above.")
    weight_state_format: FormatSpec = Field([], description="Weight norms: as above.")
    throughput_baseline: float | None = Field(
        None, gt=0, description="Expected tokens/s per device; the log then shows throughput as its ratio."
    )
    print_struct: bool = Field(False, description="Print the model structure once.")

    @field_validator("target", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("target")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{pattern!r} is not a regular expression ({e})") from None
        return value


class TensorboardConfig(BaseModel):
    """TensorBoard event files (Megatron's tensorboard flags)."""

    model_config = ConfigDict(extra="forbid")

    tensorboard_dir: str | None = Field(
        None, description="Directory of the event files (default env MA_SUMMARY_LOG_DIR, as on ModelArts)."
    )
    tensorboard_queue_size: int = Field(10, ge=1, le=100_000, description="Events buffered before a write.")
    log_loss_scale_to_tensorboard: bool = Field(False, description="Also log the loss scale.")
    log_timers_to_tensorboard: bool = Field(False, description="Also log the step timers.")


def formats(spec: Any) -> list[str]:
    """A format key's value as a sorted list ('log', 'tensorboard')."""
    return sorted(set(_as_list(spec)))
