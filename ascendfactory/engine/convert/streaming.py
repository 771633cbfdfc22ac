"""Memory and threads of the streaming conversions: reused shard buffers, single-threaded copies."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["BufferPool", "owns_storage", "threads"]


@contextmanager
def threads(n: int | None) -> Iterator[None]:
    """Run the block with `n` torch intra-op threads (None: leave them), restoring the count after.

    The conversions move memory (copies, cats) and write files: one thread does that at memory speed,
    while OpenMP's barriers make a multi-threaded copy wait whenever another process holds one of the
    cores (measured: hf->mg 5x slower with 2 threads on 2 busy cores). Logit checks run full models and
    get the threads back.
    """
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def owns_storage(t: torch.Tensor) -> bool:
    """Whether `t` is contiguous and all of its storage (so torch.save writes exactly its bytes)."""
    return (
        t.is_contiguous()
        and t.storage_offset() == 0
        and t.untyped_storage().nbytes() == t.numel() * t.element_size()
    )


class BufferPool:
    """Tensors reused from one saved shard to the next (TP ranks and stages have the same shapes).

    Writing a shard needs new memory for the fused and cut tensors; fresh memory costs a page fault per
    page, which dominates the conversion on small pages. `take` hands out a free tensor of the shape and
    dtype (or a new one); `release` returns every tensor handed out, once the shard is saved. Each tensor
    still owns its storage, so the saved files are the same as with fresh tensors.
    """

    def __init__(self) -> None:
        self._free: dict[tuple[tuple[int, ...], torch.dtype], list[torch.Tensor]] = {}
        self._lent: list[torch.Tensor] = []

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        free = self._free.get((tuple(shape), dtype))
        t = free.pop() if free else torch.empty(shape, dtype=dtype)
        self._lent.append(t)
        return t

    def own(self, t: torch.Tensor) -> torch.Tensor:
        """`t` if it owns its storage, else a pooled copy (a view would save its whole storage)."""
        return t if owns_storage(t) else self.take(tuple(t.shape), t.dtype).copy_(t)

    def release(self) -> None:
        for t in self._lent:
            self._free.setdefault((tuple(t.shape), t.dtype), []).append(t)
        self._lent = []
