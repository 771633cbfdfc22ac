"""Tokenizing one chunk of records, in the main process (`--workers 1`) or in a worker process.

A chunk's result holds, per output key, the documents' tokens flattened into one int32 array plus their
lengths, so it crosses process boundaries as a few buffers instead of many small lists. Chunks are handed
out and collected in order (`Pool.imap`), so the output does not depend on the worker count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from ascendfactory.engine.data.handlers import HandlerConfig, RecordError, handler_class
from ascendfactory.engine.data.sources import BadRecord, RawRecord, parse
from ascendfactory.engine.data.tokenizer import Encoder, TokenizerSpec


@dataclass
class ChunkResult:
    """The documents of one chunk, per output key, and the records that could not be used."""

    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # key -> (tokens, lens)
    bad: list[BadRecord] = field(default_factory=list)
    n_docs: int = 0
    n_tokens: int = 0  # tokens of the first output key
    n_bytes: int = 0  # input bytes of JSON Lines records (0 for parsed inputs)
    # instruction handlers with --seq-length: (answer cut short?, untruncated tokens) per document
    fit: list[tuple[bool, int]] = field(default_factory=list)


class ChunkProcessor:
    """A handler bound to a tokenizer; `__call__` processes one chunk."""

    def __init__(self, cfg: HandlerConfig, spec: TokenizerSpec) -> None:
        self.handler = handler_class(cfg.name)(cfg, Encoder(spec))

    def __call__(self, chunk: list[RawRecord]) -> ChunkResult:
        result = ChunkResult()
        items = []
        for raw in chunk:
            if isinstance(raw.payload, str):
                result.n_bytes += len(raw.payload)
            record = parse(raw)
            if isinstance(record, BadRecord):
                result.bad.append(record)
                continue
            try:
                items.append(self.handler.extract(record))
            except RecordError as e:
                result.bad.append(BadRecord(raw.source, raw.line, str(e)))
        docs = self.handler.encode(items) if items else []
        result.n_docs = len(docs)
        result.fit = list(getattr(self.handler, "fit", None) or []) if items else []
        for k, key in enumerate(self.handler.output_keys):
            lengths = np.fromiter((len(d[key]) for d in docs), dtype=np.int64, count=len(docs))
            flat = np.fromiter(
                chain.from_iterable(d[key] for d in docs), dtype=np.int32, count=int(lengths.sum())
            )
            result.arrays[key] = (flat, lengths)
            if k == 0:
                result.n_tokens = int(lengths.sum())
        return result


_PROCESSOR: ChunkProcessor | None = None


def init_worker(cfg: HandlerConfig, spec: TokenizerSpec) -> None:
    """Pool initializer: one tokenizer per worker, single-threaded (the pool is the parallelism)."""
    global _PROCESSOR
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _PROCESSOR = ChunkProcessor(cfg, spec)


def process_in_worker(chunk: list[RawRecord]) -> ChunkResult:
    """Pool task: process a chunk with this worker's processor."""
    assert _PROCESSOR is not None, "init_worker was not run"  # internal invariant, not user input
    return _PROCESSOR(chunk)
