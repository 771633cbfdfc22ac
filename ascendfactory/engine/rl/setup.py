"""Checks and pieces of the GRPO trainer's set-up that need the world size, the data or the tokenizer."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from ascendfactory.engine.train import logline, monitor
from ascendfactory.errors import ConfigError, ParallelismError, Problem


def check_batches(*, gbs: int, mini: int, n: int, dims: Any, rl: dict, world_size: int, source: str) -> None:
    """Prompts are dealt to data-parallel ranks mini-batch by mini-batch, samples to micro-batches."""
    dp, mbs = dims.dp, dims.micro_batch_size
    problems = []

    def bad(key: str, message: str, fix: str) -> None:
        problems.append(Problem(key=key, message=message, fix=fix, source=source))

    if gbs % mini:
        bad(
            "rl_config.mini_batch_size",
            f"global_batch_size ({gbs}) is not a multiple of it ({mini})",
            "use a divisor of global_batch_size",
        )
    if mini % dp:
        bad(
            "rl_config.mini_batch_size",
            f"{mini} prompts cannot be split over {dp} data-parallel ranks",
            f"use a multiple of {dp}",
        )
    elif (mini // dp * n) % mbs:
        bad(
            "actor_config.micro_batch_size",
            f"mini_batch_size // data_parallel ({mini // dp}) * n_samples ({n}) = {mini // dp * n} samples "
            f"per rank and step are not a multiple of micro_batch_size ({mbs})",
            "use a micro_batch_size dividing that",
        )
    num = (rl["actor_resource"] or {}).get("num_npus")
    if num is not None and num != world_size:
        bad("rl_config.actor_resource.num_npus", f"{num}, but {world_size} processes run", "make them equal")
    if problems:
        raise ParallelismError(problems)


def check_prompts(longest: int, *, rl: dict, seq_length: int, source: str) -> None:
    limit = min(int(rl["max_prompt_length"]), seq_length - 1)
    if longest > limit:
        raise ConfigError(
            Problem(
                key="rl_config.max_prompt_length",
                message=f"the longest prompt has {longest} tokens; max_prompt_length / seq_length "
                f"allow {limit}",
                fix="raise max_prompt_length and seq_length, or shorten the prompts",
                source=source,
            )
        )


def stop_ids(tokenizer: Any, model_dir: str) -> tuple[int, ...]:
    """The tokenizer's eos and generation_config.json's eos ids (vLLM stops at both)."""
    ids = {tokenizer.eos_token_id}
    try:
        from transformers import GenerationConfig

        gen = GenerationConfig.from_pretrained(model_dir).eos_token_id
        ids.update(gen if isinstance(gen, list) else [gen])
    except OSError:
        pass
    return tuple(sorted(i for i in ids if i is not None))


def tensorboard(directory: str | None) -> monitor.Monitor:
    """The first rank's writer: `directory`, else MindSpeed-RL's `./runs/<date>_<host>`."""
    from ascendfactory.monitors import MonitorConfig, TensorboardConfig

    directory = directory or os.path.join("runs", f"{datetime.now():%b%d_%H-%M-%S}_{os.uname().nodename}")
    return monitor.Monitor(
        MonitorConfig().model_dump(),
        TensorboardConfig(tensorboard_dir=directory).model_dump(),
        rank=0,
        print_fn=logline.emit,
    )


def metrics_file(directory: str) -> str:
    """`<directory>/grpo_metrics-<YYYYmmdd_HHMMSS>.log` (AscendFactory's name for the metric lines)."""
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f"grpo_metrics-{datetime.now():%Y%m%d_%H%M%S}.log")
