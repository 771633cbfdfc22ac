"""Input discovery and reading: json (array or JSON Lines), jsonl and parquet files, or a directory of them.

Records are yielded in a fixed order (files sorted by name, then file order) with their location, so a bad
record can be reported as `file:line` and the output is the same whatever the worker count. JSON Lines are
yielded unparsed (the workers parse them, in parallel); arrays and parquet rows as dicts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ascendfactory.errors import ConfigError, Problem

SUFFIXES = (".json", ".jsonl", ".parquet")


class RawRecord(NamedTuple):
    """One input record: where it came from, and its raw JSON text or an already-parsed value."""

    source: str
    line: int  # 1-based line (json/jsonl) or row (parquet)
    payload: str | Any


class BadRecord(NamedTuple):
    """A record that cannot be used, and why."""

    source: str
    line: int
    reason: str

    def render(self) -> str:
        unit = "row" if self.source.endswith(".parquet") else "line"
        return f"{self.source}:{self.line}: bad record ({unit} {self.line}): {self.reason}"


def _input_problem(message: str, fix: str) -> ConfigError:
    return ConfigError(Problem(key="--input", message=message, fix=fix, source="command line"))


def discover(input_path: str) -> list[Path]:
    """The files to read: `input_path` itself, or the data files directly inside a directory, by name."""
    path = Path(input_path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
        if not files:
            raise _input_problem(
                f"directory {input_path!r} has no {'/'.join(SUFFIXES)} files",
                "point --input at a data file or a directory that holds some",
            )
        return files
    if not path.is_file():
        raise _input_problem(
            f"{input_path!r} does not exist",
            "pass a local json/jsonl/parquet file or a directory of them "
            "(Hugging Face hub dataset names are not fetched)",
        )
    if path.suffix.lower() not in SUFFIXES:
        raise _input_problem(
            f"unsupported file type {path.suffix!r} ({input_path})", f"use one of {', '.join(SUFFIXES)}"
        )
    return [path]


def iter_records(files: list[Path], max_samples: int | None = None) -> Iterator[RawRecord]:
    """Every record of every file, in order, at most `max_samples` in all."""
    count = 0
    for path in files:
        reader = _iter_parquet if path.suffix.lower() == ".parquet" else _iter_json
        for record in reader(path):
            if max_samples is not None and count >= max_samples:
                return
            count += 1
            yield record


def _iter_json(path: Path) -> Iterator[RawRecord]:
    """A `.json` holding one array, or JSON Lines (in a `.json` or `.jsonl`); blank lines are skipped."""
    source = os.fspath(path)
    with open(path, encoding="utf-8", errors="strict") as f:
        head = f.read(4096).lstrip("\ufeff \t\r\n")
    if head.startswith("["):
        yield from _iter_array(path)
        return
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                yield RawRecord(source, lineno, line)


def _iter_array(path: Path) -> Iterator[RawRecord]:
    """Elements of a top-level JSON array, each with the line it starts on."""
    source = os.fspath(path)
    text = path.read_text(encoding="utf-8").lstrip("\ufeff")
    decoder = json.JSONDecoder()
    pos, line, n = text.index("[") + 1, 1, len(text)
    line += text.count("\n", 0, pos)
    expect_value = True
    while True:
        start = pos
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        line += text.count("\n", start, pos)
        if pos >= n:
            raise _input_problem(f"{source}:{line}: the JSON array is not closed", "fix the file")
        if text[pos] == "]":
            return
        if not expect_value:
            if text[pos] != ",":
                raise _input_problem(
                    f"{source}:{line}: expected ',' or ']' in the JSON array",
                    "fix the file (it is not valid JSON)",
                )
            pos += 1
            expect_value = True
            continue
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise _input_problem(
                f"{source}:{e.lineno}: unreadable JSON: {e.msg}", "fix the file (it is not valid JSON)"
            ) from None
        yield RawRecord(source, line, value)
        line += text.count("\n", pos, end)
        pos, expect_value = end, False


def _iter_parquet(path: Path) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    source = os.fspath(path)
    try:
        pfile = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise _input_problem(f"cannot read parquet file {source}: {e}", "check the file is parquet") from e
    row = 0
    for batch in pfile.iter_batches(batch_size=4096):
        for value in batch.to_pylist():
            row += 1
            yield RawRecord(source, row, value)


def parse(record: RawRecord) -> dict[str, Any] | BadRecord:
    """The record as a dict, or why it is not one."""
    value = record.payload
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            return BadRecord(record.source, record.line, f"unreadable JSON: {e.msg} (column {e.colno})")
    if not isinstance(value, dict):
        return BadRecord(record.source, record.line, f"expected a JSON object, got {type(value).__name__}")
    return value
