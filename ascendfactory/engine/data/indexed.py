"""Megatron indexed datasets (`.bin` + `.idx`), byte-compatible with megatron-core's `IndexedDataset`.

Layout of `<prefix>.idx` (all little-endian):

    9 bytes   magic  b"MMIDIDX\\x00\\x00"
    u64       version (1)
    u8        dtype code of the tokens in `.bin` (see `DTYPE_CODES`)
    u64       sequence count  S
    u64       document count  D  (= number of documents + 1: it starts with a 0)
    i32 * S   sequence lengths (in tokens)
    i64 * S   sequence pointers (byte offset of each sequence in `.bin`)
    i64 * D   document indices (sequence index where each document ends; first entry 0)

`<prefix>.bin` is the tokens of every sequence, back to back, in that dtype. Here every document is one
sequence unless `add_document` is given `lengths` (Megatron's `--split-sentences`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ascendfactory.errors import AscendFactoryError

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
_HEADER = struct.Struct("<9sQB")  # magic, version, dtype code
_COUNTS = struct.Struct("<QQ")  # sequence count, document count

# megatron-core's DType enum: numpy dtype <-> one-byte code in the index header.
DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.uint8): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.float64): 6,
    np.dtype(np.float32): 7,
    np.dtype(np.uint16): 8,
}
_CODE_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}


class IndexedDatasetError(AscendFactoryError):
    """An indexed dataset that cannot be read or written."""


def bin_path(path_prefix: str | os.PathLike[str]) -> str:
    """The data file of a dataset prefix."""
    return f"{os.fspath(path_prefix)}.bin"


def idx_path(path_prefix: str | os.PathLike[str]) -> str:
    """The index file of a dataset prefix."""
    return f"{os.fspath(path_prefix)}.idx"


def optimal_dtype(vocab_size: int | None) -> np.dtype:
    """megatron-core's rule: `uint16` when the vocabulary has fewer than 65500 entries, else `int32`."""
    return np.dtype(np.uint16) if vocab_size is not None and vocab_size < 65500 else np.dtype(np.int32)


def exists(path_prefix: str | os.PathLike[str]) -> bool:
    """Whether both files of the dataset exist."""
    return os.path.isfile(idx_path(path_prefix)) and os.path.isfile(bin_path(path_prefix))


def _dtype_code(dtype: Any) -> int:
    dt = np.dtype(dtype)
    if dt not in DTYPE_CODES:
        valid = ", ".join(sorted(d.name for d in DTYPE_CODES))
        raise IndexedDatasetError(f"dtype {dt.name} cannot be stored in an indexed dataset; use {valid}")
    return DTYPE_CODES[dt]


class IndexedDatasetBuilder:
    """Writes `<path_prefix>.bin` / `.idx`, under temporary names until `finalize()` renames them.

    Use as a context manager (or call `abort()`) so that a failure leaves nothing half-written:

        with IndexedDatasetBuilder("out/corpus_text_document", np.uint16) as b:
            b.add_document([1, 2, 3])
            b.finalize()
    """

    def __init__(self, path_prefix: str | os.PathLike[str], dtype: Any = np.int32) -> None:
        self.path_prefix = os.fspath(path_prefix)
        self.dtype = np.dtype(dtype)
        self._code = _dtype_code(self.dtype)
        suffix = f".tmp-{os.getpid()}"
        self._tmp_bin = bin_path(self.path_prefix) + suffix
        self._tmp_idx = idx_path(self.path_prefix) + suffix
        Path(self._tmp_bin).parent.mkdir(parents=True, exist_ok=True)
        self._data: BinaryIO | None = open(self._tmp_bin, "wb", buffering=1 << 20)  # noqa: SIM115
        self._lengths: list[int] = []
        self._doc_ends: list[int] = [0]
        self._finalized = False

    def __enter__(self) -> IndexedDatasetBuilder:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self._finalized:
            self.abort()

    def __len__(self) -> int:
        """Number of documents added so far."""
        return len(self._doc_ends) - 1

    def add_document(self, tokens: Sequence[int] | np.ndarray, lengths: Sequence[int] | None = None) -> None:
        """Append one document; `lengths` splits it into several sequences (default: one sequence)."""
        seq_lengths = None if lengths is None else [int(n) for n in lengths]
        array = self._write_tokens(tokens, expected=None if seq_lengths is None else sum(seq_lengths))
        self._lengths.extend([int(array.size)] if seq_lengths is None else seq_lengths)
        self._doc_ends.append(len(self._lengths))

    def add_documents(self, tokens: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray) -> None:
        """Append many one-sequence documents at once: `tokens` is their concatenation."""
        seq_lengths = np.asarray(lengths, dtype=np.int64)
        self._write_tokens(tokens, expected=int(seq_lengths.sum()))
        first = len(self._lengths)
        self._lengths.extend(seq_lengths.tolist())
        self._doc_ends.extend(range(first + 1, first + len(seq_lengths) + 1))

    def _write_tokens(self, tokens: Sequence[int] | np.ndarray, expected: int | None = None) -> np.ndarray:
        """Check, convert and append tokens to the data file (nothing is written if a check fails)."""
        if self._data is None:
            raise IndexedDatasetError(f"builder for {self.path_prefix} is already closed")
        array = np.asarray(tokens).reshape(-1)
        if expected is not None and expected != array.size:
            raise IndexedDatasetError(f"lengths sum to {expected} but {array.size} tokens were given")
        if array.dtype != self.dtype:
            if array.size and self.dtype.kind in "iu" and array.dtype.kind in "iu":
                info = np.iinfo(self.dtype)
                lo, hi = int(array.min()), int(array.max())
                if lo < info.min or hi > info.max:
                    raise IndexedDatasetError(
                        f"token value {lo if lo < info.min else hi} does not fit in {self.dtype.name} "
                        f"({self.path_prefix}); use int32 for this vocabulary"
                    )
            array = array.astype(self.dtype)
        array = np.ascontiguousarray(array)
        self._data.write(array.tobytes())
        return array

    def finalize(self) -> None:
        """Write the index and rename both files to their final names."""
        if self._data is None:
            raise IndexedDatasetError(f"builder for {self.path_prefix} is already closed")
        self._data.close()
        self._data = None
        lengths = np.asarray(self._lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        if len(lengths) > 1:
            np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        doc_ends = np.asarray(self._doc_ends, dtype=np.int64)
        try:
            with open(self._tmp_idx, "wb") as f:
                f.write(_HEADER.pack(INDEX_MAGIC, INDEX_VERSION, self._code))
                f.write(_COUNTS.pack(len(lengths), len(doc_ends)))
                f.write(lengths.tobytes())
                f.write(pointers.tobytes())
                f.write(doc_ends.tobytes())
            os.replace(self._tmp_bin, bin_path(self.path_prefix))
            os.replace(self._tmp_idx, idx_path(self.path_prefix))
        except BaseException:
            self.abort()
            raise
        self._finalized = True

    def abort(self) -> None:
        """Close and delete the temporary files (the final names are never touched)."""
        if self._data is not None:
            self._data.close()
            self._data = None
        for path in (self._tmp_bin, self._tmp_idx):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass


class IndexedDataset:
    """Memory-mapped reader of `<path_prefix>.bin` / `.idx`. Item `i` is sequence `i` as an ndarray."""

    def __init__(self, path_prefix: str | os.PathLike[str]) -> None:
        self.path_prefix = os.fspath(path_prefix)
        ipath, bpath = idx_path(self.path_prefix), bin_path(self.path_prefix)
        for path in (ipath, bpath):
            if not os.path.isfile(path):
                raise IndexedDatasetError(
                    f"{path} not found; --data-path must be the prefix without .bin/.idx "
                    "(e.g. out/corpus_text_document)"
                )
        with open(ipath, "rb") as f:
            head = f.read(_HEADER.size + _COUNTS.size)
        if len(head) < _HEADER.size + _COUNTS.size:
            raise IndexedDatasetError(f"{ipath} is truncated (not a Megatron index)")
        magic, version, code = _HEADER.unpack_from(head)
        if magic != INDEX_MAGIC:
            raise IndexedDatasetError(f"{ipath} is not a Megatron mmap index (bad magic {magic!r})")
        if version != INDEX_VERSION:
            raise IndexedDatasetError(f"{ipath}: unsupported index version {version}")
        if code not in _CODE_DTYPES:
            raise IndexedDatasetError(f"{ipath}: unknown dtype code {code}")
        self.dtype: np.dtype = _CODE_DTYPES[code]
        n_seq, n_doc = _COUNTS.unpack_from(head, _HEADER.size)
        offset = _HEADER.size + _COUNTS.size
        expected = offset + n_seq * (4 + 8) + n_doc * 8
        if os.path.getsize(ipath) < expected:
            raise IndexedDatasetError(f"{ipath} is truncated: {os.path.getsize(ipath)} < {expected} bytes")
        self._idx = np.memmap(ipath, mode="r", dtype=np.uint8)
        buf = self._idx
        self.sizes: np.ndarray = np.frombuffer(buf, dtype=np.int32, count=n_seq, offset=offset)
        self.pointers: np.ndarray = np.frombuffer(buf, dtype=np.int64, count=n_seq, offset=offset + 4 * n_seq)
        self.document_indices: np.ndarray = np.frombuffer(
            buf, dtype=np.int64, count=n_doc, offset=offset + 12 * n_seq
        )
        nbytes = os.path.getsize(bpath)
        need = int(self.pointers[-1]) + int(self.sizes[-1]) * self.dtype.itemsize if n_seq else 0
        if nbytes < need:
            raise IndexedDatasetError(f"{bpath} is truncated: {nbytes} < {need} bytes")
        # np.memmap cannot map an empty file; an empty dataset reads from an empty buffer instead.
        self._bin: np.ndarray = (
            np.memmap(bpath, mode="r", dtype=np.uint8) if nbytes else np.zeros(0, dtype=np.uint8)
        )

    def __len__(self) -> int:
        return int(self.sizes.shape[0])

    def __getitem__(self, idx: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(idx, slice):
            return [self.get(i) for i in range(*idx.indices(len(self)))]
        return self.get(idx)

    def get(self, idx: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens `[offset, offset + length)` of sequence `idx` (a read-only view into the mmap)."""
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"sequence index {idx} out of range for {n} sequences")
        idx = idx % n
        size = int(self.sizes[idx])
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise IndexError(f"tokens [{offset}, {offset + length}) out of range for a sequence of {size}")
        start = int(self.pointers[idx]) + offset * self.dtype.itemsize
        return np.frombuffer(self._bin, dtype=self.dtype, count=length, offset=start)

    def span(self, lo: int, hi: int) -> np.ndarray:
        """The tokens of sequences `[lo, hi)` back to back (one read-only view; sequences are stored in
        order, so they are contiguous in `.bin`)."""
        if not 0 <= lo <= hi <= len(self):
            raise IndexError(f"sequences [{lo}, {hi}) out of range for {len(self)} sequences")
        count = int(self.sizes[lo:hi].sum(dtype=np.int64))
        if count == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.frombuffer(self._bin, dtype=self.dtype, count=count, offset=int(self.pointers[lo]))

    def document(self, doc: int) -> np.ndarray:
        """All tokens of document `doc` (its sequences concatenated)."""
        lo, hi = int(self.document_indices[doc]), int(self.document_indices[doc + 1])
        if hi - lo == 1:
            return self.get(lo)
        return np.concatenate([self.get(i) for i in range(lo, hi)]) if hi > lo else np.zeros(0, self.dtype)

    @property
    def num_documents(self) -> int:
        """Number of documents (one less than `len(document_indices)`)."""
        return int(self.document_indices.shape[0]) - 1
