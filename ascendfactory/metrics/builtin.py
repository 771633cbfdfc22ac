"""The names (and aliases) of the log formats and throughput formulas this package registers itself
(`metrics/formats.py`, `metrics/throughput.py`), as data: the planner checks a plan's names against them
without importing every log parser (`backends/planner.py`); a name not here is looked up in the
registries themselves (plugins). tests/unit/backends/test_registered_names.py holds them equal to what the
two modules register."""

from __future__ import annotations

FORMAT_NAMES = (
    "roll",
    "verl_jsonl",
    "verl-file",
    "llamafactory",
    "llama-factory",
    "lf",
    "trainer_log",
    "mindspeed_rl",
    "msrl",
    "megatron",
    "mindspeed-llm",
    "mindspeed_llm",
    "modellink",
    "mindspeed-mm",
    "mindspeed_mm",
    "megatron-deepspeed",
    "verl",
    "hf_console",
    "llamafactory-console",
)
FORMULA_NAMES = ("megatron", "mindspeed_mm", "llamafactory", "verl", "mindspeed_rl")
