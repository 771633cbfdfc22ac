"""Reading log text: streamed in chunks, ANSI colour codes removed, `\\r` treated as a line break.

Files are read as bytes in `CHUNK_SIZE` pieces and split on newlines; nothing holds more than one
chunk (plus one unfinished line) in memory, so a gigabyte log costs the same memory as a kilobyte one.
Undecodable bytes become U+FFFD instead of raising.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

CHUNK_SIZE = 1 << 22  # 4 MiB
MAX_LINE = 1 << 26  # a "line" longer than 64 MiB is cut, so a file without newlines stays bounded

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def normalise_block(block: bytes) -> bytes:
    """The bytes form of `_decode`: drop a cut `\r`, ANSI codes, and make every `\r` a line break.

    Decoding the result and splitting on `\n` gives exactly the lines `_decode` gives (UTF-8 decoding
    never lets an invalid byte swallow an ASCII one, so doing this before decoding changes nothing).
    """
    if block.endswith(b"\r"):  # the "\r" of a "\r\n" whose "\n" was the cut
        block = block[:-1]
    if b"\x1b" in block:
        block = _ANSI_BYTES.sub(b"", block)
    if b"\r" in block:
        block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return block


def _decode(block: bytes) -> list[str]:
    return normalise_block(block).decode("utf-8", "replace").split("\n")


def iter_cuts(
    path: str | Path,
    *,
    chunk_size: int = CHUNK_SIZE,
    complete_only: bool = False,
    start: int = 0,
    end: int | None = None,
) -> Iterator[tuple[bytes, int]]:
    """`iter_blocks` without the copy: (buffer, n) where `buffer[:n]` is the block.

    After a block of whole lines `buffer[n]` is its newline and the rest of `buffer` (if any) is the
    start of the next line; after a cut piece of a long line or the file's last line it is not."""
    with open(path, "rb") as f:
        f.seek(start)
        left = -1 if end is None else end - start
        tail = b""
        while left:
            chunk = f.read(chunk_size if left < 0 else min(chunk_size, left))
            if not chunk:
                break
            left -= len(chunk) if left > 0 else 0
            buf = tail + chunk if tail else chunk
            while len(buf) > MAX_LINE and buf.find(b"\n", 0, MAX_LINE + 1) < 0:
                yield buf, MAX_LINE
                buf = buf[MAX_LINE:]
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                tail = buf
                continue
            tail = buf[cut:]
            yield buf, cut - 1
        if tail and not complete_only:
            yield tail, len(tail)


def iter_blocks(
    path: str | Path,
    *,
    chunk_size: int = CHUNK_SIZE,
    complete_only: bool = False,
    start: int = 0,
    end: int | None = None,
) -> Iterator[bytes]:
    """Stream `path` (bytes [start, end), `start` at a line start) as raw byte blocks of whole lines,
    each without its final newline.

    `_decode(block)` of every block, in order, is the file's line sequence (`iter_lines`). A block
    is at most about `chunk_size` plus one line. A "line" longer than `MAX_LINE` is cut into pieces of
    `MAX_LINE` bytes counted from its start, so the pieces do not depend on `chunk_size` or `start`.
    """
    for buf, n in iter_cuts(path, chunk_size=chunk_size, complete_only=complete_only, start=start, end=end):
        yield buf if n == len(buf) else buf[:n]


def iter_lines(
    path: str | Path, *, chunk_size: int = CHUNK_SIZE, complete_only: bool = False
) -> Iterator[str]:
    """Stream the lines of `path` without their line endings.

    With `complete_only`, a last line that has no newline yet (a file still being written) is not
    yielded; otherwise it is.
    """
    for block in iter_blocks(path, chunk_size=chunk_size, complete_only=complete_only):
        yield from _decode(block)


def split_complete(buffer: bytes) -> tuple[list[str], bytes]:
    """Split a byte buffer into its complete lines and the unfinished rest (for followers)."""
    cut = buffer.rfind(b"\n") + 1
    if cut == 0:
        return [], buffer
    return _decode(buffer[: cut - 1]), buffer[cut:]
