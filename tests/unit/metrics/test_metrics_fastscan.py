"""The block-level Megatron scanner (`fastscan.scan_file`) against the line parser, record for record.

The reference is what `parse_file` did before the scanner: every line of `iter_lines` fed into a
`MegatronParser`, then `flush()`. Logs are composed from awkward lines (launcher prefixes, ANSI
colours, `\\r`, wrapped legacy heads, E-notation, missing and non-numeric fields, checkpoint, memory
and validation lines, non-ASCII heads, a partial last line) and read with tiny chunk sizes so that
block edges fall everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascendfactory.metrics import fastscan, parse_file
from ascendfactory.metrics.formats import _run
from ascendfactory.metrics.lines import iter_blocks, iter_lines
from ascendfactory.metrics.megatron import MegatronParser
from ascendfactory.metrics.record import Record

ELAPSED, LOSS = "elapsed time per iteration (ms)", "lm loss"
FIELD_SETS: list[frozenset[str] | None] = [
    None,
    frozenset({ELAPSED, LOSS}),
    frozenset({"loss"}),
    frozenset({"global batch size", "grad norm", "not logged"}),
]
HEAD = (
    "iteration {i:8d}/   50000 | consumed samples: {c} | elapsed time per iteration (ms): {ms} | "
    "learning rate: 1.250000E-05 | global batch size:   512 | lm loss: {loss} | grad norm: 1.5 |"
)
LINES = [
    " [2025-01-01 00:00:{s:02d}] " + HEAD,
    "[2025-01-01T23:59:{s:02d}] " + HEAD + "  ",
    "INFO [2026-06-22 19:28:{s:02d}] >>  " + HEAD,
    "[default3]: [2025-01-01 00:00:{s:02d}] " + HEAD,
    "3: " + HEAD,
    "(TaskRunner pid=12) " + HEAD,
    "\x1b[32m [2025-01-01 00:01:{s:02d}] " + HEAD + "\x1b[0m",
    " [2025-13-01 00:00:{s:02d}] " + HEAD,  # invalid date: no wall time
    " [2025-01-01 00:00:{s:02d}]  " + HEAD,  # other prefix shape
    "[x] [2025-01-01 00:00:{s:02d}] " + HEAD,  # the first "[" is not a stamp
    " iteration {i}/50000 | consumed samples: {c} | elapsed time per iteration (ms):  52728.1 | "
    "gloabl batch size:  512 | lm loss:  {loss} | number of skipped",  # wrapped legacy head ...
    "iterations: 0 | number of nan iterations:   0 | samples per second: 9.710 |",  # ... continued
    "iteration {i}/10 | elapsed time per iteration (ms): tensor(12.5) | lm loss: nan | loss: -inf |",
    "iteration {i}/10 | lm loss: n/a | elapsed time per iteration (ms): | grad norm: 1_0 |",
    "iteration {i}/10 |lm loss: 1.0|xlm loss: 2.0 | elapsed time per iteration (ms):3|",
    "iteration {i}/10 | loss: 1.0E-02 | lm loss:1e3 |",
    "iteration {i}/10 |",
    "iteration {i}/10lm loss: 1.5 | grad norm: 2 |",  # a label right after the head is not read
    "iteration {i} / 10 | no numbers here |",
    "iteration\u00a0{i}/10 | lm loss: 1.5 |",  # NBSP: a Unicode space the str regex accepts
    "iteration {i}/1\u0660 | lm loss: 1.5 |",  # an Arabic-Indic digit ends the total
    "iteration {i}/10 | lm loss: \u0661.5 | grad norm: 2 |",
    "iteration\x1c{i}/10\x1c| lm loss: 1.5 |\x1c",
    "警告: iteration {i}/10 | lm loss: 1.5 |",
    "[Rank 0] (after {i} iterations) memory (MB) | allocated: 1024.5 | max allocated: 2048.0 |",
    " [2025-01-01 00:00:{s:02d}] saving checkpoint at iteration {i} to /ckpt/run",
    " [2025-01-01 00:00:{s:02d}] successfully saved checkpoint from iteration {i} to /ckpt/run",
    "validation loss at iteration {i} | lm loss value: 2.5E+00 | lm loss PPL: 12.1 |",
    "-" * 90,  # Megatron frames each validation line with dashes
    " validation loss at iteration {i} on validation set | lm loss value: 2.4E+00 | lm loss PPL: 1.1E+01 | ",
    " validation loss at iteration {i} on test set | lm loss value: 2.6E+00 | lm loss PPL: 1.3E+01 | ",
    "skipping iteration {i} and iteration {i}/10 | lm loss: 3 |",
    "[W compiler_depend.ts:1] Warning: something on stderr (function operator())",
    "",
    "   ",
    "progress 10%\rprogress 20%\r [2025-01-01 00:00:{s:02d}] " + HEAD,
]


def _fill(template: str, i: int) -> str:
    loss = f"{1 + 1 / (i + 1):.6E}"
    return template.format(i=i, c=512 * i, s=i % 60, ms=f"{1200 + i * 0.5:.1f}", loss=loss)


def _write(path: Path, picks: list[int], *, crlf: bool, final_newline: bool) -> None:
    nl = "\r\n" if crlf else "\n"
    text = nl.join(_fill(LINES[k], n) for n, k in enumerate(picks))
    path.write_bytes((text + (nl if final_newline else "")).encode("utf-8"))


def _reference(path: Path, fields: frozenset[str] | None) -> list[Record]:
    return list(_run(MegatronParser(fields=fields), iter_lines(path), None))


def _key(records: list[Record]) -> list[tuple[object, ...]]:
    """Everything a record holds, metrics in order (NaN made comparable)."""
    return [
        (r.step, r.kind, r.wall_time, r.total_steps, r.note, [(k, repr(v)) for k, v in r.metrics.items()])
        for r in records
    ]


# Random logs of the lines above, with or without CRLF and a final newline, read in chunks of `chunk`
# bytes (the columnar scanner's tests use the same cases).
RANDOM_LOGS = given(
    picks=st.lists(st.integers(0, len(LINES) - 1), min_size=0, max_size=40),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    chunk=st.sampled_from([1, 7, 64, 300, 1 << 18]),
)
RANDOM_LOG_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@RANDOM_LOG_SETTINGS
@RANDOM_LOGS
def test_scan_matches_line_parser(
    tmp_path: Path, picks: list[int], crlf: bool, final_newline: bool, chunk: int
) -> None:
    path = tmp_path / "run.log"
    _write(path, picks, crlf=crlf, final_newline=final_newline)
    for fields in FIELD_SETS:
        fast = list(fastscan.scan_file(path, MegatronParser(fields=fields), chunk_size=chunk))
        assert _key(fast) == _key(_reference(path, fields)), (picks, fields)


@pytest.mark.parametrize("fields", FIELD_SETS)
def test_every_line_kind_in_one_log(tmp_path: Path, fields: frozenset[str] | None) -> None:
    path = tmp_path / "all.log"
    picks = [k for k in range(len(LINES)) for _ in range(3)]
    _write(path, picks, crlf=False, final_newline=False)
    reference = _reference(path, fields)
    kinds = {"train", "eval", "test", "memory", "checkpoint", "checkpoint_start"}
    assert {r.kind for r in reference} >= kinds
    for chunk in (1, 50, 4096, 1 << 20):
        fast = list(fastscan.scan_file(path, MegatronParser(fields=fields), chunk_size=chunk))
        assert _key(fast) == _key(reference), chunk


def test_parse_file_uses_the_scanner_for_megatron(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    _write(path, [0, 1, 2, 28, 10, 11, 24, 25], crlf=False, final_newline=True)
    for fmt in ("megatron", None):
        for fields in ([ELAPSED, LOSS], None):
            got = list(parse_file(path, fmt, fields=fields))
            assert _key(got) == _key(_reference(path, frozenset(fields) if fields else None))
    got = list(parse_file(path, fields=[LOSS]))
    assert got[0].metrics == {LOSS: pytest.approx(2.0)} and got[0].wall_time is not None


def test_stamp_cache_spans_minutes_and_days(tmp_path: Path) -> None:
    lines = [
        f"[2025-01-{1 + t // 86400:02d} {t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}] "
        + _fill(HEAD, t)
        for t in range(0, 3 * 86400, 997)
    ]
    path = tmp_path / "days.log"
    path.write_text("\n".join(lines) + "\n")
    fast = list(fastscan.scan_file(path, MegatronParser(fields=frozenset({LOSS}))))
    assert _key(fast) == _key(_reference(path, frozenset({LOSS})))
    assert [r.wall_time for r in fast] == [1735689600.0 + t for t in range(0, 3 * 86400, 997)]


def test_blocks_decode_to_the_same_lines(tmp_path: Path) -> None:
    path = tmp_path / "mixed.log"
    path.write_bytes(b"a\r\nb\x1b[1mc\x1b[0m\rd\n\xff\xfeok\n\ntail\r")
    from ascendfactory.metrics.lines import _decode

    for chunk in (1, 2, 5, 1 << 20):
        lines = [line for block in iter_blocks(path, chunk_size=chunk) for line in _decode(block)]
        expected = ["a", "bc", "d", "\ufffd\ufffdok", "", "tail"]
        assert lines == list(iter_lines(path, chunk_size=chunk)) == expected
