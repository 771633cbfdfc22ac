"""Which trainer a mindspeed-llm experiment names (`backend_config.trainer`): a light module, read by every
mindspeed-llm plan; `run` (the FSDP2 trainer's reading and planning) is imported only for `trainer: fsdp2`."""

from __future__ import annotations

from ascendfactory.backends.base import PlanContext
from ascendfactory.errors import Problem

TRAINER_KEY = "backend_config.trainer"
TRAINERS = ("megatron", "fsdp2")
SECTION_KEY = "backend_config.fsdp2"


def trainer_of(ctx: PlanContext) -> tuple[str, list[Problem]]:
    """`backend_config.trainer`: megatron (default) or fsdp2."""
    value = (ctx.config.backend_config or {}).get("trainer")
    if value is None or value in TRAINERS:
        return value or "megatron", []
    return "megatron", [
        ctx.problem(TRAINER_KEY, f"'{value}' is not a trainer", fix="use megatron (the default) or fsdp2")
    ]
