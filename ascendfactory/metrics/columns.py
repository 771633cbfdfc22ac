"""Columnar fast path for Megatron logs: the training steps and a few named fields as numpy arrays.

    iter_columns(path, fields, *, workers=None) -> Iterator[Columns]   # streamed, one piece per segment
    read_columns(path, fields) -> Columns                               # all pieces joined

Contract: the pieces, joined, hold exactly the `kind == "train"` records of
`parse_file(path, "megatron", fields=fields)`: `steps[i]` is a record's step and `values[f][i]` its
value of field `f`, or `MISSING` (a NaN with its own payload, as in `StepTable`) when that line did not
log `f`. The tests check this record for record, on real samples, quirk files and generated text.
`others` holds the few evaluation records (kinds `eval` and `test`: Megatron's validation lines, every
field) in file order, so a plot can draw the validation loss beside the training loss.

How (per block of whole lines; no line is decoded or visited alone unless it is odd):

- numpy finds every newline, every `iteration` and every label of `fields` (`find_all`: 16-bit
  compares over the block for the needle's first two bytes, then one 64-bit compare per candidate
  and 8 needle bytes; a label that contains `iteration` is found among that word's hits);
- the first `iteration` of each line is a *row* when it is followed by the strict head
  ` +N */ *T` (spaces only, within `_HEAD_WINDOW` bytes), the line ends in `|` and holds only
  ASCII bytes other than NUL; heads of the same byte-class shape share one parse; steps are read
  from the digits in numpy;
- a field's value is what `MegatronParser` reads: the first occurrence of `label:` at or after the
  head in that line, preceded by a space or `|`, up to the next `|` or the line end (within
  `_VALUE_WINDOW` bytes), through `float()` (and `to_float` where `float()` refuses);
- every other line that mentions `iteration` (checkpoint, memory, validation lines, heads with tabs or
  wrapped over two lines, non-ASCII text, longer values) goes to the line parser itself, in order,
  with the lines that a wrapped head consumes. Blocks with ANSI codes or `\r` are normalised first.

A file past `PARALLEL_MIN_BYTES` is cut into segments (`SEGMENT_BYTES`) at newlines that follow a
clean line ending in `|` (after such a line the parser holds nothing), and segments are scanned by
`workers` processes (default: up to 2, the CPUs this process may use), at most two segments per worker
in flight, yielded in file order: memory stays a few segments whatever the file size.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.metrics.lines import CHUNK_SIZE, iter_cuts, normalise_block
from ascendfactory.metrics.megatron import MegatronParser
from ascendfactory.metrics.record import Record, to_float
from ascendfactory.metrics.table import MISSING  # StepTable's padding: a NaN with its own payload

EVAL_KINDS = ("eval", "test")
SEGMENT_BYTES = 32 << 20
PARALLEL_MIN_BYTES = 64 << 20
MAX_WORKERS = 2
_CUT_WINDOW = 1 << 20  # how far past a segment's nominal end a cut is looked for
_HEAD_WINDOW = 24  # bytes after `iteration` that must hold the whole ` N/ T` head
_VALUE_WINDOW = 24  # bytes after `label:` that must hold the value and its `|` (or the line end)
_MAX_DIGITS = 18  # int64-safe step numbers; longer ones go to the line parser
_WORD = b"iteration"
_PAD = max(_HEAD_WINDOW, _VALUE_WINDOW)
_PADDING = b"\n" * (_PAD + 1)
_NL, _SPACE, _BAR, _SLASH, _ZERO = 10, 32, 124, 47, 48
_POW10 = 10 ** np.arange(_MAX_DIGITS + 1, dtype=np.int64)
_CLASS = np.full(256, 3, np.uint8)  # byte classes of a head: 0 space, 1 digit, 2 `/`, 3 anything else
_CLASS[_SPACE], _CLASS[_ZERO : _ZERO + 10], _CLASS[_SLASH] = 0, 1, 2


@dataclass
class Columns:
    """Training rows of (part of) a log: `steps` and one float64 array per field (MISSING if not logged)."""

    steps: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)
    others: list[Record] = field(default_factory=list)  # evaluation records (kinds eval, test)

    def __len__(self) -> int:
        return int(self.steps.size)

    @classmethod
    def join(cls, pieces: Iterable[Columns], fields: Iterable[str]) -> Columns:
        parts = list(pieces)
        names = list(fields)
        if not parts:
            return cls(np.empty(0, np.int64), {f: np.empty(0, np.float64) for f in names})
        return cls(
            np.concatenate([p.steps for p in parts]),
            {f: np.concatenate([p.values[f] for p in parts]) for f in names},
            [r for p in parts for r in p.others],
        )

    def present(self, name: str) -> np.ndarray:
        """Mask of the rows that logged `name` (a NaN the run logged counts as logged)."""
        return self.values[name].view(np.uint64) != _MISSING_BITS


_MISSING_BITS = np.frombuffer(struct.pack("<d", MISSING), np.uint64)[0]


def words_at(buf: np.ndarray) -> np.ndarray:
    """The little-endian 8-byte word starting at every offset of `buf` (a view; unaligned reads)."""
    return np.ndarray((max(buf.size - 7, 0),), "<u8", buffer=buf, strides=(1,))


def find_all(a: np.ndarray, needle: bytes, words: np.ndarray | None = None) -> np.ndarray:
    """Start offsets of every (also overlapping) occurrence of `needle` in the uint8 array `a`.

    Candidates are the offsets where the needle's first two bytes are: two 16-bit compares (at even
    and at odd offsets) over the array; the rest is checked on the candidates only (`verify`).
    `words`: `words_at` of `a` followed by at least 7 more bytes (made here when not given)."""
    n, k = a.size, len(needle)
    if k == 0 or n < k:
        return np.empty(0, np.int64)
    if k == 1:
        return np.flatnonzero(a == needle[0])
    pair = needle[0] | needle[1] << 8
    even = np.flatnonzero(a[: n // 2 * 2].view("<u2") == pair) * 2
    odd = np.flatnonzero(a[1 : 1 + (n - 1) // 2 * 2].view("<u2") == pair) * 2 + 1
    pos = np.sort(np.concatenate((even, odd)), kind="stable")  # two sorted runs: a linear merge
    if words is None:
        words = words_at(np.concatenate((a, np.zeros(8, np.uint8))))
    return verify(words, n, pos, needle)


def verify(words: np.ndarray, n: int, pos: np.ndarray, needle: bytes) -> np.ndarray:
    """The offsets in `pos` (sorted) where `needle` occurs in the first `n` bytes under `words`:
    one 64-bit compare per candidate and 8 bytes of the needle (the last word ends with the needle)."""
    k = len(needle)
    pos = pos[(pos >= 0) & (pos <= n - k)]
    for at in [*range(0, k - 8, 8), max(k - 8, 0)]:
        if not pos.size:
            break
        part = needle[at : at + 8]
        got = words[pos + at]
        if len(part) < 8:
            got = got & ((1 << 8 * len(part)) - 1)
        pos = pos[got == int.from_bytes(part, "little")]
    return pos


def _windows(a: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """`width` bytes from each start (a copy); `a` ends in at least `width` bytes of `\\n` padding.

    Callers stop at the line's `\\n` themselves, so bytes of the next line never count."""
    return sliding_window_view(a, width)[starts]


def _parse_heads(win: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Strict ` +N */ *T` at the start of each window: (valid, s1, e1, e2, digits) where the step's
    digits are columns [s1, e1) and T ends at e2.

    A window that runs past its line meets the `\\n` (neither space, digit nor `/`), so it cannot
    complete a head that the line does not hold."""
    rows = np.arange(win.shape[0])
    col = np.arange(win.shape[1])
    digits = win - np.uint8(_ZERO)  # uint8: non-digits wrap to >= 10
    other = digits >= 10
    blank = win != _SPACE
    s1 = blank.argmax(axis=1)  # the step's first digit
    e1 = (other & (col >= s1[:, None])).argmax(axis=1)
    slash = (blank & (col >= e1[:, None])).argmax(axis=1)
    s2 = (blank & (col > slash[:, None])).argmax(axis=1)
    e2 = (other & (col >= s2[:, None])).argmax(axis=1)
    ok = (s1 >= 1) & (e1 > s1) & (e1 - s1 <= _MAX_DIGITS) & (win[rows, slash] == _SLASH) & (slash >= e1)
    ok &= (s2 > slash) & (e2 > s2) & other[rows, e2]
    return ok, s1, e1, e2, digits


def _heads(win: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(valid, N, offset just past T) of each window's head.

    Heads of one log mostly share a shape (Megatron pads N and T to fixed widths), so rows whose
    byte classes (space, digit, `/`, other) equal the first row's take its parse; the rest are
    parsed in full (`_parse_heads`)."""
    n = win.shape[0]
    ok = np.zeros(n, bool)
    steps = np.zeros(n, np.int64)
    ends = np.zeros(n, np.int64)
    if not n:
        return ok, steps, ends
    classes = _CLASS[win]
    same = (classes == classes[0]).all(axis=1)
    first_ok, s1, e1, e2, _ = _parse_heads(win[:1])
    if first_ok[0]:
        s1_, e1_ = int(s1[0]), int(e1[0])
        digits = win[same, s1_:e1_] - np.uint8(_ZERO)
        ok[same] = True
        steps[same] = digits @ _POW10[e1_ - s1_ - 1 :: -1][: e1_ - s1_]
        ends[same] = int(e2[0])
        rest = np.flatnonzero(~same)
    else:
        rest = np.arange(n)
    if rest.size:
        r_ok, s1, e1, e2, digits = _parse_heads(win[rest])
        width = int(e1[r_ok].max()) if r_ok.any() else 0
        col = np.arange(width)
        power = e1[:, None] - 1 - col
        in_step = (col >= s1[:, None]) & (power >= 0)
        steps[rest] = (digits[:, :width] * _POW10[np.where(in_step, power, 0)] * in_step).sum(axis=1)
        ok[rest], ends[rest] = r_ok, e2
    return ok, steps, ends


class _Pieces:
    """Output of one segment: fast rows and parser records as `Columns`, in file order."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.parts: list[Columns] = []
        self.others: list[Record] = []

    def rows(self, steps: np.ndarray, values: dict[str, np.ndarray]) -> None:
        if steps.size:
            self.parts.append(Columns(steps, values))

    def records(self, records: Iterable[Record]) -> None:
        self.others.extend(r for r in records if r.kind in EVAL_KINDS)
        train = [r for r in records if r.kind == "train"]
        if train:
            values = {f: np.array([r.metrics.get(f, MISSING) for r in train], np.float64) for f in self.names}
            self.rows(np.array([r.step for r in train], np.int64), values)

    def columns(self) -> Columns:
        joined = Columns.join(self.parts, self.names)
        joined.others = self.others
        return joined


def _values(win: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, parsed) of NUL-padded raw values: `float()`, else `to_float`, as the parser reads them."""
    raw = win.view(f"S{win.shape[1]}").ravel().tolist()
    try:
        return np.array(list(map(float, raw)), np.float64), np.ones(len(raw), bool)
    except ValueError:
        values, parsed = np.zeros(len(raw)), np.zeros(len(raw), bool)
        for i, value in enumerate(raw):
            try:
                values[i] = float(value)
            except ValueError:
                number = to_float(value.decode("ascii"))
                if number is None:
                    continue
                values[i] = number
            parsed[i] = True
    return values, parsed


def _scan_block(buf: bytes, n: int, parser: MegatronParser, out: _Pieces) -> None:
    """Append the training rows of the block `buf[:n]` (whole, normalised lines) to `out`.

    `buf` holds at least `_PAD` bytes past `n`, and `buf[n]` is a newline (`_padded`)."""
    padded = np.frombuffer(buf, np.uint8)  # windows may run past the last line, into its newline
    a = padded[:n]
    words = words_at(padded)
    newlines = np.flatnonzero(a == _NL)
    line_ends = np.append(newlines, a.size)
    line_starts = np.concatenate(([0], newlines + 1))

    def line(i: int) -> str:
        return buf[line_starts[i] : line_ends[i]].decode("utf-8", "replace")

    consumed = 0  # lines [0, consumed) were fed to the parser (a wrapped head from the last block)
    while parser.pending and consumed < line_ends.size:
        out.records(parser.feed(line(consumed)))
        consumed += 1
    hits = find_all(a, _WORD, words)
    if not hits.size:
        return
    hit_line = np.searchsorted(newlines, hits)
    first = np.ones(hits.size, bool)
    first[1:] = hit_line[1:] != hit_line[:-1]
    pos, lines = hits[first], hit_line[first]
    keep = lines >= consumed
    pos, lines = pos[keep], lines[keep]
    ends = line_ends[lines]
    ok, steps, head_len = _heads(_windows(padded, pos + len(_WORD), _HEAD_WINDOW))
    ok &= a[ends - 1] == _BAR  # a row that does not end in `|` may be wrapped: the parser decides
    if not buf.isascii() or buf.find(b"\x00", 0, n) >= 0:  # such lines go to the parser (it decodes them)
        odd = np.unique(np.searchsorted(newlines, np.flatnonzero((a >= 128) | (a == 0))))
        ok &= ~np.isin(lines, odd)
    head_end = pos + len(_WORD) + head_len
    values: dict[str, np.ndarray] = {}
    for name in out.names:
        values[name] = np.full(pos.size, MISSING)
    for name, label in parser.labels or ():
        raw = label.encode()
        inner = raw.find(_WORD)  # a label holding the word: its candidates come from the word's hits
        at = find_all(a, raw, words) if inner < 0 else verify(words, n, hits - inner, raw)
        if not at.size or not pos.size:
            continue
        j = np.searchsorted(at, head_end)
        has = j < at.size
        where = at[np.minimum(j, at.size - 1)]
        has &= where < ends
        before = a[np.maximum(where - 1, 0)]
        has &= (before == _SPACE) | (before == _BAR)
        idx = np.flatnonzero(has & ok)
        if not idx.size:
            continue
        win = _windows(padded, where[idx] + len(raw), _VALUE_WINDOW)
        stop = (win == _BAR) | (win == _NL)
        end = stop.argmax(axis=1)
        fits = stop[np.arange(idx.size), end]
        ok[idx[~fits]] = False  # a value longer than the window: the parser reads that line
        win, idx, end = win[fits], idx[fits], end[fits]
        win[np.arange(_VALUE_WINDOW) >= end[:, None]] = 0
        number, parsed = _values(win)
        values[name][idx[parsed]] = number[parsed]  # an unreadable value leaves the field as it was
    _merge(parser, out, steps, values, ok, lines, line_ends.size, consumed, line)


def _merge(
    parser: MegatronParser,
    out: _Pieces,
    steps: np.ndarray,
    values: dict[str, np.ndarray],
    ok: np.ndarray,
    lines: np.ndarray,
    n_lines: int,
    consumed: int,
    line: Callable[[int], str],
) -> None:
    """Emit the fast rows (`ok`) and feed the other `iteration` lines to the parser, in line order."""
    other = lines[~ok]
    row_lines, row_steps = lines[ok], steps[ok]
    row_values = {f: v[ok] for f, v in values.items()}
    start = 0  # next fast row to emit
    for ln in other.tolist():
        if ln < consumed:
            continue
        stop = int(np.searchsorted(row_lines, ln))
        if stop > start:
            out.rows(row_steps[start:stop], {f: v[start:stop] for f, v in row_values.items()})
        out.records(parser.feed(line(ln)))
        consumed = ln + 1
        while parser.pending and consumed < n_lines:
            out.records(parser.feed(line(consumed)))
            consumed += 1
        start = int(np.searchsorted(row_lines, consumed))
    out.rows(row_steps[start:], {f: v[start:] for f, v in row_values.items()})


def _padded(buf: bytes, n: int) -> tuple[bytes, int]:
    """(buffer, n) as `_scan_block` wants it: normalised, a newline at n and `_PAD` bytes after it.

    Most blocks are used in place (no copy); the rest are normalised / padded into a new buffer."""
    if buf.find(b"\x1b", 0, n) >= 0 or buf.find(b"\r", 0, n) >= 0:
        block = normalise_block(buf[:n])
        return block + _PADDING, len(block)
    if len(buf) - n <= _PAD or buf[n] != _NL:
        return buf[:n] + _PADDING, n
    return buf, n


def scan_segment(
    path: str | Path, start: int, end: int | None, fields: list[str], chunk_size: int = CHUNK_SIZE
) -> Columns:
    """Columns of the lines in bytes [start, end) of `path` (`start` at a line start; None: to the end)."""
    parser = MegatronParser(fields=frozenset(fields))
    out = _Pieces(fields)
    for buf, n in iter_cuts(path, chunk_size=chunk_size, start=start, end=end):
        _scan_block(*_padded(buf, n), parser, out)
    out.records(parser.flush())
    return out.columns()


def _clean_cut(window: bytes) -> int:
    """Offset in `window` just past a newline ending a clean line that ends in `|`, or -1."""
    i = window.find(b"|\n")
    while i >= 0:
        begin = window.rfind(b"\n", 0, i) + 1
        if begin > 0 and b"\x1b" not in window[begin:i] and b"\r" not in window[begin:i]:
            return i + 2
        i = window.find(b"|\n", i + 1)
    return -1


def segments(path: str | Path, size: int, segment_bytes: int = SEGMENT_BYTES) -> list[tuple[int, int | None]]:
    """Byte ranges covering the file, cut where the line parser holds no state (see module doc)."""
    cuts = [0]
    with open(path, "rb") as f:
        target = segment_bytes
        while target < size:
            f.seek(target)
            found = _clean_cut(f.read(_CUT_WINDOW))
            if found >= 0 and target + found < size:
                cuts.append(target + found)
                target = cuts[-1] + segment_bytes
            else:
                target += _CUT_WINDOW
    return [(s, e) for s, e in zip(cuts, cuts[1:])] + [(cuts[-1], None)]


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def iter_columns(
    path: str | Path,
    fields: Iterable[str],
    *,
    workers: int | None = None,
    segment_bytes: int = SEGMENT_BYTES,
    chunk_size: int = CHUNK_SIZE,
) -> Iterator[Columns]:
    """Columns of a Megatron log, one piece per segment, in file order (see the module docstring)."""
    path = Path(path)
    names = list(dict.fromkeys(fields))
    if not path.is_file():
        raise ConfigError(
            Problem(key=str(path), message="log file not found", fix="pass the path of a run log")
        )
    if not names:
        raise ValueError("iter_columns needs at least one field")
    size = path.stat().st_size
    if workers is None:
        workers = min(MAX_WORKERS, _available_cpus()) if size >= PARALLEL_MIN_BYTES else 1
    ranges: list[tuple[int, int | None]] = (
        list(segments(path, size, segment_bytes)) if workers > 1 else [(0, None)]
    )
    if workers <= 1 or len(ranges) == 1:
        for start, end in ranges:
            yield scan_segment(path, start, end, names, chunk_size)
        return
    yield from _parallel(path, ranges, names, workers, chunk_size)


def _parallel(
    path: Path, ranges: list[tuple[int, int | None]], names: list[str], workers: int, chunk_size: int
) -> Iterator[Columns]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
        pending: deque = deque()
        todo = iter(ranges)
        for start, end in todo:
            pending.append(pool.submit(scan_segment, str(path), start, end, names, chunk_size))
            if len(pending) >= 2 * workers:
                break
        while pending:
            piece = pending.popleft().result()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(pool.submit(scan_segment, str(path), nxt[0], nxt[1], names, chunk_size))
            yield piece


def read_columns(path: str | Path, fields: Iterable[str], **options: int | None) -> Columns:
    """All of `iter_columns` joined (memory grows with the rows; 24 bytes per row for two fields)."""
    names = list(dict.fromkeys(fields))
    return Columns.join(iter_columns(path, names, **options), names)  # type: ignore[arg-type]
