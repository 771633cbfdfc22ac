"""What tensor and data parallelism cost the embedded trainer on the CPU besides what the time model counts.

The trainer's TP layers are DTensor modules, so every operator on their weights (forward, backward, the
optimizer and the gradient clip) first goes through DTensor's Python dispatch. On a model so narrow that it
multiplies next to nothing (hidden 32, the `--launch` model of bench_step_ops.py widened to 4 heads so that
TP 2 divides them), a step is all dispatch, so TP 2 against TP 1 at 2 and at 8 layers reads it:

    dispatch(L) = measured(TP 2) - measured(TP 1) - (predicted(TP 2) - predicted(TP 1))

(the model's own terms, the collectives included, taken off), and then per layer and micro-batch
(dispatch(8) - dispatch(2)) / 6 and per step dispatch(2) - 2 x that. Data parallelism the same way, DP 2
against DP 1 (one micro-batch per rank, so each rank's work is the one process's): what a data-parallel
step costs besides its gradient all-reduce (the trainer's other per-step collectives, and each rank waiting
for the slower one), per step: the mean of the 2- and 8-layer figures. Each run is `torchrun -m
ascendfactory.engine.train` on one micro-batch (bench_memory.py's `run`: gloo, fp32, one thread per
process, memory tracker off, the step time of iteration 2); TP 1 and TP 2 runs are interleaved, each beside
a matmul probe, and the figures are medians over `--repeats`. The printed constants are at the median
probe: `speed.devices`' CPU profile holds them with that probe as `launch_flops`.

    python benchmarks/bench_parallel_overheads.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_memory as BM  # noqa: E402
import bench_step_ops as BO  # noqa: E402
import bench_steptime as BS  # noqa: E402

from ascendfactory.speed import devices, probe  # noqa: E402
from ascendfactory.speed.model import predict  # noqa: E402
from tests.support import training as T  # noqa: E402

MODEL = dict(BO.MICRO, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2)
MODEL["vocab_size"] = 128
SEQ = 64


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    cpu = devices.device_speed("cpu")
    assert cpu is not None
    bare = cpu.with_(tp_dispatch_step_s=0.0, tp_dispatch_layer_s=0.0, dp_step_s=0.0)
    dispatch, data_parallel, rates = {}, [], []
    with tempfile.TemporaryDirectory() as tmp:
        for layers in (2, 8):
            model = dict(MODEL, num_hidden_layers=layers)
            work = Path(tmp) / f"l{layers}"
            T.make_tiny_model(work / "hf", family="qwen2", **model)
            data = T.make_pretrain_data(work / "pt", vocab=model["vocab_size"], docs=200)
            rows = {
                "tp1": BM.Row(tracker=False, seq=SEQ, mbs=1),
                "tp2": BM.Row(tracker=False, seq=SEQ, mbs=1, tp=2),
                "dp2": BM.Row(tracker=False, seq=SEQ, mbs=1, dp=2),
            }
            steps: dict[str, list[float]] = {k: [] for k in rows}
            for _ in range(a.repeats):
                for key, row in rows.items():
                    rates.append(probe.matmul_flops(threads=1))
                    steps[key].append(BM.run(row, work, work / "hf", data, model)["step_s"])
            measured = {k: statistics.median(v) for k, v in steps.items()}
            predicted = {k: predict(BS.workload(row, model), bare).step_s for k, row in rows.items()}
            dispatch[layers] = measured["tp2"] - measured["tp1"] - (predicted["tp2"] - predicted["tp1"])
            data_parallel.append(measured["dp2"] - measured["tp1"] - (predicted["dp2"] - predicted["tp1"]))
            print(
                f"{layers} layers: "
                + ", ".join(
                    f"{k} {measured[k] * 1e3:.1f} ms {[round(s * 1e3, 1) for s in steps[k]]}" for k in rows
                )
                + f"; TP dispatch {dispatch[layers] * 1e3:.1f} ms, "
                + f"DP per step {data_parallel[-1] * 1e3:.1f} ms",
                flush=True,
            )
    layer = (dispatch[8] - dispatch[2]) / 6
    step = dispatch[2] - 2 * layer
    print(
        f"tp_dispatch_layer_s={layer:.4g} tp_dispatch_step_s={step:.4g} "
        f"dp_step_s={statistics.mean(data_parallel):.4g} "
        f"at a matmul probe of {statistics.median(rates) / 1e9:.1f} GFLOP/s (median of {len(rates)})"
    )


if __name__ == "__main__":
    main()
