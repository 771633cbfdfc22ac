"""The `mindspeed-llm` backend: MindSpeed-LLM's own programs, run in its checkout."""

from ascendfactory.backends.mindspeed_llm import backend as backend  # registers MindSpeedLLMBackend
