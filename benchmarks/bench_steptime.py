"""Predicted against measured step time of the embedded trainer on CPU, on the layouts of bench_memory.py.

Each row is one real run of `torchrun -m ascendfactory.engine.train` (gloo, fp32, one thread per process as
torchrun sets it) on bench_memory.py's model and layouts (its reduced grid; the memory tracker off, so the
step is the trainer's own). The measured step time is the median over `--repeats` runs of
`time/train_step/execute` of iteration 2 (past the first). Right before each run the CPU "device" is
measured where the row runs, interleaved with the runs so that the load other processes put on the machine
weighs on both: the fp32 matmul rate of one thread (`ascendfactory.speed.probe`) and its copy bandwidth.
The prediction is `ascendfactory.speed.predict` with those figures and the CPU profile's calibrated
constants; the table prints both and the error; `--record FILE` writes the rows as the YAML that
`ascendfactory/speed/recorded/cpu.yaml` holds (the calibration's input:
`python -m ascendfactory.speed.calibrate`).

    python benchmarks/bench_steptime.py [--quick] [--repeats 3] [--record rows.yaml]
    python benchmarks/bench_steptime.py --shapes [--record rows.yaml]   # other model shapes (SHAPES)

`--shapes` runs a few single-process and data-parallel layouts on each model of `SHAPES` instead (hidden
64 to 384, the quickstart's demo shape among them): the runs that tell the per-layer launch cost and the
element-wise work apart from the matmuls, which one model shape cannot.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_memory as BM  # noqa: E402

from ascendfactory.speed import devices, probe  # noqa: E402
from ascendfactory.speed.model import Workload, predict  # noqa: E402
from tests.support import training as T  # noqa: E402

# Model shapes besides bench_memory's (`--shapes`): the quickstart's demo model (demo_assets/tiny-qwen2's
# config) and three sizes between it and bench_memory's medium one.
SHAPES = {
    "demo": dict(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=960,
        max_position_embeddings=1024,
    ),
    "quick": BM.MODELS["quick"],
    "h256": dict(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=4096,
        max_position_embeddings=1024,
    ),
    "h384": dict(
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=6,
        num_attention_heads=6,
        num_key_value_heads=2,
        vocab_size=8192,
        max_position_embeddings=1024,
    ),
}
SHAPE_ROWS = (
    BM.Row(tracker=False, seq=128, mbs=4),
    BM.Row(tracker=False, seq=256, mbs=1),
    BM.Row(tracker=False, seq=128, mbs=4, dp=2),
)


def workload(row: BM.Row, model: dict) -> Workload:
    h, heads = model["hidden_size"], model["num_attention_heads"]
    return Workload(
        layers=model["num_hidden_layers"],
        hidden=h,
        ffn=model["intermediate_size"],
        heads=heads,
        kv_heads=model["num_key_value_heads"],
        kv_channels=h // heads,
        vocab=model["vocab_size"],
        tied=False,
        seq=row.seq,
        mbs=row.mbs,
        gbs=row.mbs * row.dp * (2 if row.pp > 1 else 1),
        tp=row.tp,
        pp=row.pp,
        dp=row.dp,
        vpp=BM.vpp_chunks(row, model) if row.vpp else 1,
        recompute=row.recompute,
        distributed_optimizer=row.distopt,
        engine="embedded",
        precision="fp32",
    )


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="bench_memory's tiny model")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated row labels (substring match)")
    ap.add_argument("--record", default="", help="write the measured rows to this YAML file")
    ap.add_argument("--shapes", action="store_true", help="SHAPE_ROWS on each model of SHAPES")
    a = ap.parse_args()
    grid = [r for r in BM.grid("reduced", BM.supported(), 2) if r.tracker]
    plan = (
        [(name, shape, list(SHAPE_ROWS)) for name, shape in SHAPES.items()]
        if a.shapes
        else [
            (
                "quick" if a.quick else "medium",
                BM.MODELS["quick" if a.quick else "medium"],
                [replace(r, tracker=False) for r in grid],
            )
        ]
    )
    cpu = devices.device_speed("cpu")
    recorded = []
    print(f"{'run':48s} | {'measured s':>10s} | {'predicted s':>11s} | {'error':>7s} | matmul GFLOP/s")
    for name, model, rows in plan:
        if a.only:
            rows = [r for r in rows if any(o in r.label() for o in a.only.split(","))]
        if rows:
            recorded += measure(name, model, rows, a.repeats, cpu)
    if a.record:
        import yaml

        head = {
            "device": "cpu",
            "machine": "2-core CPU (the project's development machine), one thread per process, fp32",
            "date": datetime.date.today().isoformat(),
            "commit": commit(),
            "source": "benchmarks/bench_steptime.py"
            + (" --shapes (SHAPES x SHAPE_ROWS)" if a.shapes else " (bench_memory.py's reduced grid)")
            + ", memory tracker off",
            "runs": recorded,
        }
        Path(a.record).write_text(yaml.safe_dump(head, sort_keys=False), encoding="utf-8")
        print(f"recorded {len(recorded)} rows in {a.record}")


def measure(name: str, model: dict, rows: list, repeats: int, cpu) -> list[dict]:
    recorded = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        T.make_tiny_model(work / "hf", family="qwen2", **model)
        data = T.make_pretrain_data(work / "pt", vocab=model["vocab_size"], docs=600)
        for row in rows:
            steps, rates, bws = [], [], []
            for _ in range(repeats):
                rates.append(probe.matmul_flops(threads=1))
                bws.append(probe.copy_bandwidth(threads=1))
                steps.append(BM.run(row, work, work / "hf", data, model)["step_s"])
            measured, rate, bw = statistics.median(steps), statistics.median(rates), statistics.median(bws)
            dev = cpu.with_(matmul_flops={k: rate for k in cpu.matmul_flops}, memory_bandwidth=bw)
            pred = predict(workload(row, model), dev).step_s
            print(
                f"{name + ' ' + row.label():48s} | {measured:10.3f} | {pred:11.3f} | "
                f"{pred / measured - 1:+7.1%} | {rate / 1e9:.1f}",
                flush=True,
            )
            recorded.append(
                {
                    "label": f"{name} {row.label()}" if name != "medium" else row.label(),
                    "workload": workload(row, model).to_dict(),
                    "measured_step_s": round(measured, 4),
                    "matmul_flops": round(rate),
                    "memory_bandwidth": round(bw),
                }
            )
    return recorded


if __name__ == "__main__":
    main()
