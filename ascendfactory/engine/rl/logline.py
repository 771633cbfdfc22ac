"""MindSpeed-RL's per-iteration line (`Loggers.handle_msg` in `grpo_trainer_hybrid.fit`), pure functions.

    2026-01-02 03:04:05,678 - INFO - [2026-01-02 03:04:05] iteration: 3 / 40 | timing/all : 1.2345 | ... |
        actor/lr : 1.000000e-03 | ... | e2e_tps : 123.4567 | update_tps : 234.5678 | vllm_tps : 345.6789

Keys: the timings in MindSpeed-RL's fixed order, then the reward-side timings, then every other metric
alphabetically (`actor/*`, `<verifier>_rewards/mean`), then `grpo/score/*`, `response_length/*`,
`prompt_length/*` and last `e2e_tps`, `update_tps`, `vllm_tps`. Values `.4f`; keys containing `lr` `:e`.
The timestamp in brackets is UTC; the logging prefix is local time, as Python's logging writes it.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

TIMING_ORDER = (
    "timing/all",
    "timing/update",
    "timing/rollout",
    "timing/old_log_p",
    "timing/reference_model",
    "timing/resharding_to_infer",
    "timing/resharding_to_train",
    "timing/adv",
    "timing/non_overlap_reference_model",
)
SPECIAL_TIMINGS = (
    "timing/non_overlap_rule_reward",
    "timing/non_overlap_reward_model",
    "timing/non_overlap_adv",
    "timing/rule_reward",
    "timing/reward_model",
    "timing/ref_onload",
    "timing/ref_offload",
    "timing/critic_model",
    "timing/update_critic",
)


def order_metrics(trainer: dict[str, float], data: dict[str, float]) -> dict[str, float]:
    """`trainer` metrics (timings, actor/*, rewards) sorted as `metrics_sort` does, then `data` (score and
    lengths, in their given order) and the TPS keys, in that order."""
    ordered = {k: trainer[k] for k in TIMING_ORDER if k in trainer}
    ordered.update({k: trainer[k] for k in sorted(trainer) if k in SPECIAL_TIMINGS})
    ordered.update({k: trainer[k] for k in sorted(trainer) if k not in ordered})
    ordered.update(data)
    return ordered


def _value(key: str, value: float) -> str:
    return f"{value:e}" if "lr" in key else format(value, ".4f")


def format_line(metrics: dict[str, float], iteration: int, total: int, now: float | None = None) -> str:
    """The whole line as MindSpeed-RL's logger prints it (logging prefix included)."""
    now = time.time() if now is None else now
    local = datetime.fromtimestamp(now)
    prefix = f"{local:%Y-%m-%d %H:%M:%S},{int(now * 1000) % 1000:03d} - INFO - "
    utc = datetime.fromtimestamp(now, tz=timezone.utc)
    body = f"[{utc:%Y-%m-%d %H:%M:%S}] iteration: {iteration} / {total} | "
    body += "".join(f"{k} : {_value(k, v)} | " for k, v in metrics.items())
    return prefix + body[:-2]


def tps(data: dict[str, float], *, gbs: int, n: int, world_size: int, seconds: float, use_max: bool) -> float:
    """MindSpeed-RL's `compute_tps`: (response + prompt length, max or mean) x GBS x n / world / seconds."""
    kind = "max" if use_max else "mean"
    tokens = data[f"response_length/{kind}"] + data[f"prompt_length/{kind}"]
    return tokens * gbs * n / world_size / seconds if seconds > 0 else 0.0


def non_overlap_timings(spans: dict[str, tuple[float, float]]) -> dict[str, float]:
    """The `timing/non_overlap_*` values from phase (start, end) wall times, with MindSpeed-RL's formulas:
    the part of a phase that ends after the old-log-prob pass (or the reference pass when skipped)."""
    ref = spans.get("reference_model")
    old_end = spans["old_log_p"][1] if "old_log_p" in spans else (ref[1] if ref else 0.0)
    out = {}
    if ref is not None:
        out["timing/non_overlap_reference_model"] = max(ref[1] - max(old_end, ref[0]), 0.0)
    if "old_log_p" not in spans and ref is None:
        out["timing/non_overlap_adv"] = spans["adv"][1] - spans["adv"][0]
    else:
        out["timing/non_overlap_adv"] = max(spans["adv"][1] - old_end, 0.0)
    if "rule_reward" in spans:
        start, end = spans["rule_reward"]
        out["timing/non_overlap_rule_reward"] = max(end - max(old_end, start), 0.0)
    return out
