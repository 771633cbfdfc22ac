"""Loading a Hugging Face fast tokenizer without transformers, when that is provably the same tokenizer.

Importing transformers (and torch behind it) costs seconds, a large share of a preprocessing run. For the
tokenizer directories whose `AutoTokenizer` result is fully determined by `tokenizer.json` plus a few
`tokenizer_config.json` settings, `fast_spec` builds the same backend with the `tokenizers` library alone:

- `tokenizer_class` `PreTrainedTokenizerFast` / `TokenizersBackend`: transformers uses `tokenizer.json` as is;
- `tokenizer_class` `Qwen2Tokenizer`: transformers rebuilds the BPE from the file's vocabulary and merges
  with a fixed normalizer (NFC), pre-tokenizer (Qwen2's split pattern + byte level) and decoder (byte
  level). The file is used only when its own components are exactly those (compared as JSON), which is
  the case for real Qwen2/2.5/3 checkpoints and the demo tokenizer;
- which of the two AutoTokenizer picks also depends on config.json's `model_type` (`_effective_class`);
- the post-processor is the file's (transformers ignores `add_bos_token` / `add_eos_token` of the config
  when there is a `tokenizer.json`), or an empty template when the file has none.

Anything else — another tokenizer class, `auto_map` (remote code), config keys not listed in
`_PLAIN_KEYS`, special tokens that are not already special added tokens of the file, `added_tokens.json`,
a legacy `special_tokens_map.json` that would be read, a Mistral-like vocabulary transformers patches —
returns None and the caller loads with `AutoTokenizer`. `tests/unit/engine/data/test_fast_tokenizer.py`
checks the backend JSON and the ids against `AutoTokenizer` on each supported shape.
"""

from __future__ import annotations

import json
import os
from typing import Any

QWEN2_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast")
PLAIN_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
NAMED_SPECIALS = ("bos_token", "eos_token", "pad_token", "unk_token")
# tokenizer_config.json keys that do not change how text becomes ids (or are handled here).
_PLAIN_KEYS = frozenset(
    {
        *NAMED_SPECIALS,
        "add_bos_token",
        "add_eos_token",
        "add_prefix_space",
        "added_tokens_decoder",
        "additional_special_tokens",
        "extra_special_tokens",
        "backend",
        "chat_template",
        "clean_up_tokenization_spaces",
        "errors",
        "model_input_names",
        "model_max_length",
        "padding_side",
        "truncation_side",
        "split_special_tokens",
        "tokenizer_class",
    }
)
# Qwen2Tokenizer's split pattern (the regex of Qwen2's tokenizer.json).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_DEFAULTS = {
    "unk_token": "<|endoftext|>",
    "eos_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>",
    "bos_token": None,
}
_QWEN2_MODEL_TYPES = (None, "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "llama")
_PLAIN_BY_MODEL_TYPE: dict[str | None, str] = {
    None: "plain",
    "llama": "plain",
    "qwen3": "plain",
    "qwen2_moe": "plain",
    "qwen3_moe": "plain",
    "qwen2": "qwen2",
}
_HUB_LIKE_PREFIXES = ("deepseek-ai/", "allenai/", "google/", "naver-clova-ix/", "salesforce/", "stepfun-ai/")
_MISTRAL_TYPES = ("mistral", "mistral3", "voxtral", "ministral", "pixtral")
_TOKEN_FLAGS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _qwen2_components(add_prefix_space: bool) -> dict[str, Any]:
    """The JSON of the components Qwen2Tokenizer builds (model without vocabulary and merges)."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    tok = Tokenizer(
        BPE(
            vocab={},
            merges=[],
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    tok.decoder = decoders.ByteLevel()
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False),
        ]
    )
    return json.loads(tok.to_str())


def _without_tables(model: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model.items() if k not in ("vocab", "merges")}


def _qwen2_backend(data: dict[str, Any], config: dict[str, Any]) -> bool:
    """Make `data` (tokenizer.json) what Qwen2Tokenizer rebuilds from it; False if it would differ."""
    model = data.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        return False
    want = _qwen2_components(bool(config.get("add_prefix_space") or False))
    normalized = {
        **model,
        "continuing_subword_prefix": model.get("continuing_subword_prefix") or "",
        "end_of_word_suffix": model.get("end_of_word_suffix") or "",
    }
    if _without_tables(normalized) != _without_tables(want["model"]):
        return False
    if any(data.get(k) != want[k] for k in ("normalizer", "pre_tokenizer", "decoder")):
        return False
    # Added tokens are re-added in id order: each must keep its id (in the vocabulary, or the next new id).
    vocab: dict[str, int] = model["vocab"]
    next_id = len(vocab)
    for token in sorted(data.get("added_tokens") or [], key=lambda t: t["id"]):
        if token["content"] in vocab:
            if vocab[token["content"]] != token["id"]:
                return False
        elif token["id"] == next_id:
            next_id += 1
        else:
            return False
    data["model"] = normalized
    return True


def _specials(config: dict[str, Any], defaults: dict[str, Any]) -> dict[str, str | None] | None:
    """Named special tokens as strings (None if one is given in a form not handled here)."""
    out: dict[str, str | None] = {}
    for key in NAMED_SPECIALS:
        value = config.get(key, defaults.get(key))
        if value is not None and not isinstance(value, str):
            return None
        out[key] = value
    return out


def _extra_specials(config: dict[str, Any]) -> list[str] | None:
    extra: list[str] = []
    for key in ("additional_special_tokens", "extra_special_tokens"):
        value = config.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return None
        extra += value
    return extra


def _added_tokens_agree(config: dict[str, Any], added: list[dict[str, Any]]) -> bool:
    """The config's `added_tokens_decoder` (if any) describes exactly the file's added tokens."""
    decoder = config.get("added_tokens_decoder")
    if decoder is None:
        return True
    if not isinstance(decoder, dict):
        return False
    mine = {int(i): {k: t.get(k) for k in _TOKEN_FLAGS} for i, t in decoder.items() if isinstance(t, dict)}
    theirs = {t["id"]: {k: t.get(k) for k in _TOKEN_FLAGS} for t in added}
    return len(mine) == len(decoder) and mine == theirs


def _mistral_risk(path: str, vocab_size: int) -> bool:
    """Whether transformers might patch the pre-tokenizer (Mistral-like vocabularies above 100k)."""
    if vocab_size <= 100000:
        return False
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        return True
    model_type = _read_json(config_path).get("model_type")
    return model_type is None or model_type in _MISTRAL_TYPES


def _effective_class(path: str, declared: Any) -> str | None:
    """The class AutoTokenizer instantiates ("qwen2" or "plain"), when it is one handled here.

    AutoTokenizer weighs the declared class against the tokenizer class registered for config.json's
    `model_type` (transformers forces Qwen2Tokenizer on `qwen2` models, for one); this table holds the
    combinations checked against it, anything else is left to AutoTokenizer.
    """
    normalized = os.path.normpath(path).lower()
    if any(normalized.startswith(org) for org in _HUB_LIKE_PREFIXES):
        return None  # transformers matches some hub ids by name
    config_path = os.path.join(path, "config.json")
    model_type = (_read_json(config_path).get("model_type") or None) if os.path.isfile(config_path) else None
    if declared in QWEN2_CLASSES and model_type in _QWEN2_MODEL_TYPES:
        return "qwen2"
    if declared in PLAIN_CLASSES:
        return _PLAIN_BY_MODEL_TYPE.get(model_type)
    return None


def fast_backend(path: str) -> tuple[Any, dict[str, int | None]] | None:
    """(`tokenizers.Tokenizer`, named special ids) equal to AutoTokenizer's backend, or None if unsure."""
    tok_path, cfg_path = os.path.join(path, "tokenizer.json"), os.path.join(path, "tokenizer_config.json")
    if not (os.path.isfile(tok_path) and os.path.isfile(cfg_path)):
        return None
    if os.path.exists(os.path.join(path, "added_tokens.json")):
        return None
    try:
        config = _read_json(cfg_path)
        with open(tok_path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or not set(config) <= _PLAIN_KEYS or config.get("split_special_tokens"):
        return None
    if "added_tokens_decoder" not in config and os.path.exists(os.path.join(path, "special_tokens_map.json")):
        return None  # transformers would merge that legacy file into the config
    cls = _effective_class(path, config.get("tokenizer_class"))
    if cls is None:
        return None
    specials = _specials(config, _QWEN2_DEFAULTS if cls == "qwen2" else {})
    extra = _extra_specials(config)
    if specials is None or extra is None:
        return None
    if cls == "plain" and config.get("add_prefix_space") is not None:
        return None
    data = json.loads(text)
    added = data.get("added_tokens") or []
    if not _added_tokens_agree(config, added):
        return None
    special_added = {t["content"] for t in added if t.get("special")}
    if any(t not in special_added for t in [*specials.values(), *extra] if t is not None):
        return None  # transformers would add (or re-flag) them
    if cls == "qwen2":
        if not _qwen2_backend(data, config):
            return None
        text = json.dumps(data)
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(text)
    except Exception:  # tokenizers raises a bare Exception on bad JSON
        return None
    if _mistral_risk(path, tok.get_vocab_size(with_added_tokens=False)):
        return None
    if tok.post_processor is None:  # transformers then installs an empty template (no bos/eos)
        from tokenizers import processors

        tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    ids = {k: (None if v is None else tok.token_to_id(v)) for k, v in specials.items()}
    return tok, ids
