"""The preprocessing run: read records in order, tokenize chunks (optionally in a process pool), write.

Nothing is visible under the final names until every output is complete: builders write temporary files
and rename them at the end, and any failure (a bad record with `--on-bad-record fail`, Ctrl-C, an error in
a worker) deletes them.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from ascendfactory.engine.data import indexed
from ascendfactory.engine.data.handlers import HandlerConfig
from ascendfactory.engine.data.packing import pack
from ascendfactory.engine.data.sources import BadRecord, RawRecord, discover, iter_records
from ascendfactory.engine.data.tokenizer import TokenizerSpec, load_tokenizer_spec
from ascendfactory.engine.data.worker import ChunkProcessor, ChunkResult, init_worker, process_in_worker
from ascendfactory.errors import AscendFactoryError, ConfigError, Problem

CHUNK_SIZE = 1024
MAX_BAD_SHOWN = 10


class BadRecordError(AscendFactoryError):
    """An input record the handler cannot use, with `--on-bad-record fail`."""

    def __init__(self, bad: BadRecord) -> None:
        self.bad = bad
        super().__init__(
            f"{bad.render()}\n  fix: correct or remove that record, or pass --on-bad-record "
            "skip to leave bad records out (they are counted and listed)"
        )


class EmptyOutputError(AscendFactoryError):
    """Every record was skipped (or the input has none)."""


@dataclass
class Summary:
    """What a run wrote."""

    outputs: list[str] = field(default_factory=list)  # dataset prefixes (each has .bin and .idx)
    documents: int = 0
    tokens: int = 0
    skipped: list[BadRecord] = field(default_factory=list)
    seconds: float = 0.0


def _cli_problem(key: str, message: str, fix: str) -> Problem:
    return Problem(key=key, message=message, fix=fix, source="command line")


def handler_config(args: argparse.Namespace) -> HandlerConfig:
    """The handler settings from parsed arguments."""
    return HandlerConfig(
        name=args.handler_name or "GeneralPretrainHandler",
        json_keys=tuple(args.json_keys),
        prompt_type=args.prompt_type,
        map_keys=dict(args.map_keys or {}),
        append_eod=args.append_eod,
        seq_length=args.seq_length,
    )


def _output_prefixes(prefix: str, kind: str, keys: Iterable[str]) -> dict[str, str]:
    base = f"{prefix}_packed" if kind == "instruction" else prefix
    return {key: f"{base}_{key}_document" for key in keys}


def _chunks(records: Iterator[RawRecord], size: int) -> Iterator[list[RawRecord]]:
    chunk: list[RawRecord] = []
    for record in records:
        chunk.append(record)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Progress:
    """Megatron-style progress lines every `interval` documents."""

    def __init__(self, interval: int, stream: TextIO) -> None:
        self.interval, self.stream = max(1, interval), stream
        self.start = time.perf_counter()
        self.docs = self.tokens = self.nbytes = 0
        self._next = self.interval

    def update(self, docs: int, tokens: int, nbytes: int) -> None:
        self.docs, self.tokens, self.nbytes = self.docs + docs, self.tokens + tokens, self.nbytes + nbytes
        if self.docs >= self._next:
            self._next = (self.docs // self.interval + 1) * self.interval
            elapsed = max(time.perf_counter() - self.start, 1e-9)
            print(
                f"Processed {self.docs} documents ({self.docs / elapsed:.1f} docs/s, "
                f"{self.tokens / elapsed:.0f} tokens/s, {self.nbytes / elapsed / 1e6:.2f} MB/s).",
                file=self.stream,
                flush=True,
            )

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def _results(
    args: argparse.Namespace,
    cfg: HandlerConfig,
    spec: TokenizerSpec,
    processor: ChunkProcessor,
    chunks: Iterator[list[RawRecord]],
    stack: ExitStack,
) -> Iterator[ChunkResult]:
    if args.workers <= 1:
        return map(processor, chunks)
    pool = stack.enter_context(
        multiprocessing.get_context("spawn").Pool(args.workers, initializer=init_worker, initargs=(cfg, spec))
    )
    return pool.imap(process_in_worker, chunks)


def _validate(args: argparse.Namespace, kind: str, spec: TokenizerSpec) -> None:
    problems = []
    if args.pack and kind == "pretrain":
        problems.append(
            _cli_problem(
                "--pack",
                "pre-training data processing does not need to be packed",
                "drop --pack, or use an instruction --handler-name",
            )
        )
    if (args.pack or args.neat_pack) and not args.seq_length:
        problems.append(_cli_problem("--seq-length", "--pack needs the row length", "pass --seq-length N"))
    if args.append_eod and spec.eos_id is None:
        problems.append(
            _cli_problem(
                "--append-eod",
                f"the tokenizer at {spec.path} has no eos token",
                "use a tokenizer with an eos token, or drop --append-eod",
            )
        )
    if problems:
        raise ConfigError(problems)


def run(args: argparse.Namespace, *, log: TextIO | None = None) -> Summary:
    """Preprocess `args.input` into indexed datasets under `args.output_prefix` (progress to `log`)."""
    log = log or sys.stderr
    cfg = handler_config(args)
    files = discover(args.input)
    spec = load_tokenizer_spec(
        args.tokenizer_name_or_path,
        use_fast=not args.tokenizer_not_use_fast,
        trust_remote_code=args.trust_remote_code,
    )
    processor = ChunkProcessor(cfg, spec)  # validates the handler, template and tokens before any work
    kind, keys = processor.handler.kind, processor.handler.output_keys
    _validate(args, kind, spec)
    token_dtype = indexed.optimal_dtype(spec.vocab_size)
    prefixes = _output_prefixes(args.output_prefix, kind, keys)
    packing = kind == "instruction" and (args.pack or args.neat_pack)
    summary = Summary(outputs=list(prefixes.values()))
    progress = _Progress(args.log_interval, log)
    print(
        f"Preprocessing {len(files)} file(s) with {cfg.name}, {args.workers} worker(s) -> "
        f"{', '.join(summary.outputs)}",
        file=log,
        flush=True,
    )
    with ExitStack() as stack:
        builders = {
            key: stack.enter_context(
                indexed.IndexedDatasetBuilder(prefixes[key], np.int32 if key == "labels" else token_dtype)
            )
            for key in keys
        }
        kept: list[dict[str, np.ndarray]] = []
        fits: list[tuple[bool, int]] = []
        chunk_size = min(CHUNK_SIZE, max(64, args.log_interval))  # affects speed and progress, never output
        chunks = _chunks(iter_records(files, args.max_samples), chunk_size)
        for result in _results(args, cfg, spec, processor, chunks, stack):
            if result.bad:
                if args.on_bad_record == "fail":
                    raise BadRecordError(result.bad[0])
                summary.skipped.extend(result.bad)
            if packing:
                kept.extend(_split(result))
            else:
                for key, (flat, lengths) in result.arrays.items():
                    builders[key].add_documents(flat, lengths)
            fits.extend(result.fit)
            summary.documents += result.n_docs
            summary.tokens += result.n_tokens
            progress.update(result.n_docs, result.n_tokens, result.n_bytes)
        if args.seq_length and fits:
            _report_truncation(args.seq_length, fits, log)
        if packing:
            rows, dropped = pack(kept, seq_length=args.seq_length, pad_id=_pad_id(spec), neat=args.neat_pack)
            for row in rows:
                for key in keys:
                    builders[key].add_document(row[key])
            print(
                f"Packed {len(kept) - dropped} samples into {len(rows)} rows of {args.seq_length} tokens "
                f"({dropped} longer than --seq-length left out).",
                file=log,
                flush=True,
            )
            summary.documents = len(rows)
        if summary.documents == 0:
            raise EmptyOutputError(
                f"no documents were written from {args.input} ({len(summary.skipped)} bad records skipped); "
                "nothing was saved"
            )
        for builder in builders.values():
            builder.finalize()
    summary.seconds = progress.elapsed
    return summary


def _report_truncation(seq_length: int, fits: list[tuple[bool, int]], log: TextIO) -> None:
    """A warning with the samples whose answer `--seq-length` cut short (MindSpeed-LLM's truncation keeps
    at least one answer token per kept turn, so none trains on nothing) and the length keeping 95% whole."""
    from ascendfactory.engine.data.fit import KEEP_FRACTION

    cut = sum(1 for c, _ in fits if c)
    if not cut:
        return
    lengths = sorted(n for _, n in fits)
    keep = lengths[max(0, math.ceil(KEEP_FRACTION * len(lengths)) - 1)]
    print(
        f"WARNING: {cut} of {len(fits)} samples ({100 * cut / len(fits):.0f}%) have their answer cut short "
        f"by --seq-length {seq_length} (prompt and answer shortened in proportion, at least one answer token "
        f"kept per turn); --seq-length {keep} would keep 95% of the samples whole",
        file=log,
        flush=True,
    )


def _pad_id(spec: TokenizerSpec) -> int:
    for candidate in (spec.pad_id, spec.eos_id):
        if candidate is not None:
            return candidate
    return 0


def _split(result: ChunkResult) -> list[dict[str, np.ndarray]]:
    per_key = {
        key: np.split(flat, np.cumsum(lengths)[:-1]) if len(lengths) else []
        for key, (flat, lengths) in result.arrays.items()
    }
    return [{key: arrays[i] for key, arrays in per_key.items()} for i in range(result.n_docs)]


def bad_record_report(skipped: list[BadRecord]) -> str:
    """The skipped records, the first few listed."""
    lines = [f"skipped {len(skipped)} bad record{'s' if len(skipped) != 1 else ''}:"]
    lines += [f"  {b.render()}" for b in skipped[:MAX_BAD_SHOWN]]
    if len(skipped) > MAX_BAD_SHOWN:
        lines.append(f"  ... and {len(skipped) - MAX_BAD_SHOWN} more")
    return "\n".join(lines)


def describe(summary: Summary) -> str:
    """A short, human summary of the run."""
    rate = summary.tokens / summary.seconds if summary.seconds else 0.0
    text = (
        f"Wrote {summary.documents} documents, {summary.tokens} tokens in {summary.seconds:.2f}s "
        f"({rate:.0f} tokens/s):"
    )
    return "\n".join([text, *(f"  {p}.bin / {p}.idx" for p in summary.outputs)])
