"""What the trainer's memory line reports: Megatron's `report_memory` fields, from the device allocator or,
on CPU, from a tensor-level tracker of the training process.

On CUDA / NPU the figures are the caching allocator's (`memory_allocated`, `max_memory_allocated`,
`memory_reserved`, `max_memory_reserved`), as Megatron prints them.

On CPU there is no allocator that counts tensors, and the process RSS mixes the interpreter, libraries
and freed-but-kept heap with the tensors. `StorageTracker` counts what a device allocator would hold:
every live tensor storage of the process (weights, gradients, optimizer state, activations saved for
backward, temporaries between operators), each storage once (views share it), from its creation to the
moment its last reference dies:

- a `TorchDispatchMode` sees every operator call on this thread; each input and output tensor's untyped
  storage is registered by `data_ptr` with its byte size (tensors made outside the dispatcher, e.g.
  `torch.from_numpy` batches or weights loaded by `torch.load`, are registered when an operator first
  reads them; `seed` registers the model's existing parameters);
- a weak reference with a callback on the storage object (PyTorch keeps one Python object per storage
  while any tensor holds it) subtracts its bytes when it is freed;
- DTensor (TP) calls are let through to DTensor's own dispatch with the mode still active, so the local
  shards' operators are counted; FakeTensor / meta tensors (sharding propagation, pipelining's shape
  inference) hold no memory and are not counted.

Not counted: workspace a single kernel allocates and frees inside itself, and buffers communication
libraries (gloo) allocate outside PyTorch's allocator: the device allocator does not show kernel-internal
scratch of a fused kernel either. `reserved` / `max reserved` on CPU are the process RSS and its peak
(what the process holds from the operating system, the role the caching allocator's reserve plays).

Overhead: one Python call per operator (`benchmarks/bench_memory.py` measures it). The trainer counts
only until Megatron's line is printed (the first logged iteration), so later iterations pay nothing.
`AF_CPU_MEMORY_TRACKER=0` turns the tracker off; the line then reports RSS for all four fields.
"""

from __future__ import annotations

import os
import resource
import threading
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

TRACKER_ENV = "AF_CPU_MEMORY_TRACKER"  # "0": no tensor tracker on CPU (the memory line reports RSS)
MB = 1024.0 * 1024.0


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _StorageRef(weakref.ref):
    """A weak reference to a storage that remembers what was counted for it."""

    __slots__ = ("ptr", "size")


class StorageTracker(TorchDispatchMode):
    """Live bytes and peak bytes of every tensor storage this thread's operators touch."""

    def __init__(self) -> None:
        super().__init__()
        self.allocated = 0
        self.peak = 0
        self._live: dict[int, _StorageRef] = {}  # storage data_ptr -> its weak reference
        self._lock = threading.Lock()
        self._fake: type | None = None

    # -- registration ---------------------------------------------------------------------------------
    def track(self, t: torch.Tensor) -> None:
        """Count `t`'s storage once (a DTensor: its local shard); no-op for meta / fake / empty tensors."""
        if type(t) not in _PLAIN:
            t = getattr(t, "_local_tensor", None)  # DTensor; FakeTensor and others hold no memory here
            if t is None or type(t) not in _PLAIN:
                return
        if t.is_meta:
            return
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if not ptr:
            return
        size = storage.nbytes()
        with self._lock:
            ref = self._live.get(ptr)
            if ref is not None:
                if ref.size == size:
                    return
                self.allocated += size - ref.size  # resized in place (an out= operator)
                ref.size = size
            else:
                ref = self._live[ptr] = _StorageRef(storage, self._free)
                ref.ptr, ref.size = ptr, size
                self.allocated += size
            if self.allocated > self.peak:
                self.peak = self.allocated

    def _free(self, ref: _StorageRef) -> None:
        with self._lock:
            if self._live.get(ref.ptr) is ref:
                del self._live[ref.ptr]
                self.allocated -= ref.size

    def seed(self, tensors: Any) -> None:
        """Register tensors that exist already (a model's parameters and buffers)."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self.track(t)

    def _walk(self, values: Any) -> None:
        """Tensors in an operator's arguments or results (tensors, or lists/tuples of them)."""
        for v in values:
            if isinstance(v, torch.Tensor):
                self.track(v)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    if isinstance(x, torch.Tensor):
                        self.track(x)

    # -- the mode -------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        for t in types:
            if t not in _PLAIN:
                if self._fake is None:
                    from torch._subclasses.fake_tensor import FakeTensor

                    self._fake = FakeTensor
                if any(issubclass(t, self._fake) for t in types):
                    return func(*args, **kwargs)  # shape inference: no memory
                return NotImplemented  # DTensor & co: their dispatch runs the local operators in this mode
        self._walk(args)
        if kwargs:
            self._walk(kwargs.values())
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor):
            self.track(out)
        elif isinstance(out, (list, tuple)):
            self._walk(out)
        return out


class _TrackerHolder:
    active: StorageTracker | None = None


def start_tracker(device: torch.device) -> StorageTracker | None:
    """Enter a `StorageTracker` for the rest of the process (CPU only, unless AF_CPU_MEMORY_TRACKER=0)."""
    if device.type != "cpu" or os.environ.get(TRACKER_ENV, "1") == "0":
        return None
    tracker = StorageTracker()
    tracker.__enter__()
    _TrackerHolder.active = tracker
    return tracker


def stop_tracker(tracker: StorageTracker | None) -> None:
    """Leave the mode (its figures stay readable) and drop its weak references (no more callbacks)."""
    if tracker is not None and _TrackerHolder.active is tracker:
        _TrackerHolder.active = None
        tracker.__exit__(None, None, None)
        with tracker._lock:
            tracker._live.clear()


def _rss_bytes() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in bytes."""
    import psutil

    rss = float(psutil.Process(os.getpid()).memory_info().rss)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # kB on Linux
    return rss, max(rss, peak)


def memory_report(device: torch.device, tracker: StorageTracker | None) -> dict[str, float]:
    """Megatron's four `report_memory` figures in MB (unrounded, as Megatron prints them)."""
    acc = getattr(torch, device.type, None) if device.type in ("cuda", "npu") else None
    if acc is not None:
        return {
            "allocated": acc.memory_allocated() / MB,
            "max_allocated": acc.max_memory_allocated() / MB,
            "reserved": acc.memory_reserved() / MB,
            "max_reserved": acc.max_memory_reserved() / MB,
        }
    rss, peak_rss = _rss_bytes()
    if tracker is None:
        return {
            "allocated": rss / MB,
            "max_allocated": peak_rss / MB,
            "reserved": rss / MB,
            "max_reserved": peak_rss / MB,
        }
    return {
        "allocated": tracker.allocated / MB,
        "max_allocated": tracker.peak / MB,
        "reserved": rss / MB,
        "max_reserved": peak_rss / MB,
    }
