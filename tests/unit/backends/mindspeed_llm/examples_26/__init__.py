"""The examples of the 26.1.0 rules in backends/mindspeed_llm/rules_26_*.py, one module per rule module."""
