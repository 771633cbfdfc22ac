"""MindSpeed-RL per-iteration lines (printed by the last rank, usually tee'd into `grpo_metrics-*.log`).

Shape: `<asctime> - INFO - [YYYY-MM-DD HH:MM:SS] iteration: N / T | key : value | key : value `
(spaces around `/` and `:`, no trailing `|`). Keys are kept as logged: `timing/all`,
`timing/update`, `timing/rollout`, ..., `actor/pg_loss`, `actor/lr`, `grad_norm`,
`<verifier>_rewards/mean`, `grpo/score/mean`, `response_length/mean`, `e2e_tps`, `update_tps`,
`vllm_tps`.
"""

from __future__ import annotations

import re

from ascendfactory.metrics.megatron import iteration_record, parse_fields
from ascendfactory.metrics.record import Record

NAME = "mindspeed_rl"
TPS_KEYS = ("e2e_tps", "update_tps", "vllm_tps")  # its throughputs, per device: end to end, update, rollout

_HEAD = re.compile(r"iteration:\s*(\d+)\s*/\s*(\d+)")
_NONE: tuple[Record, ...] = ()


def sniff(line: str) -> bool:
    i = line.find("iteration:")
    return i >= 0 and _HEAD.match(line, i) is not None


class MindSpeedRLParser:
    name = NAME

    def feed(self, line: str) -> tuple[Record, ...]:
        i = line.find("iteration:")
        if i < 0:
            return _NONE
        m = _HEAD.match(line, i)
        if m is None:
            return _NONE
        metrics = parse_fields(line[m.end() :])
        if not metrics:
            return _NONE
        return (iteration_record(m, metrics, line[:i]),)

    def flush(self) -> tuple[Record, ...]:
        return _NONE
