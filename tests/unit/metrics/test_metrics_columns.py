"""The columnar Megatron scanner (`columns.iter_columns`) against `parse_file`, row for row.

The reference is `parse_file(path, "megatron", fields=...)` (itself checked against the line parser in
test_metrics_fastscan.py): its `train` records' steps and field values, MISSING where a record lacks a
field, compared bit for bit (NaNs included). The same awkward lines are used, with tiny block sizes and
segments so that block and segment edges fall everywhere, in one process and in two.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from ascendfactory.errors import ConfigError
from ascendfactory.metrics import StepTable, parse_file
from ascendfactory.metrics.columns import MISSING, Columns, find_all, iter_columns, read_columns, segments
from tests.unit.metrics.test_metrics_fastscan import (
    ELAPSED,
    HEAD,
    LINES,
    LOSS,
    RANDOM_LOG_SETTINGS,
    RANDOM_LOGS,
    _fill,
    _write,
)

FIELD_LISTS = [
    [ELAPSED, LOSS],
    ["loss"],
    ["global batch size", "grad norm", "not logged"],
    [LOSS, "lm loss value", "allocated"],
]


def _reference(path: Path, fields: list[str]) -> tuple[list[int], dict[str, list[bytes]]]:
    steps, values = [], {f: [] for f in fields}
    for rec in parse_file(path, "megatron", fields=fields):
        if rec.kind == "train":
            steps.append(rec.step)
            for f in fields:
                values[f].append(struct.pack("<d", rec.metrics.get(f, MISSING)))
    return steps, values


def _as_lists(cols: Columns, fields: list[str]) -> tuple[list[int], dict[str, list[bytes]]]:
    return cols.steps.tolist(), {f: [struct.pack("<d", v) for v in cols.values[f].tolist()] for f in fields}


def _check(path: Path, fields: list[str], **options: int) -> int:
    expected = _reference(path, fields)
    got = read_columns(path, fields, **options)
    assert _as_lists(got, fields) == expected, (fields, options)
    evals = [r for r in parse_file(path, "megatron", fields=fields) if r.kind in ("eval", "test")]
    assert [(r.step, r.kind, r.metrics) for r in got.others] == [(r.step, r.kind, r.metrics) for r in evals]
    return len(expected[0])


@RANDOM_LOG_SETTINGS
@RANDOM_LOGS
def test_columns_match_parse_file(
    tmp_path: Path, picks: list[int], crlf: bool, final_newline: bool, chunk: int
) -> None:
    path = tmp_path / "run.log"
    _write(path, picks, crlf=crlf, final_newline=final_newline)
    for fields in FIELD_LISTS:
        _check(path, fields, chunk_size=chunk, workers=1)


@pytest.mark.parametrize("fields", FIELD_LISTS)
def test_every_line_kind_in_one_log(tmp_path: Path, fields: list[str]) -> None:
    path = tmp_path / "all.log"
    _write(path, [k for k in range(len(LINES)) for _ in range(3)], crlf=False, final_newline=False)
    for chunk in (1, 50, 4096, 1 << 20):
        assert _check(path, fields, chunk_size=chunk, workers=1) >= 20


def test_segments_and_two_workers_give_the_same_rows(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    picks = [(k * 7) % len(LINES) for k in range(3000)]
    _write(path, picks, crlf=False, final_newline=True)
    size = path.stat().st_size
    ranges = segments(path, size, 4096)
    assert len(ranges) > 20 and ranges[0][0] == 0 and ranges[-1][1] is None
    data = path.read_bytes()
    for start, _ in ranges[1:]:
        assert data[start - 2 : start] == b"|\n"  # a cut follows a line ending in `|`
    for fields in FIELD_LISTS:
        n = _check(path, fields, workers=1)
        assert _check(path, fields, workers=2, segment_bytes=4096) == n > 500
        assert _check(path, fields, workers=1, segment_bytes=4096, chunk_size=999) == n


def test_pieces_stream_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_text("".join(" " + _fill(HEAD, i) + "\n" for i in range(1, 2001)))
    pieces = list(iter_columns(path, [LOSS], workers=2, segment_bytes=16 << 10))
    assert len(pieces) > 5
    steps = np.concatenate([p.steps for p in pieces])
    assert steps.tolist() == list(range(1, 2001))
    assert all(p.present(LOSS).all() for p in pieces)


def test_missing_is_not_a_logged_nan(tmp_path: Path) -> None:
    path = tmp_path / "nan.log"
    path.write_text("iteration 1/10 | lm loss: nan |\niteration 2/10 | grad norm: 1 |\n")
    cols = read_columns(path, [LOSS])
    assert cols.steps.tolist() == [1, 2]
    assert cols.present(LOSS).tolist() == [True, False]
    assert np.isnan(cols.values[LOSS]).all()


def test_find_all_overlapping_and_edges() -> None:
    a = np.frombuffer(b"aaaa iteration iteratio iteration", np.uint8)
    assert find_all(a, b"aa").tolist() == [0, 1, 2]
    assert find_all(a, b"iteration").tolist() == [5, 24]
    assert find_all(a, b"n").tolist() == [13, 32]
    assert find_all(a, b"x" * 40).size == 0


def test_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="log file not found"):
        list(iter_columns(tmp_path / "nope.log", [LOSS]))
    (tmp_path / "a.log").write_text("x\n")
    with pytest.raises(ValueError, match="at least one field"):
        list(iter_columns(tmp_path / "a.log", []))
    assert len(read_columns(tmp_path / "a.log", [LOSS])) == 0


def _table_key(table: StepTable) -> tuple:
    return (
        list(table.steps),
        {
            k: (table.series(k)[0], [struct.pack("<d", v) for v in table.series(k)[1]])
            for k in sorted(table.keys())
        },
    )


@pytest.mark.parametrize("segment", [1 << 20, 2048])
def test_step_table_from_columns_joins_resumed_segments(tmp_path: Path, segment: int) -> None:
    """A resumed run (steps restart at 6) gives the same StepTable from columns as from records."""
    path = tmp_path / "resumed.log"
    first = [" " + _fill(HEAD, i) for i in range(1, 41)]
    second = [" " + _fill(HEAD, i).replace("lm loss", "loss") for i in range(6, 61)]
    path.write_text("\n".join(first + ["saving checkpoint at iteration 5 to /c"] + second) + "\n")
    fields = [LOSS, "loss"]
    from_records = StepTable.from_records(r for r in parse_file(path, "megatron", fields=fields))
    from_columns = StepTable()
    for piece in iter_columns(path, fields, workers=2, segment_bytes=segment):
        from_columns.add_columns(piece.steps, piece.values)
    assert _table_key(from_columns) == _table_key(from_records)
    assert list(from_columns.steps) == list(range(1, 61))
    assert from_columns.series(LOSS)[0] == list(range(1, 6))  # the resumed run logs `loss:` only
