"""What a piece of a model keeps for backward, counted by autograd's saved-tensor hooks: the bytes of the
distinct storages saved while it runs, less those of tensors that live anyway (its parameters, its inputs).
Shared by the memory tests that re-measure the estimate's per-layer and attention terms."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def bytes_saved_for_backward(run: Callable[[], Any], exclude: Iterable[Any]) -> int:
    """Bytes of every storage autograd saves for backward while `run()` runs, each storage once, except the
    storages of the tensors in `exclude`."""
    import torch

    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    return sum(n for ptr, n in seen.items() if ptr not in skip)
