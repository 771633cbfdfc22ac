"""Fixtures of the mindspeed-rl tests (the helpers live in msrl_helpers.py)."""

from msrl_helpers import clean_env, read  # noqa: F401  (fixtures)
