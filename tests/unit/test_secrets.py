"""Which keys are secrets (their values are masked wherever the tool writes or prints them)."""

from __future__ import annotations

import pytest

from ascendfactory.secrets import is_secret_key


@pytest.mark.parametrize(
    "key, secret",
    [
        ("hf_token", True),
        ("HF_TOKEN", True),
        ("password", True),
        ("db-password", True),
        ("apiKey", True),
        ("api_key", True),
        ("OBS_SECRET_ACCESS_KEY", True),
        ("access_key_id", True),
        ("ak", True),
        ("sk", True),
        ("tokenizer-name-or-path", False),
        ("max-tokens", False),
        ("seq-length", False),
        ("task", False),
        ("mask", False),
        ("skip", False),
    ],
)
def test_secret_keys(key, secret):
    assert is_secret_key(key) is secret
