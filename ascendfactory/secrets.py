"""Secret-looking keys and their masking (ground floor): what the tool writes or prints shows `***` instead.

Secret: `hf_token`, `OBS_SECRET_ACCESS_KEY`, `apiKey`, `ak`, `db-password` (whole words of the key are
compared, so `max-tokens` and `tokenizer-name-or-path` are not secrets).
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
_SECRET_WORDS = {
    "token",
    "password",
    "passwd",
    "pwd",
    "secret",
    "ak",
    "sk",
    "apikey",
    "accesskey",
    "credential",
    "credentials",
    "privatekey",
}
_SECRET_PAIRS = {("access", "key"), ("api", "key"), ("secret", "key"), ("private", "key"), ("secret", "id")}


def is_secret_key(key: str) -> bool:
    """True when a word (or adjacent pair of words) of `key` names a secret (see the module docstring)."""
    words = [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", key) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(words, words[1:]))


def mask_secrets(value: Any) -> Any:
    """A copy of `value` with the values of secret-looking keys replaced by `***` (at any depth)."""
    if isinstance(value, dict):
        return {
            k: (MASK if is_secret_key(str(k)) and v not in (None, "") else mask_secrets(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value
