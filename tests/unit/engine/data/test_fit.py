"""The data-fit check: label spans read from an indexed dataset, counted against a seq-length."""

from __future__ import annotations

import numpy as np
import pytest

from ascendfactory.engine.data import fit
from ascendfactory.engine.data.indexed import IndexedDatasetBuilder

P = fit.IGNORE_INDEX


def write_labels(prefix, rows):
    with IndexedDatasetBuilder(prefix + fit.LABELS_SUFFIX, np.int32) as b:
        for row in rows:
            b.add_document(np.asarray(row, dtype=np.int32))
        b.finalize()


def test_spans_and_counts(tmp_path, monkeypatch):
    prefix = str(tmp_path / "d")
    rows = [
        [P, P, 5, 6],  # answer at 2..3
        [P] * 10 + [7, 8],  # answer at 10..11
        [P, 4, 4, 4, 4, 4, 4],  # answer at 1..6
        [P, P, P],  # no answer
        [],  # empty
    ]
    write_labels(prefix, rows)
    monkeypatch.setattr(fit, "CHUNK_TOKENS", 5)  # several chunks, one sequence per chunk at least
    first, last = fit.label_spans(prefix)
    assert first.tolist() == [2, 10, 1, fit.NONE, fit.NONE]
    assert last.tolist() == [3, 11, 6, fit.NONE, fit.NONE]
    r = fit.report_from_spans(first, last, seq_length=5)
    assert (r.samples, r.beyond, r.cut_short, r.without_labels) == (5, 1, 1, 2)
    assert r.keep_95 == 12  # the longest of three answers ends at position 11
    assert r.refuse  # beyond + without labels: 3 of 5
    assert not fit.report_from_spans(first, last, seq_length=12).refuse


def test_refuses_only_a_majority():
    first = np.array([70, 80, 10, 20])
    last = np.array([90, 99, 30, 40])
    assert not fit.report_from_spans(first, last, 64).refuse  # 2 of 4: half, not most
    assert fit.report_from_spans(np.append(first, 65), np.append(last, 66), 64).refuse
    r = fit.report_from_spans(first, last, 64)
    assert "2 of 4 samples (50%)" in r.describe() and "--seq-length 100 would keep 95%" in r.describe()


def test_keep_95_is_the_95th_percentile():
    last = np.arange(100)  # answers end at 1..100
    r = fit.report_from_spans(np.zeros(100, dtype=np.int64), last, 1000)
    assert r.keep_95 == 95 and r.fits


@pytest.mark.parametrize(("on_unfit", "code"), [("fail", 2), ("warn", 0)])
def test_program_exit_codes(tmp_path, capsys, on_unfit, code):
    prefix = str(tmp_path / "d")
    write_labels(prefix, [[P] * 70 + [1, 2]] * 3 + [[P, 1]])
    assert fit.main(["--data-path", prefix, "--seq-length", "64", "--on-unfit", on_unfit]) == code
    text = capsys.readouterr()
    assert "3 of 4 samples" in (text.err if code else text.out)
