"""Secret-looking keys and their masking (ground floor): what the tool writes or prints shows `***` instead.

Secret: `hf_token`, `hub_token`, `OBS_SECRET_ACCESS_KEY`, `apiKey`, `ak`, `db-password`, `swanlab_api_key`.
Whole words of the key are compared, so `max-tokens` and `tokenizer-name-or-path` are not secrets; `token`
counts only as the key's last word and not after a vocabulary word (`add-eos-token`, `placeholder-token`
and `ignore_pad_token_for_loss` are training options, not credentials).
"""

from __future__ import annotations

import functools
import re
from typing import Any

MASK = "***"
MIN_KNOWN = 3  # a shorter value under a secret key is no credential, and masking it would garble text
_known: set[str] = set()  # values found under secret keys of the experiment this process loaded
_SECRET_WORDS = {
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


# `<word>-token` that names a kind of vocabulary token, not a credential
_VOCABULARY_WORDS = {
    "eos",
    "bos",
    "pad",
    "unk",
    "sep",
    "cls",
    "mask",
    "placeholder",
    "special",
    "cut",
    "image",
    "video",
    "audio",
    "start",
    "end",
    "stop",
    "per",
    "first",
    "last",
    "next",
}


@functools.lru_cache(maxsize=8192)  # the same keys recur in every plan (a bulk dry run masks thousands)
@functools.lru_cache(maxsize=4096)  # a function of the text: a bulk dry run asks about the same keys often
def is_secret_key(key: str) -> bool:
    """True when a word (or adjacent pair of words) of `key` names a secret (see the module docstring)."""
    words = [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", key) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    if words and words[-1] == "token" and (len(words) == 1 or words[-2] not in _VOCABULARY_WORDS):
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


def mask_argv(command: str) -> str:
    """A command line (for logs) with the values of secret-named flags and `key=value` items masked."""
    import shlex

    words = shlex.split(command)
    out: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        name, eq, _ = word.partition("=")
        bare = name.lstrip("-+").rsplit(".", 1)[-1]
        if eq and is_secret_key(bare):
            out.append(f"{name}={MASK}")
        elif word.startswith("--") and not eq and is_secret_key(bare):
            out.append(word)
            hide_next = True
        else:
            out.append(word)
    return shlex.join(out)


def mask_text(text: str) -> tuple[str, bool]:
    """A config file's text (YAML or JSON) with secret values masked, and whether anything was; text that
    is no mapping is returned as it is."""
    import json

    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return text, False
    if not isinstance(data, (dict, list)):
        return text, False
    masked = mask_secrets(data)
    if masked == data:
        return text, False
    if text.lstrip().startswith(("{", "[")):
        return json.dumps(masked, indent=2) + "\n", True
    return yaml.safe_dump(masked, sort_keys=False, allow_unicode=True), True


def remember(value: Any) -> None:
    """Note the values under secret keys of `value` (an experiment tree) so that `mask_known` hides them in
    any text: an error message that quotes a value, a warning, the `show` of an unknown key."""
    if isinstance(value, dict):
        for k, v in value.items():
            if is_secret_key(str(k)):
                _remember_value(v)
            else:
                remember(v)
    elif isinstance(value, list):
        for v in value:
            remember(v)


def _remember_value(value: Any) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _remember_value(v)
    elif isinstance(value, list):
        for v in value:
            _remember_value(v)
    elif value is not None and not isinstance(value, bool):
        text = str(value)
        if len(text) >= MIN_KNOWN:
            _known.add(text)


def mask_known(text: str) -> str:
    """`text` with every remembered secret value replaced by `***` (where it stands as a word of its own:
    quoted, after `=`, between spaces)."""
    if not _known or not text:
        return text
    for value in sorted(_known, key=len, reverse=True):
        if value in text:
            text = re.sub(rf"(?<![\w]){re.escape(value)}(?![\w])", MASK, text)
    return text


def forget_known() -> None:
    """Drop the remembered values (tests; a process that loads another experiment)."""
    _known.clear()
