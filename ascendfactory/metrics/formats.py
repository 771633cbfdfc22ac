"""The format registry (open: `register_format`), format detection, and the entry points `parse_file` /
`parse_lines`.

Every format is a push parser (`feed(line) -> records`, `flush() -> records`), so the same code
serves whole files, iterables of lines and the live follower (`tail.LiveTail`). With `format=None`
the format is detected from the first line that any format recognises; the few lines before it
are replayed into the chosen parser, so detection never loses a record and never reads ahead more
than `DETECT_BUFFER` lines. `parse_file` on a Megatron log (named or detected) goes through
`fastscan.scan_file`, which yields the same records without feeding every line.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ascendfactory.errors import ConfigError, Problem
from ascendfactory.metrics import fastscan, llamafactory, megatron, mindspeed_rl, roll, verl
from ascendfactory.metrics.lines import iter_lines, strip_ansi
from ascendfactory.metrics.record import Record
from ascendfactory.registry import Registry

DETECT_BUFFER = 64


class LineParser(Protocol):
    name: str

    def feed(self, line: str) -> Sequence[Record]: ...

    def flush(self) -> Sequence[Record]: ...


@dataclass(frozen=True)
class LogFormat:
    """A log format: `sniff(line)` recognises one of its lines, `parser()` makes a fresh push parser.

    `priority` orders detection (lower is sniffed first: the most specific markers first). `loss_keys`: the
    format's loss metric names beyond the common ones (`convergence.LOSS_KEYS`), for `logs summary`,
    `logs compare` and the plot where no plan names the loss. `tracker_name(kind, label)`: the name the
    framework's own tracker integration gives a parsed value (`logs export --to <tracker>` uses it, so an
    exported run lines up with a live one); None: training values as parsed, others as `<kind>/<label>`."""

    name: str
    description: str
    sniff: Callable[[str], bool]
    parser: Callable[[], LineParser]
    aliases: tuple[str, ...] = ()
    priority: int = 100
    loss_keys: tuple[str, ...] = ()
    tracker_name: Callable[[str, str], str] | None = None


FORMATS: Registry[LogFormat] = Registry(
    "log format",
    key="--format",
    how="ascendfactory.metrics.formats.register_format(LogFormat(...))",
    order=lambda f: f.priority,
)


def register_format(fmt: LogFormat) -> LogFormat:
    """Add a log format (a backend's module calls this at import). Its name and aliases must be new."""
    return FORMATS.register(fmt.name, fmt, aliases=fmt.aliases)


def registered_formats() -> list[LogFormat]:
    """Every registered format (the plugins' too) in detection order (`priority`, then registration)."""
    return FORMATS.entries()


for _builtin in (
    LogFormat(roll.NAME, "ROLL `metrics_tag: {...}` tracker lines", roll.sniff, roll.RollParser, priority=10),
    LogFormat(
        verl.JSONL_NAME,
        "VeRL file-logger JSONL",
        verl.sniff_jsonl,
        verl.VerlJsonlParser,
        ("verl-file",),
        priority=20,
    ),
    LogFormat(
        llamafactory.NAME,
        "LLaMA-Factory trainer_log.jsonl",
        llamafactory.sniff,
        llamafactory.TrainerLogParser,
        ("llama-factory", "lf", "trainer_log"),
        priority=30,
    ),
    LogFormat(
        mindspeed_rl.NAME,
        "MindSpeed-RL `iteration: N / T | key : value` lines",
        mindspeed_rl.sniff,
        mindspeed_rl.MindSpeedRLParser,
        ("msrl",),
        priority=40,
    ),
    LogFormat(
        megatron.NAME,
        "Megatron / MindSpeed-LLM / ModelLink / MindSpeed-MM iteration lines",
        megatron.sniff,
        megatron.MegatronParser,
        ("mindspeed-llm", "mindspeed_llm", "modellink", "mindspeed-mm", "mindspeed_mm", "megatron-deepspeed"),
        priority=50,
        tracker_name=megatron.tracker_name,
    ),
    LogFormat(
        verl.NAME, "VeRL console `step:N - key:value` lines", verl.sniff, verl.VerlConsoleParser, priority=60
    ),
    LogFormat(
        llamafactory.CONSOLE_NAME,
        "HF Trainer console dicts (LLaMA-Factory stdout)",
        llamafactory.sniff_console,
        llamafactory.ConsoleDictParser,
        ("llamafactory-console",),
        priority=70,
    ),
):
    register_format(_builtin)


def format_names() -> list[str]:
    return [f.name for f in registered_formats()]


def find_format(name: str) -> LogFormat | None:
    """A format by name or alias (case-insensitive, `-` and `_` alike); None when none is registered."""
    return FORMATS.find(name)


def get_format(name: str) -> LogFormat:
    """Look a format up by name or alias (case-insensitive, `-` and `_` alike)."""
    return FORMATS.get(name, hint=" (or leave it out to detect)")


def sniff_line(line: str) -> LogFormat | None:
    for fmt in registered_formats():
        if fmt.sniff(line):
            return fmt
    return None


def detect_format(source: str | Path | Iterable[str], *, max_lines: int = 5000) -> str | None:
    """The format of a file (or of some lines) from its first `max_lines` lines; None if unknown."""
    lines = iter_lines(source) if isinstance(source, (str, Path)) else iter(source)
    for n, line in enumerate(lines):
        if n >= max_lines:
            break
        fmt = sniff_line(line)
        if fmt is not None:
            return fmt.name
    return None


class AutoParser:
    """Holds the last `DETECT_BUFFER` lines until a line identifies the format, then replays them."""

    name = "auto"

    def __init__(self) -> None:
        self._inner: LineParser | None = None
        self._buffer: deque[str] = deque(maxlen=DETECT_BUFFER)

    @property
    def detected(self) -> str | None:
        return self._inner.name if self._inner is not None else None

    def feed(self, line: str) -> Sequence[Record]:
        if self._inner is not None:
            return self._inner.feed(line)
        fmt = sniff_line(line)
        if fmt is None:
            self._buffer.append(line)
            return ()
        self._inner = fmt.parser()
        out: list[Record] = []
        for old in self._buffer:
            out.extend(self._inner.feed(old))
        self._buffer.clear()
        out.extend(self._inner.feed(line))
        return out

    def flush(self) -> Sequence[Record]:
        return self._inner.flush() if self._inner is not None else ()


def make_parser(format: str | None = None) -> LineParser:
    return AutoParser() if not format or format == "auto" else get_format(format).parser()


def _run(parser: LineParser, lines: Iterable[str], fields: frozenset[str] | None) -> Iterator[Record]:
    feed = parser.feed
    for line in lines:
        for rec in feed(line):
            if fields is not None:
                rec.metrics = {k: v for k, v in rec.metrics.items() if k in fields}
            yield rec
    for rec in parser.flush():
        if fields is not None:
            rec.metrics = {k: v for k, v in rec.metrics.items() if k in fields}
        yield rec


def _normalised(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        if "\x1b" in line:
            line = strip_ansi(line)
        if "\r" in line or "\n" in line:
            yield from line.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n")
        else:
            yield line


def parse_lines(
    lines: Iterable[str], format: str | None = None, *, fields: Iterable[str] | None = None
) -> Iterator[Record]:
    """Parse an iterable of text lines (line endings and ANSI codes are tolerated).

    `format`: a name from `format_names()` (or an alias); None detects it. `fields`: keep only these
    metric keys (the Megatron parser then reads just those labels, which is several times faster).
    """
    wanted = frozenset(fields) if fields is not None else None
    parser = make_parser(format)
    if wanted is not None and isinstance(parser, megatron.MegatronParser):
        parser = megatron.MegatronParser(fields=wanted)
    return _run(parser, _normalised(lines), wanted)


def parse_file(
    path: str | Path, format: str | None = None, *, fields: Iterable[str] | None = None
) -> Iterator[Record]:
    """Stream the records of a log file; see `parse_lines` for `format` and `fields`.

    Raises `ConfigError` when the file does not exist (checked before the first record is asked for).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            Problem(
                key=str(path),
                message="log file not found",
                fix="pass the path of a run log, trainer_log.jsonl or metrics file",
            )
        )
    wanted = frozenset(fields) if fields is not None else None
    if not format or format == "auto":
        detected = detect_format(path, max_lines=DETECT_BUFFER * 32)
        parser = get_format(detected).parser() if detected else AutoParser()
    else:
        parser = get_format(format).parser()
    if isinstance(parser, megatron.MegatronParser):
        # The block-level scanner yields what the line parser would; with `fields` it filters itself.
        return fastscan.scan_file(path, megatron.MegatronParser(fields=wanted))
    return _run(parser, iter_lines(path), wanted)
