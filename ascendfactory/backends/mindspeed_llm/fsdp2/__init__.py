"""MindSpeed-LLM's FSDP2 trainer (`train_fsdp2.py`) as the second mode of the mindspeed-llm backend:
`keys` (its YAML keys, generated), `rules` (its checks across keys), `run` (reading and planning), `memory`
(its memory job)."""
