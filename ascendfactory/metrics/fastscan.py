"""Block-level fast path for Megatron logs, record for record the same as the line parser.

`scan_file(path, parser)` yields exactly what feeding every line of `lines.iter_lines(path)` into
`parser` (a `megatron.MegatronParser`, with or without `fields`) and then flushing it yields, but
without decoding and feeding every line:

- each block from `lines.iter_blocks` is normalised as bytes (`lines.normalise_block`: ANSI codes
  removed, `\\r` made a line break) and split by one compiled regex at the first `iteration` of
  every line (`_ROW.split`, C speed). A line without `iteration` cannot make a record (unless a
  wrapped head is pending, see below), so it is never looked at;
- an iteration line (`iteration N/T ... |`) becomes a `Record` straight from the bytes: with
  `fields`, each label is found with `bytes.find` and read with `float()` (what `_pick` does),
  else the rest of the line goes through `parse_fields`; a `[YYYY-MM-DD HH:MM:SS]` stamp is read
  through a per-minute cache (`_Clock`) that is only hit when the prefix has the same validated shape;
- every other line that mentions `iteration` (checkpoint, memory and validation lines), a head that
  does not end in `|` (it may be wrapped, so the next lines decide) and a non-ASCII line are
  decoded and fed to `parser` itself, in order; after a wrapped head the scan restarts behind the
  lines the parser consumed.

Memory stays one block (`SCAN_CHUNK`, 256 KiB) plus its split parts; the caches are bounded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from ascendfactory.metrics.lines import iter_blocks, normalise_block
from ascendfactory.metrics.megatron import MegatronParser, _wall_time, parse_fields
from ascendfactory.metrics.record import Record, to_float

# `\s` of the parser's str pattern, for ASCII text, without `\r\n` (never inside a normalised line).
_WS = rb"[ \t\x0b\x0c\x1c-\x1f]"
_WS_CHARS = b" \t\x0b\x0c\x1c\x1d\x1e\x1f"
# A line's first `iteration` and the rest of its line; `head` (` N/T`) when `megatron._HEAD` matches there.
_ROW = re.compile(rb"iteration(" + _WS + rb"+\d+" + _WS + rb"*/" + _WS + rb"*\d+)?([^\n]*)")
_GROUPS = 3  # split parts per row: the text before it, head, rest
_DIGITS = re.compile(rb"\d+")
_WORD = b"iteration"
_STAMP = re.compile(rb"\[(\d{4}-\d\d-\d\d)[ T](\d\d):(\d\d):(\d\d)")
_SPACE, _BAR = 32, 124  # the bytes allowed before a picked label
_MAX_RESPLITS = 8  # per block; after that the rest of the block goes line by line
_MAX_CACHE = 4096
SCAN_CHUNK = 1 << 18  # 256 KiB blocks: the split and the rows stay in the CPU cache


class _Clock:
    """`megatron._wall_time` of a row's prefix, with a per-minute cache for the common shape.

    A row's `gap` (the text since the previous row) is usually `\\n` plus its line's prefix, e.g.
    `\\n [2025-01-01 00:00:02] `. `bases` maps the gap up to the seconds (`\\n [2025-01-01 00:00:`),
    validated once, to its time; `seconds` maps `SS` plus the rest of that validated prefix to the
    seconds. A gap hitting both therefore has the validated shape, so the sum is what
    `_wall_time` returns; anything else goes through `slow`.
    """

    def __init__(self) -> None:
        self.cut = -1  # where the seconds start in a cached gap
        self.suffix = b""
        self.bases: dict[bytes, float] = {}
        self.seconds: dict[bytes, int] = {}
        self._days: dict[bytes, float | None] = {}

    def _midnight(self, date: bytes) -> float | None:
        if date not in self._days:
            if len(self._days) > _MAX_CACHE:
                self._days.clear()
            try:
                day: float | None = datetime(
                    int(date[:4]), int(date[5:7]), int(date[8:10]), tzinfo=timezone.utc
                ).timestamp()
            except ValueError:
                day = None
            self._days[date] = day
        return self._days[date]

    def slow(self, gap: bytes) -> float | None:
        nl = gap.rfind(b"\n")
        prefix = gap[nl + 1 :]
        j = prefix.find(b"[")
        if j < 0:
            return None
        m = _STAMP.match(prefix, j)
        if m is None or not prefix.isascii():
            return _wall_time(prefix.decode("utf-8", "replace"))
        day = self._midnight(m.group(1))
        if day is None:
            return None
        base = day + int(m.group(2)) * 3600 + int(m.group(3)) * 60
        if nl == 0:  # the common shape: cache this minute
            cut = j + 19  # 1 for the "\n", then "[YYYY-MM-DD HH:MM:"
            suffix = gap[cut + 2 :]
            if cut != self.cut or suffix != self.suffix:
                self.cut, self.suffix = cut, suffix
                self.bases.clear()
                self.seconds.clear()
                self.seconds.update({b"%02d" % n + suffix: n for n in range(100)})
            if len(self.bases) > _MAX_CACHE:
                self.bases.clear()
            self.bases[gap[:cut]] = base
        return base + int(m.group(4))


def _row_offset(parts: list[bytes | None], row: int) -> int:
    """Where row `row`'s `iteration` starts in the text that `parts` was split from."""
    gaps = sum(map(len, parts[0 : _GROUPS * row + 1 : _GROUPS]))  # type: ignore[arg-type]
    heads = sum(map(len, filter(None, parts[1 : _GROUPS * row : _GROUPS])))
    rests = sum(map(len, parts[2 : _GROUPS * row : _GROUPS]))  # type: ignore[arg-type]
    return gaps + len(_WORD) * row + heads + rests


def _feed_lines(parser: MegatronParser, text: bytes, start: int, until: int) -> tuple[list[Record], int]:
    """Feed whole lines from `start` until one ending at or after `until` is fed and no head is pending.

    Returns the records and where the next unfed line starts (`len(text) + 1` when all were fed).
    """
    out: list[Record] = []
    pos = start
    while pos <= len(text):
        end = text.find(b"\n", pos)
        if end < 0:
            end = len(text)
        out.extend(parser.feed(text[pos:end].decode("utf-8", "replace")))
        pos = end + 1
        if end >= until and not parser.pending:
            break
    return out, pos


def scan_file(path: str | Path, parser: MegatronParser, *, chunk_size: int = SCAN_CHUNK) -> Iterator[Record]:
    """The records of `path` as `parser` would make them from its lines; see the module docstring."""
    labels = (
        None
        if parser.labels is None
        else tuple((name, label.encode(), len(label.encode())) for name, label in parser.labels)
    )
    feed = parser.feed
    clock = _Clock()
    bases, seconds, slow_wall = clock.bases, clock.seconds, clock.slow
    cut = clock.cut
    totals: dict[bytes, int] = {}
    for raw in iter_blocks(path, chunk_size=chunk_size):
        block = normalise_block(raw)
        plain = block.isascii()
        start = 0
        if parser.pending:  # a wrapped head at the end of the last block: its next lines decide
            records, start = _feed_lines(parser, block, 0, -1)
            yield from records
        resplits = 0
        while start <= len(block):
            text = block[start:] if start else block
            parts = _ROW.split(text)
            redo = -1
            rows = zip(parts[0::3], parts[1::3], parts[2::3])
            for i, (gap, head, rest) in enumerate(rows):
                if head is None:  # `iteration` but no head: checkpoint, memory, validation, other
                    line = gap[gap.rfind(b"\n") + 1 :] + _WORD + rest
                    if plain or line.isascii():
                        yield from feed(line.decode("ascii"))
                        continue
                    redo = i  # non-ASCII: the parser may see a head there (Unicode spaces, digits)
                    break
                if not rest.endswith(b"|") and not rest.rstrip(_WS_CHARS).endswith(b"|"):
                    redo = i  # maybe wrapped: the parser holds it and reads on
                    break
                if not plain and not (gap[gap.rfind(b"\n") + 1 :] + head + rest).isascii():
                    redo = i
                    break
                steps, _, tail = head.partition(b"/")
                tot = totals.get(tail)
                try:
                    step = int(steps)
                    if tot is None:
                        if len(totals) > _MAX_CACHE:
                            totals.clear()
                        tot = totals[tail] = int(tail)
                except ValueError:  # a space int() does not strip (\x1c-\x1f)
                    step, tot = map(int, _DIGITS.findall(head))
                base = bases.get(gap[:cut])
                sec = seconds.get(gap[cut:]) if base is not None else None
                wall: float | None
                if sec is not None and base is not None:
                    wall = base + sec
                else:
                    wall = slow_wall(gap)
                    cut = clock.cut
                if labels is None:
                    metrics = parse_fields(rest.decode("ascii"))
                    if not metrics:
                        continue
                else:
                    metrics = {}
                    for name, label, n in labels:
                        j = rest.find(label)
                        if j <= 0:
                            continue
                        c = rest[j - 1]
                        if c != _SPACE and c != _BAR:
                            continue
                        j += n
                        k = rest.find(b"|", j)
                        value = rest[j:k] if k >= 0 else rest[j:]
                        try:
                            metrics[name] = float(value)
                        except ValueError:
                            number = to_float(value.decode("ascii"))
                            if number is not None:
                                metrics[name] = number
                yield Record(step, metrics, wall, "train", tot)
            if redo < 0:
                break
            offset = _row_offset(parts, redo)
            resplits += 1
            until = offset if resplits <= _MAX_RESPLITS else len(text)
            records, fed = _feed_lines(parser, text, text.rfind(b"\n", 0, offset) + 1, until)
            yield from records
            start += fed
    yield from parser.flush()
