"""Measured peak memory per rank of the embedded trainer on CPU, against Megatron's formulas.

Each row is one real run of `torchrun -m ascendfactory.engine.train` (gloo, random init, fp32, 4
iterations) on a Qwen2-shaped model built offline like the demo model (default: about 250 MB of fp32
weights; `--quick`: a tiny one); the peak is `max allocated` of Megatron's memory line (printed after
iteration 2, whose backward already holds the Adam moments), which on CPU is the trainer's tensor-level
tracker (`ascendfactory/engine/train/memory.py`). Printed per row: the
peak of every rank, the step time (`time/train_step/execute` of iteration 2: past the first, and the last
one the tracker counts, as it stops at the memory line),
and for a recompute row the measured saving against the same layout without recompute next to the saving
Megatron's per-layer activation formulas predict (Korthikanti et al., as Megatron's
`report_theoretical_memory`): no recompute keeps s*b*h*(34 + 5*a*s/h) bytes per layer in 16-bit, selective
keeps s*b*h*34, full keeps the layer input 2*s*b*h; x2 here for fp32 activations; with TP the terms divide
as s*b*h*(10 + 24/t + 5*a*s/(h*t)). The 5*a*s/h term (attention scores) is left out of the prediction:
SDPA's fused kernel (like flash attention on a device) keeps no scores, so selective predicts ~0.
For the distributed optimizer (when the trainer honours `--use-distributed-optimizer`) the prediction is
the optimizer state (8 bytes per parameter in fp32: two Adam moments) times (1 - 1/DP).
A virtual pipeline row (PP 2, one layer per chunk) is compared with the same row without it; its prediction
is Megatron's interleaved-schedule penalty on the first stage's activations (`predicted_saving_mb`), a
negative saving.

Grid: `--grid full` is the issue's grid (TP 1/2, PP 1/2 with and without VPP, DP 1/2, MBS 1/4, seq
256/1024, recompute none/selective/full, distributed optimizer on/off, SP on/off), the axes of features the
trainer does not honour yet left out (said at the start), layouts needing more than `--max-procs`
processes skipped; `--grid reduced` (default) varies one axis at a time from TP1 PP1 DP1 MBS1 seq 256; the
tracker's overhead is the same base run with `AF_CPU_MEMORY_TRACKER=0` (step time on vs off).

    python benchmarks/bench_memory.py [--quick] [--grid reduced|full] [--repeats 1] [--max-procs 4]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascendfactory.engine.train import flags as train_flags  # noqa: E402
from ascendfactory.metrics import parse_lines  # noqa: E402
from ascendfactory.metrics.summary import memory_by_rank  # noqa: E402
from tests.support import training as T  # noqa: E402

MODELS = {
    "medium": dict(  # ~63M parameters, ~250 MB of fp32 weights
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=6,
        num_attention_heads=12,
        num_key_value_heads=4,
        vocab_size=16384,
        max_position_embeddings=1024,
    ),
    "quick": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1024,
        max_position_embeddings=1024,
    ),
}
ITERS = 4  # the memory line after iteration 2: its backward already holds the Adam moments
RECOMPUTE = {
    "none": [],
    "selective": ["--recompute-granularity", "selective"],
    "full": [
        "--recompute-granularity",
        "full",
        "--recompute-method",
        "uniform",
        "--recompute-num-layers",
        "1",
    ],
}


@dataclass(frozen=True)
class Row:
    tp: int = 1
    pp: int = 1
    vpp: bool = False
    dp: int = 1
    mbs: int = 1
    seq: int = 256
    recompute: str = "none"
    distopt: bool = False
    sp: bool = False
    tracker: bool = True

    @property
    def procs(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}" + ("v" if self.vpp else ""), f"dp{self.dp}"]
        parts += [f"mbs{self.mbs}", f"s{self.seq}", self.recompute]
        parts += ["distopt"] * self.distopt + ["sp"] * self.sp + ["tracker-off"] * (not self.tracker)
        return " ".join(parts)

    def baseline(self) -> Row:
        """The row a feature's saving is measured against: a virtual pipeline against the same row
        without it, any other feature against the row without recompute, distopt and SP."""
        if self.vpp:
            return replace(self, vpp=False)
        return replace(self, recompute="none", distopt=False, sp=False)


def supported() -> dict[str, bool]:
    """Which optional axes the trainer honours (the distributed optimizer, SP and VPP come with issue 23's
    other half; until then they are IGNORED flags and a row would measure nothing)."""
    h = train_flags.HONOURED
    return {
        "distopt": "--use-distributed-optimizer" in h,
        "sp": "--sequence-parallel" in h,
        "vpp": "--num-layers-per-virtual-pipeline-stage" in h
        or "--virtual-pipeline-model-parallel-size" in h,
    }


def grid(kind: str, axes: dict[str, bool], max_procs: int) -> list[Row]:
    if kind == "full":
        rows = [
            Row(tp, pp, vpp, dp, mbs, seq, rc, do, sp)
            for tp, pp, vpp, dp, mbs, seq, rc, do, sp in itertools.product(
                (1, 2),
                (1, 2),
                (False, True) if axes["vpp"] else (False,),
                (1, 2),
                (1, 4),
                (256, 1024),
                tuple(RECOMPUTE),
                (False, True) if axes["distopt"] else (False,),
                (False, True) if axes["sp"] else (False,),
            )
            if not (vpp and pp == 1) and not (do and dp == 1) and not (sp and tp == 1)
        ]
    else:
        base = Row()
        rows = [base, replace(base, recompute="selective"), replace(base, recompute="full")]
        rows += [replace(base, tracker=False)]
        rows += [replace(base, seq=1024), replace(base, seq=1024, recompute="full")]
        rows += [replace(base, mbs=4), replace(base, mbs=4, recompute="full")]
        for axis in ({"tp": 2}, {"pp": 2}, {"dp": 2}):
            rows += [replace(base, **axis), replace(base, recompute="full", **axis)]
        if axes["vpp"]:
            rows += [replace(base, pp=2, vpp=True)]
        if axes["distopt"]:
            rows += [replace(base, dp=2, distopt=True)]
        if axes["sp"]:
            rows += [replace(base, tp=2, sp=True)]
    return [r for r in rows if r.procs <= max_procs]


def run(row: Row, work: Path, hf: Path, data: str, model: dict) -> dict:
    flags = [
        "--tokenizer-name-or-path",
        str(hf),
        "--data-path",
        data,
        "--seq-length",
        str(row.seq),
        "--micro-batch-size",
        str(row.mbs),
        "--global-batch-size",
        str(row.mbs * row.dp * (2 if row.pp > 1 else 1)),
        "--train-iters",
        str(ITERS),
        "--lr",
        "1e-4",
        "--log-interval",
        "2",
        "--split",
        "100,0,0",
        "--eval-iters",
        "0",
        "--tensor-model-parallel-size",
        str(row.tp),
        "--pipeline-model-parallel-size",
        str(row.pp),
        *RECOMPUTE[row.recompute],
    ]
    flags += ["--use-distributed-optimizer"] * row.distopt + ["--sequence-parallel"] * row.sp
    if row.vpp:
        flags += ["--num-layers-per-virtual-pipeline-stage", str(model["num_hidden_layers"] // (2 * row.pp))]
    env = {"AF_CPU_MEMORY_TRACKER": "1" if row.tracker else "0"}
    t0 = time.perf_counter()
    proc = T.torchrun(row.procs, flags, env=env, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"{row.label()} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    reports = memory_by_rank(parse_lines(proc.stdout.splitlines(), "megatron"))
    steps = {  # iteration -> seconds of its forward, backward and optimizer step
        int(line.split("iteration")[1].split("|")[0]): float(
            line.split("time/train_step/execute:")[1].split("|")[0]
        )
        for line in proc.stdout.splitlines()
        if "[metrics]" in line and "time/train_step/execute:" in line
    }
    return {
        "peaks": {rank: m["max_allocated_mb"] for rank, m in reports.items()},
        "step_s": steps[2],  # the second iteration: past the warm-up, still counted by the tracker
        "wall_s": time.perf_counter() - t0,
    }


def vpp_chunks(row: Row, model: dict) -> int:
    return model["num_hidden_layers"] // row.pp // (model["num_hidden_layers"] // (2 * row.pp))


def predicted_saving_mb(row: Row, model: dict) -> float | None:
    """Megatron's per-layer activation formulas: what recompute saves on the most loaded stage (fp32).

    A virtual pipeline (without recompute): `theoretical_memory_usage.py` `compute_activation_memory`
    gives the first stage s*b*h*(18 + 4*f/h) bytes per layer for all num_layers (PP micro-batches in
    flight), times 1 + (p - 1) / (p * v) with v chunks per stage, times min(1, m / p) without them; the
    saving is minus the difference (x2 for fp32)."""
    if row.vpp:
        if row.recompute != "none":
            return None
        s, b, h, f = row.seq, row.mbs, model["hidden_size"], model["intermediate_size"]
        p, m = row.pp, 2  # the run's micro-batches per iteration: GBS = MBS x DP x 2
        layers = s * b * h * (18 + 4 * f / h) * model["num_hidden_layers"] / row.tp * 2
        penalty = 1 + (p - 1) / (p * vpp_chunks(row, model))
        return -layers * (penalty - min(1, m / p)) / 2**20
    if row.recompute == "none":
        return None
    (
        s,
        b,
        h,
    ) = row.seq, row.mbs, model["hidden_size"]
    t, layers = row.tp, model["num_hidden_layers"] // row.pp
    # the 5*a*s/(h*t) term of the attention scores is left out: SDPA's fused kernel on CPU (as flash
    # attention on the device) keeps no scores, so selective recompute saves little (Megatron says so)
    plain = s * b * h * (10 + 24 / t)
    kept = s * b * h * (10 + 24 / t) if row.recompute == "selective" else 2 * s * b * h
    return (plain - kept) * layers * 2 / 2**20  # x2: fp32 activations


def params(model: dict) -> int:
    h, f, v, n = (
        model["hidden_size"],
        model["intermediate_size"],
        model["vocab_size"],
        model["num_hidden_layers"],
    )
    kv = h // model["num_attention_heads"] * model["num_key_value_heads"]
    per_layer = h * h * 2 + h * kv * 2 + 2 * kv + h + 3 * h * f + 2 * h
    return n * per_layer + 2 * v * h + h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a tiny model and the reduced grid")
    ap.add_argument("--grid", choices=("reduced", "full"), default="reduced")
    ap.add_argument("--repeats", type=int, default=1, help="runs per row (step time: median over them)")
    ap.add_argument("--max-procs", type=int, default=4)
    ap.add_argument("--only", default="", help="comma-separated row labels to run (substring match)")
    a = ap.parse_args()
    model = MODELS["quick" if a.quick else "medium"]
    axes = supported()
    print(f"model: {model} ({params(model) / 1e6:.1f}M parameters, {params(model) * 4 / 2**20:.0f} MB fp32)")
    print(
        "axes the trainer honours: "
        + ", ".join(f"{k}={'yes' if v else 'no (left out)'}" for k, v in axes.items())
    )
    static = 16 * params(model) / 2**20
    print(
        f"weights + gradients + Adam moments (fp32, 16 B/parameter): {static:.0f} MB on one rank, divided by "
        "TP x PP: where the peak is that, activations (and what recompute saves of them) do not show in it"
    )
    print(f"load average: {os.getloadavg()}")
    rows = grid(a.grid, axes, a.max_procs)
    if a.only:
        rows = [r for r in rows if any(o in r.label() for o in a.only.split(","))]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        T.make_tiny_model(work / "hf", family="qwen2", **model)
        data = T.make_pretrain_data(work / "pt", vocab=model["vocab_size"], docs=600)
        results: dict[Row, dict] = {}
        for row in rows:
            reps = [run(row, work, work / "hf", data, model) for _ in range(a.repeats)]
            results[row] = {
                "peaks": reps[0]["peaks"],
                "step_s": statistics.median(r["step_s"] for r in reps),
                "wall_s": sum(r["wall_s"] for r in reps),
            }
            print(f"  ran {row.label():44s} in {results[row]['wall_s']:.0f}s", flush=True)
    print()
    head = f"{'run':44s} | {'peak MB per rank (max allocated)':36s} | {'step s':>7s} | {'saving MB':>9s} | "
    head += f"{'predicted MB':>12s} | {'step cost':>9s}"
    print(head)
    print("-" * len(head))
    for row, r in results.items():
        peaks = " ".join(f"{v:.0f}" for _, v in sorted(r["peaks"].items()))
        base = results.get(row.baseline())
        saving = cost = pred = ""
        if base is not None and row != row.baseline() and row.tracker:
            saving = f"{max(base['peaks'].values()) - max(r['peaks'].values()):.0f}"
            cost = f"{r['step_s'] / base['step_s']:.2f}x"
            p = predicted_saving_mb(row, model)
            pred = "" if p is None else f"{p:.0f}"
            if row.distopt:
                pred = f"{8 * params(model) / row.tp / row.pp * (1 - 1 / row.dp) / 2**20:.0f}"
        print(
            f"{row.label():44s} | {peaks:36s} | {r['step_s']:7.2f} | {saving:>9s} | {pred:>12s} | {cost:>9s}"
        )
    on, off = results.get(Row()), results.get(Row(tracker=False))
    if on and off:
        print(
            f"\ntracker overhead: step {on['step_s']:.2f}s with it, {off['step_s']:.2f}s without "
            f"({on['step_s'] / off['step_s']:.2f}x)"
        )


if __name__ == "__main__":
    main()
