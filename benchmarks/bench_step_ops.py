"""What one iteration of the embedded trainer launches: its operators counted by torch.profiler.

Runs the trainer in this process (one rank, gloo, fp32, one thread, as `torchrun` runs a CPU rank) on a
model of `bench_steptime.SHAPES`, profiles one iteration past the first two, and prints the operators the
step called: the top-level ATen calls (each one a call from Python or the autograd engine into the
dispatcher: what a per-op launch cost is paid on), split into matmuls (mm, addmm, bmm, the attention
kernel) and the rest, with their CPU time. Run it on two layer counts and two micro-batch counts to read the
operators per layer and micro-batch and per step (`--layers`, `--mbs`, `--gbs`).

    python benchmarks/bench_step_ops.py --shape demo [--layers 2] [--seq 128] [--mbs 4] [--gbs 4]
"""

from __future__ import annotations

import argparse
import collections
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_steptime as BS  # noqa: E402

from tests.support import training as T  # noqa: E402

# `--launch`: a Qwen2 model so narrow that its step is all operator calls (hidden 16, 2 layers)
MICRO = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    vocab_size=64,
    max_position_embeddings=64,
)
MATMULS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile_step(flags: list[str], times: list[float] | None = None):
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ascendfactory.engine.train import trainer as TR
    from ascendfactory.engine.train.__main__ import main

    torch.set_num_threads(1)
    calls = {"n": 0}
    original = TR.Trainer.train_step
    out = {}

    def step(self):
        calls["n"] += 1
        if calls["n"] != 3:
            r = original(self)
            if times is not None and calls["n"] > 3:
                times.append(self.last_phase["time/train_step/execute"])
            return r
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            r = original(self)
        out["prof"] = prof
        return r

    TR.Trainer.train_step = step
    os.environ.update(
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        AF_CPU_MEMORY_TRACKER="0",
    )
    try:
        main(flags)
    finally:
        TR.Trainer.train_step = original
    return out["prof"]


def top_level(events):
    def has_aten_parent(e):
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return True
            p = p.cpu_parent
        return False

    return [e for e in events if e.name.startswith("aten::") and not has_aten_parent(e)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="demo")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--mbs", type=int, default=4)
    ap.add_argument("--gbs", type=int, default=0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument(
        "--launch",
        action="store_true",
        help="the per-operator cost: the trainer on MICRO (next to no FLOPs or bytes), its step over its ops",
    )
    a = ap.parse_args()
    if a.launch:
        a.shape, a.seq, a.mbs, a.gbs, a.iters = "micro", 16, 1, 1, max(a.iters, 40)
    model = dict(MICRO if a.shape == "micro" else (BS.SHAPES.get(a.shape) or BS.BM.MODELS[a.shape]))
    if a.layers:
        model["num_hidden_layers"] = a.layers
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        T.make_tiny_model(work / "hf", family="qwen2", **model)
        data = T.make_pretrain_data(work / "pt", vocab=model["vocab_size"], docs=600)
        flags = [
            "--tokenizer-name-or-path",
            str(work / "hf"),
            "--data-path",
            data,
            "--seq-length",
            str(a.seq),
            "--micro-batch-size",
            str(a.mbs),
            "--global-batch-size",
            str(a.gbs or a.mbs),
            "--train-iters",
            str(a.iters),
            "--lr",
            "1e-4",
            "--log-interval",
            "1",
            "--split",
            "100,0,0",
            "--eval-iters",
            "0",
        ]
        from ascendfactory.speed import probe

        rates = [probe.matmul_flops(threads=1)]
        times: list[float] = []
        prof = profile_step(flags, times)
        rates.append(probe.matmul_flops(threads=1))
    events = list(prof.events())
    top = top_level(events)
    total = sum(e.cpu_time_total for e in top) / 1e3
    mm = [e for e in top if e.name in MATMULS or any(c.name in MATMULS for c in e.cpu_children)]
    by = collections.Counter(e.name for e in top)
    t_by = collections.Counter()
    for e in top:
        t_by[e.name] += e.cpu_time_total / 1e3
    print(
        f"top-level aten ops: {len(top)}  ({total:.1f} ms in them); with a matmul inside: {len(mm)} "
        f"({sum(e.cpu_time_total for e in mm) / 1e3:.1f} ms)"
    )
    for name, t in t_by.most_common(a.top):
        print(f"  {name:50s} {by[name]:5d} {t:8.2f} ms")
    if times:
        step = statistics.median(times)
        rate = statistics.median(rates)
        print(
            f"step (median of {len(times)} unprofiled iterations): {step * 1e3:.2f} ms; "
            f"{step / len(top) * 1e6:.2f} us "
            f"per operator; matmul probe {rate / 1e9:.1f} GFLOP/s (before {rates[0] / 1e9:.1f}, "
            f"after {rates[1] / 1e9:.1f})"
        )


if __name__ == "__main__":
    main()
