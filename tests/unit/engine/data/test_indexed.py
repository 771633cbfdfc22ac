"""Our indexed datasets against megatron-core's `IndexedDataset`, both ways, byte for byte."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendfactory.engine.data.indexed import (
    IndexedDataset,
    IndexedDatasetBuilder,
    IndexedDatasetError,
    bin_path,
    exists,
    idx_path,
    optimal_dtype,
)


def _mcore():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("megatron.core.datasets.indexed_dataset")


def _docs(seed: int = 0, n: int = 50, vocab: int = 1000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(0, 40))) for _ in range(n)]


def _write_ours(prefix: Path, docs: list[np.ndarray], dtype) -> None:
    with IndexedDatasetBuilder(prefix, dtype) as b:
        for d in docs:
            b.add_document(d)
        b.finalize()


def _write_mcore(prefix: Path, docs: list[np.ndarray], dtype) -> None:
    mc = _mcore()
    b = mc.IndexedDatasetBuilder(bin_path(prefix), dtype=dtype)
    for d in docs:
        b.add_document(np.asarray(d), [len(d)])
    b.finalize(idx_path(prefix))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
def test_ours_loads_in_megatron_core(tmp_path: Path, dtype) -> None:
    docs = _docs()
    _write_ours(tmp_path / "ours", docs, dtype)
    ds = _mcore().IndexedDataset(str(tmp_path / "ours"))
    assert len(ds) == len(docs)
    assert ds.index.dtype == dtype
    np.testing.assert_array_equal(ds.document_indices, np.arange(len(docs) + 1))
    for i, d in enumerate(docs):
        np.testing.assert_array_equal(ds[i], d)
        assert ds[i].dtype == dtype


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_byte_identical_to_megatron_core_builder(tmp_path: Path, dtype) -> None:
    docs = _docs(seed=3)
    _write_ours(tmp_path / "ours", docs, dtype)
    _write_mcore(tmp_path / "theirs", docs, dtype)
    for path in (bin_path, idx_path):
        assert Path(path(tmp_path / "ours")).read_bytes() == Path(path(tmp_path / "theirs")).read_bytes()


def test_we_read_megatron_core_files(tmp_path: Path) -> None:
    docs = _docs(seed=7, vocab=60000)
    _write_mcore(tmp_path / "theirs", docs, np.uint16)
    ds = IndexedDataset(tmp_path / "theirs")
    assert len(ds) == ds.num_documents == len(docs)
    assert ds.dtype == np.uint16
    np.testing.assert_array_equal(ds.sizes, [len(d) for d in docs])
    for i, d in enumerate(docs):
        np.testing.assert_array_equal(ds[i], d)
        np.testing.assert_array_equal(ds.document(i), d)


def test_get_with_offset_and_length(tmp_path: Path) -> None:
    _write_ours(tmp_path / "d", [np.arange(10), np.arange(100, 120)], np.int32)
    ds = IndexedDataset(tmp_path / "d")
    np.testing.assert_array_equal(ds.get(1, offset=5, length=3), [105, 106, 107])
    np.testing.assert_array_equal(ds.get(-1, offset=18), [118, 119])
    assert [a.tolist() for a in ds[0:2]] == [list(range(10)), list(range(100, 120))]
    with pytest.raises(IndexError):
        ds.get(2)
    with pytest.raises(IndexError):
        ds.get(0, offset=8, length=5)


def test_sentence_level_documents(tmp_path: Path) -> None:
    with IndexedDatasetBuilder(tmp_path / "s", np.int32) as b:
        b.add_document([1, 2, 3, 4, 5], lengths=[2, 3])
        b.add_document([6], lengths=[1])
        b.finalize()
    ds = IndexedDataset(tmp_path / "s")
    assert len(ds) == 3 and ds.num_documents == 2
    np.testing.assert_array_equal(ds.document_indices, [0, 2, 3])
    np.testing.assert_array_equal(ds.document(0), [1, 2, 3, 4, 5])
    mds = _mcore().IndexedDataset(str(tmp_path / "s"))
    np.testing.assert_array_equal(mds.document_indices, [0, 2, 3])
    np.testing.assert_array_equal(mds[1], [3, 4, 5])


def test_empty_dataset(tmp_path: Path) -> None:
    _write_ours(tmp_path / "e", [], np.uint16)
    ds = IndexedDataset(tmp_path / "e")
    assert len(ds) == 0 and ds.num_documents == 0


def test_nothing_visible_until_finalize_and_abort_cleans(tmp_path: Path) -> None:
    prefix = tmp_path / "x"
    with pytest.raises(RuntimeError):
        with IndexedDatasetBuilder(prefix, np.int32) as b:
            b.add_document([1, 2])
            assert not exists(prefix)
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_value_out_of_dtype_range_is_an_error(tmp_path: Path) -> None:
    with IndexedDatasetBuilder(tmp_path / "x", np.uint16) as b:
        with pytest.raises(IndexedDatasetError, match="does not fit in uint16"):
            b.add_document([70000])
        with pytest.raises(IndexedDatasetError, match="does not fit in uint16"):
            b.add_document([-100])


def test_bad_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(IndexedDatasetError, match="not found"):
        IndexedDataset(tmp_path / "missing")
    Path(idx_path(tmp_path / "bad")).write_bytes(b"NOTANIDX" * 8)
    Path(bin_path(tmp_path / "bad")).write_bytes(b"")
    with pytest.raises(IndexedDatasetError, match="bad magic"):
        IndexedDataset(tmp_path / "bad")
    _write_ours(tmp_path / "t", [np.arange(10)], np.int32)
    Path(bin_path(tmp_path / "t")).write_bytes(b"\0" * 8)
    with pytest.raises(IndexedDatasetError, match="truncated"):
        IndexedDataset(tmp_path / "t")


def test_optimal_dtype_rule() -> None:
    assert optimal_dtype(65499) == np.uint16
    assert optimal_dtype(65500) == np.int32
    assert optimal_dtype(None) == np.int32


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=20), max_size=20))
def test_round_trip_property(tmp_path_factory, docs: list[list[int]]) -> None:
    prefix = tmp_path_factory.mktemp("rt") / "d"
    _write_ours(prefix, [np.asarray(d, dtype=np.int64) for d in docs], np.int32)
    ds = IndexedDataset(prefix)
    assert [ds[i].tolist() for i in range(len(ds))] == docs
