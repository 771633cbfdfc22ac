"""The tokenizer as preprocessing sees it: loaded once, then shipped to workers light.

`load_tokenizer_spec` loads `--tokenizer-name-or-path` as `AutoTokenizer` does (the same object training and
MindSpeed-LLM use) and records what the handlers need: the fast tokenizer serialized as JSON, the vocabulary
size and the special token ids. When `tokenizer.json` and `tokenizer_config.json` determine that tokenizer
exactly (`fast_tokenizer.fast_backend`), it is built with the `tokenizers` library alone, which saves the
seconds of importing transformers and torch; otherwise `AutoTokenizer` loads it
(`AF_TOKENIZER_LOADER=transformers` forces that). Worker processes rebuild an `Encoder` from that spec with
the `tokenizers` library alone, so they start fast and never import transformers. The ids are those of the
HF tokenizer's `__call__` / `encode(..., add_special_tokens=...)`: a fast tokenizer *is* its backend plus
this config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ascendfactory.errors import ConfigError, Problem


@dataclass(frozen=True)
class TokenizerSpec:
    """Everything a worker needs to tokenize like the HF tokenizer at `path`."""

    path: str
    backend_json: str | None  # None: a slow tokenizer, reloaded with transformers in each worker
    vocab_size: int  # len(tokenizer): base vocabulary plus added tokens
    eos_id: int | None
    bos_id: int | None
    pad_id: int | None
    trust_remote_code: bool = False


def _problem(message: str, fix: str, key: str = "--tokenizer-name-or-path") -> ConfigError:
    return ConfigError(Problem(key=key, message=message, fix=fix, source="command line"))


def _load_hf(path: str, *, use_fast: bool, trust_remote_code: bool) -> Any:
    if not os.path.isdir(path):
        raise _problem(
            f"{path!r} is not a directory",
            "pass a local Hugging Face model/tokenizer directory (no hub downloads are made)",
        )
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            path, use_fast=use_fast, trust_remote_code=trust_remote_code, local_files_only=True
        )
    except Exception as e:  # transformers raises many types (OSError, ValueError, ...)
        raise _problem(
            f"cannot load a tokenizer from {path!r}: {e}",
            "the directory needs tokenizer.json or the slow tokenizer's files",
        ) from e


def load_tokenizer_spec(
    path: str, *, use_fast: bool = True, trust_remote_code: bool = False
) -> TokenizerSpec:
    """Load the HF tokenizer at `path` and describe it for the workers."""
    if use_fast and os.environ.get("AF_TOKENIZER_LOADER", "") != "transformers" and os.path.isdir(path):
        from ascendfactory.engine.data.fast_tokenizer import fast_backend

        fast = fast_backend(path)
        if fast is not None:
            backend, ids = fast
            return TokenizerSpec(
                path=path,
                backend_json=backend.to_str(),
                vocab_size=backend.get_vocab_size(with_added_tokens=True),
                eos_id=ids["eos_token"],
                bos_id=ids["bos_token"],
                pad_id=ids["pad_token"],
                trust_remote_code=trust_remote_code,
            )
    tok = _load_hf(path, use_fast=use_fast, trust_remote_code=trust_remote_code)
    backend = tok.backend_tokenizer.to_str() if use_fast and getattr(tok, "is_fast", False) else None
    return TokenizerSpec(
        path=path,
        backend_json=backend,
        vocab_size=len(tok),
        eos_id=tok.eos_token_id,
        bos_id=tok.bos_token_id,
        pad_id=tok.pad_token_id,
        trust_remote_code=trust_remote_code,
    )


class Encoder:
    """Worker-side tokenizer: batch encoding and token lookup."""

    def __init__(self, spec: TokenizerSpec) -> None:
        self.spec = spec
        self._hf: Any = None
        if spec.backend_json is not None:
            from tokenizers import Tokenizer

            self._tok: Any = Tokenizer.from_str(spec.backend_json)
            self._tok.no_truncation()
            self._tok.no_padding()
            self._batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        else:
            self._hf = _load_hf(spec.path, use_fast=False, trust_remote_code=spec.trust_remote_code)

    def encode_batch(self, texts: list[str], *, add_special_tokens: bool) -> list[list[int]]:
        """Token ids of each text, as the HF tokenizer's `encode(text, add_special_tokens=...)`."""
        if not texts:
            return []
        if self._hf is not None:
            return [self._hf.encode(t, add_special_tokens=add_special_tokens) for t in texts]
        return [e.ids for e in self._batch(texts, add_special_tokens=add_special_tokens)]

    def token_id(self, token: str) -> int | None:
        """The id of a token given by its text (a special token such as `<|im_end|>`), or None."""
        if self._hf is not None:
            tid = self._hf.convert_tokens_to_ids(token)
            return None if tid == self._hf.unk_token_id and token != self._hf.unk_token else tid
        return self._tok.token_to_id(token)
