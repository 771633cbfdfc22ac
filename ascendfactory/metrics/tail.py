"""`LiveTail`: follow a log that is still being written, yielding records for complete lines only.

Used by `train`'s live progress display::

    tail = LiveTail(run_log)            # the file may not exist yet
    while proc.poll() is None:
        for rec in tail.poll():         # non-blocking; only lines that end in a newline
            show(rec)
        time.sleep(1)
    for rec in tail.close():            # the process ended: the unfinished last line counts now
        show(rec)

A line is only parsed once its newline has been written, so a half-written line is never parsed
into a wrong value. When the file shrinks (truncated or rotated), reading restarts from its
beginning. Memory is bounded by the read size plus one unfinished line.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ascendfactory.metrics.formats import LineParser, make_parser
from ascendfactory.metrics.lines import MAX_LINE, split_complete
from ascendfactory.metrics.record import Record

READ_SIZE = 1 << 20


class LiveTail:
    def __init__(self, path: str | Path, format: str | None = None, *, from_start: bool = True) -> None:
        self.path = Path(path)
        self._format = format
        self._parser: LineParser = make_parser(format)
        self._offset = 0
        self._partial = b""
        self._inode: int | None = None
        if not from_start and self.path.exists():
            self._offset = self.path.stat().st_size
        self.lines_read = 0

    @property
    def format(self) -> str | None:
        """The format in use (detected once a recognisable line has been read)."""
        detected = getattr(self._parser, "detected", None)
        return detected if self._parser.name == "auto" else self._parser.name

    def read_lines(self) -> list[str]:
        """The complete lines appended since the last call ([] when the file does not exist yet)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []
        if st.st_size < self._offset or (self._inode is not None and st.st_ino != self._inode):
            self._offset, self._partial = 0, b""  # truncated or replaced: start again
        self._inode = st.st_ino
        lines: list[str] = []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            while True:
                chunk = f.read(READ_SIZE)
                if not chunk:
                    break
                self._offset += len(chunk)
                new, self._partial = split_complete(self._partial + chunk)
                lines.extend(new)
                if len(self._partial) > MAX_LINE:
                    new, self._partial = split_complete(self._partial + b"\n")
                    lines.extend(new)
        self.lines_read += len(lines)
        return lines

    def poll(self) -> list[Record]:
        """Records completed by the lines appended since the last call."""
        out: list[Record] = []
        for line in self.read_lines():
            out.extend(self._parser.feed(line))
        return out

    def close(self) -> list[Record]:
        """The writer is done: parse what is left, including an unfinished last line."""
        out = self.poll()
        if self._partial:
            rest, self._partial = split_complete(self._partial + b"\n")
            for line in rest:
                out.extend(self._parser.feed(line))
        out.extend(self._parser.flush())
        return out

    def follow(
        self, *, interval: float = 0.5, stop: Callable[[], bool] | None = None, timeout: float | None = None
    ) -> Iterator[Record]:
        """Yield records as they are written until `stop()` is true or `timeout` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            yield from self.poll()
            if (stop is not None and stop()) or (deadline is not None and time.monotonic() >= deadline):
                yield from self.close()
                return
            time.sleep(interval)
