"""The CPU tensor tracker behind the memory line: storages counted once, freed when their last reference
dies, activations saved for backward held until the backward, and Megatron's four figures in MB."""

from __future__ import annotations

import gc

import pytest
import torch

from ascendfactory.engine.train import memory

MB = 2**20


def test_counts_each_storage_once_views_included():
    tr = memory.StorageTracker()
    with tr:
        x = torch.zeros(MB // 4)  # 1 MiB of float32
        v = x.view(4, -1)
        w = x[: MB // 8]
        assert tr.allocated == MB
        del x, v
        gc.collect()
        assert tr.allocated == MB  # the slice still holds the storage
        del w
        gc.collect()
        assert tr.allocated == 0
    assert tr.peak == MB


def test_saved_activation_lives_until_backward_and_peak_includes_temporaries():
    tr = memory.StorageTracker()
    with tr:
        x = torch.randn(MB // 4, requires_grad=True)  # 1 MiB
        y = (x * 2).exp()  # x * 2 is a temporary (1 MiB); exp saves its output y
        z = y.sum()  # keeps the graph (and what exp saved) alive
        del y
        gc.collect()
        assert tr.allocated == 2 * MB + 4  # x + the output exp saved for backward + z
        assert tr.peak == 3 * MB  # x, x * 2 and exp(x * 2) were alive together
        z.backward()
        del z
        gc.collect()
        assert tr.allocated == 2 * MB  # x and x.grad
        x.grad = None
        gc.collect()
        assert tr.allocated == MB


def test_tensors_made_outside_the_dispatcher_counted_when_read():
    import numpy as np

    tr = memory.StorageTracker()
    with tr:
        batch = torch.from_numpy(np.zeros(MB // 8, dtype=np.int64))  # 1 MiB, numpy's memory
        total = batch.sum()
        assert tr.allocated == MB + total.untyped_storage().nbytes()
        buf, before = _saved(torch.ones(MB // 4)), tr.allocated
        loaded = torch.load(buf, weights_only=True)  # storages made by unpickling
        loaded.add_(1)
        assert tr.allocated == before + MB


def _saved(t):
    import io

    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    return buf


def test_seed_and_meta_tensors():
    tr = memory.StorageTracker()
    lin = torch.nn.Linear(256, 256, bias=False)  # made before the tracker
    tr.seed(lin.parameters())
    assert tr.allocated == 256 * 256 * 4
    with tr:
        torch.empty(10**9, device="meta")  # holds no memory
    assert tr.allocated == 256 * 256 * 4


def test_report_in_megabytes_cpu():
    tr = memory.StorageTracker()
    tr.allocated, tr.peak = 3 * MB, 5 * MB
    report = memory.memory_report(torch.device("cpu"), tr)
    assert report["allocated"] == 3.0 and report["max_allocated"] == 5.0
    assert report["max_reserved"] >= report["reserved"] > 0  # the process RSS and its peak


def test_tracker_only_on_cpu_and_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(memory.TRACKER_ENV, "0")
    assert memory.start_tracker(torch.device("cpu")) is None
    monkeypatch.delenv(memory.TRACKER_ENV)
    assert memory.start_tracker(torch.device("meta")) is None
    tr = memory.start_tracker(torch.device("cpu"))
    try:
        assert isinstance(tr, memory.StorageTracker)
        keep = torch.ones(1024)
        assert tr.allocated >= 4096
    finally:
        memory.stop_tracker(tr)
    del keep


@pytest.mark.parametrize("same", [True, False])
def test_numerics_unchanged(same):
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)
    x = torch.randn(8, 32)
    ref = lin(x).square().mean()
    ref.backward()
    g0 = lin.weight.grad.clone()
    lin.weight.grad = None
    ctx = memory.StorageTracker() if same else torch.no_grad()
    with ctx:
        out = lin(x).square().mean()
        if same:
            out.backward()
    if same:
        assert torch.equal(out, ref) and torch.equal(lin.weight.grad, g0)
    else:
        assert torch.equal(out, ref.detach())
