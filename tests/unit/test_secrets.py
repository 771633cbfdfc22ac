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
        ("hub_token", True),
        ("ms_hub_token", True),
        ("token", True),
        ("swanlab_api_key", True),
        ("swanlab_lark_secret", True),
        ("add-eos-token", False),
        ("placeholder-token", False),
        ("no-cut-token", False),
        ("ignore_pad_token_for_loss", False),
        ("calculate-per-token-loss", False),
        ("moe-token-dispatcher-type", False),
        ("max-tokens", False),
        ("seq-length", False),
        ("task", False),
        ("mask", False),
        ("skip", False),
    ],
)
def test_secret_keys(key, secret):
    assert is_secret_key(key) is secret


def test_mask_argv_hides_secret_flag_values_and_overrides():
    from ascendfactory.secrets import mask_argv

    line = "prog --hf-token abc --lr 1e-5 trainer.wandb_api_key=xyz --password=pw --add-eos-token"
    assert mask_argv(line) == (
        "prog --hf-token '***' --lr 1e-5 'trainer.wandb_api_key=***' '--password=***' --add-eos-token"
    )
