"""How close the pre-launch memory estimate comes to measured peaks, what it says of every shipped
template, and what it costs. Every part prints a table.

    python benchmarks/bench_memory_estimate.py measured [--shape base,demo,vocab,qwen3moe,dsv2lite] [--quick]
    python benchmarks/bench_memory_estimate.py measured --device cuda [--keep DIR]   # on a GPU machine
    python benchmarks/bench_memory_estimate.py templates                             # verdicts per device
    python benchmarks/bench_memory_estimate.py published                             # published peaks, peers
    python benchmarks/bench_memory_estimate.py timing [--runs 30]                    # cost in a dry run

1. `measured`: runs the embedded trainer (`ascendfactory-cli train`, torchrun) over a grid of layouts on
   models built here (random weights, the demo tokenizer) and sets each rank's measured peak (the memory
   line's `max allocated`: on CPU the tensor-level tracker, on CUDA `torch.cuda.max_memory_allocated`, over
   the first two iterations, optimizer state included) beside our estimate for that rank's pipeline stage.
   Shapes: `base` (hidden 256, ffn 704, 8/2 heads, 4 layers, vocab 4096, untied: the 27 layouts the
   estimate was first validated on), `demo` (the demo model: hidden 64, ffn 176, 2 layers, vocab 960) with
   its tied, bf16 variant (the GPU rehearsal's model), `vocab` (hidden 128, 4 layers, vocab 32000: the logits
   dominate), and the mixture-of-experts quickstarts' tiny models, `qwen3moe` (Qwen3-MoE: 4 experts, top 2,
   q/k norm) and `dsv2lite` (DeepSeek-V2-Lite: MLA, shared experts, a dense first layer), built offline
   with `engine.demo` and planned from their quickstart files, at EP 1 and 2, MBS 4 x 128 and 8 x 256, and
   the dense grid's layouts that apply (bf16, recompute, PP 2, DP 2 at EP 1, TP 2 with SP for Qwen3-MoE).
   `--device cuda`: the quickstart on one GPU and the Qwen2-0.5B-shaped layouts of the first GPU
   run (bf16, seq 1024/4096, MBS 1/4, recompute none/selective/full); the estimate then includes the CUDA
   runtime's workspaces (`memory/runtime.py`). Goal: median |error| <= 3%, largest <= 10%.
2. `templates`: every shipped template (`config` for each backend, experiment and model) planned as a dry
   run and estimated on a 64 GB Ascend 910B2, an 80 GB H100 and a 141 GB H200: the per-device peak and the
   verdict, and the largest component where it does not fit. Goal: 0 false refusals.
3. `published`: measured peaks from the literature and frameworks' own documents (each case cites its
   source), beside ours and three peers' formulas: Megatron's `report_theoretical_memory`
   (`theoretical_memory_usage.py`, re-stated here from the paper's formulas), DeepSpeed's model-state
   estimators (`estimate_zero2/3_model_states_mem_needs`, no activations) and `accelerate estimate-memory`'s
   "Training using Adam" (the largest of model, gradients, optimizer: 16 bytes per parameter in fp32,
   8 in bf16). Goal: within 15%.
4. `timing`: the in-process cost of the estimate a dry run makes (the backend's memory target from the
   typed run, the model, the device probe, the runtime's term) on the quickstart and the mindspeed-llm 7B
   template, median of `--runs`, beside the whole `make_plan`. Goal: under 5 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GB, GiB, MiB = 10**9, 2**30, 2**20
MEM_LINE = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| "
    r"max allocated: ([\d.]+)"
)
DEMO = REPO / "demo_assets" / "tiny-qwen2"

# --- 1. the embedded trainer, measured ---------------------------------------------------------------------
SHAPES = {  # config.json changes over the demo model's; None: the demo model as it is
    "base": {
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 4096,
        "max_position_embeddings": 4096,
    },
    "demo": None,
    "vocab": {
        "hidden_size": 128,
        "intermediate_size": 352,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    },
    "qwen05": {  # Qwen2-0.5B (the first GPU run's model): tied embeddings
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "num_hidden_layers": 24,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
    },
}
T = "backend_config.training."
LORA = {
    "lora-r": 8,
    "lora-alpha": 16,
    "lora-target-modules": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
}
FULL = {"recompute-granularity": "full", "recompute-method": "uniform", "recompute-num-layers": 1}
# (name, processes, {training flag: value}); DP is the rest of the processes. `_model`: config changes.
GRID = [
    ("base", 1, {}),
    ("mbs4", 1, {"micro-batch-size": 4}),
    ("seq1024", 1, {"seq-length": 1024}),
    ("mbs4-seq1024", 1, {"micro-batch-size": 4, "seq-length": 1024}),
    ("bf16", 1, {"bf16": True}),
    ("bf16-mbs4", 1, {"bf16": True, "micro-batch-size": 4}),
    ("tied", 1, {"_model": {"tie_word_embeddings": True}, "untie-embeddings-and-output-weights": False}),
    ("gbs8", 1, {"global-batch-size": 8}),
    ("dp2", 2, {}),
    ("dp2-mbs4", 2, {"micro-batch-size": 4}),
    ("dp2-seq1024", 2, {"seq-length": 1024}),
    ("tp2", 2, {"tensor-model-parallel-size": 2}),
    ("tp2-mbs4", 2, {"tensor-model-parallel-size": 2, "micro-batch-size": 4}),
    ("tp2-seq1024", 2, {"tensor-model-parallel-size": 2, "seq-length": 1024}),
    ("pp2", 2, {"pipeline-model-parallel-size": 2, "global-batch-size": 4}),
    ("pp2-mbs4", 2, {"pipeline-model-parallel-size": 2, "micro-batch-size": 4, "global-batch-size": 16}),
    ("pp2-seq1024", 2, {"pipeline-model-parallel-size": 2, "seq-length": 1024, "global-batch-size": 4}),
    ("pp2-gbs8", 2, {"pipeline-model-parallel-size": 2, "global-batch-size": 8}),
    (
        "tp2-pp2",
        4,
        {"tensor-model-parallel-size": 2, "pipeline-model-parallel-size": 2, "global-batch-size": 4},
    ),
    ("tp2-dp2", 4, {"tensor-model-parallel-size": 2, "global-batch-size": 2}),
    ("pp2-dp2", 4, {"pipeline-model-parallel-size": 2, "global-batch-size": 8}),
    ("lora", 1, LORA),
    ("lora-mbs4", 1, {**LORA, "micro-batch-size": 4}),
    ("lora-bf16", 1, {**LORA, "bf16": True}),
    ("dp2-bf16-seq1024", 2, {"bf16": True, "seq-length": 1024}),
    ("recompute-full", 1, FULL),
    ("recompute-selective", 1, {"recompute-granularity": "selective"}),
    ("distopt-dp2", 2, {"use-distributed-optimizer": True}),
    ("sp-tp2", 2, {"tensor-model-parallel-size": 2, "sequence-parallel": True}),
    (
        "vpp2-pp2",
        2,
        {
            "pipeline-model-parallel-size": 2,
            "num-layers-per-virtual-pipeline-stage": 1,
            "global-batch-size": 4,
        },
    ),
]
QUICK = ("base", "mbs4", "dp2", "tp2", "pp2")
# the layouts the other shapes are measured on (2 layers for `demo`: no virtual pipeline)
SHAPE_LAYOUTS = {
    "base": [name for name, _, _ in GRID],
    "demo": [  # no seq1024: the demo model has 512 positions, and the plan refuses a longer seq-length
        "base",
        "mbs4",
        "bf16",
        "bf16-mbs4",
        "tied",
        "dp2",
        "tp2",
        "tp2-mbs4",
        "pp2",
        "pp2-dp2",
        "lora",
        "lora-mbs4",
        "recompute-full",
        "distopt-dp2",
    ],
    "vocab": ["base", "mbs4", "bf16", "tied", "dp2", "tp2", "pp2", "lora", "recompute-full"],
}
# Mixture-of-experts shapes: the MoE quickstarts' tiny models (`python -m ascendfactory.engine.demo DIR
# --family F`, built offline into the work directory; random weights as for the dense shapes), planned from
# their quickstart file (its catalog model, router and dispatcher flags): shape -> (demo family, experiment)
MOE_SHAPES = {
    "qwen3moe": ("qwen3_moe", "quickstart_qwen3_moe.yaml"),
    "dsv2lite": ("deepseek_v2_lite", "quickstart_deepseek2_lite.yaml"),
}
S128 = {"micro-batch-size": 4, "seq-length": 128}
S256 = {"micro-batch-size": 8, "seq-length": 256}
EP1, EP2 = {"expert-model-parallel-size": 1}, {"expert-model-parallel-size": 2}
# the dense grid's layouts where a MoE model takes them (EP must divide DP: EP 2 needs 2 data-parallel
# ranks; MLA runs without TP in the trainer, so TP is Qwen3-MoE's only)
MOE_GRID = [
    ("ep1-mbs4-s128", 1, {**EP1, **S128}),
    ("ep1-mbs8-s256", 1, {**EP1, **S256}),
    ("ep2-mbs4-s128", 2, {**EP2, **S128}),
    ("ep2-mbs8-s256", 2, {**EP2, **S256}),
    ("dp2-ep1-mbs8-s256", 2, {**EP1, **S256}),
    ("ep2-bf16-mbs8-s256", 2, {**EP2, **S256, "bf16": True}),
    ("ep2-full-mbs8-s256", 2, {**EP2, **S256, **FULL}),
    ("ep2-sel-mbs8-s256", 2, {**EP2, **S256, "recompute-granularity": "selective"}),
    ("pp2-ep1-mbs4-s128", 2, {**EP1, **S128, "pipeline-model-parallel-size": 2, "global-batch-size": 8}),
    ("ep1-mbs2-s512", 1, {**EP1, "micro-batch-size": 2, "seq-length": 512}),
    (
        "tp2-ep2-sp-mbs4-s128",
        4,
        {**EP2, **S128, "tensor-model-parallel-size": 2, "sequence-parallel": True},
    ),
]
MOE_QUICK = ("ep1-mbs4-s128", "ep2-mbs4-s128", "ep2-mbs8-s256")
MOE_LAYOUTS = {
    "qwen3moe": [name for name, _, _ in MOE_GRID],
    "dsv2lite": [name for name, _, _ in MOE_GRID if not name.startswith(("tp2", "pp2"))],  # 3 layers: no PP 2
}
# the GPU rehearsal's model (gpu/gpu_bench.py TINY): the demo shape tied, bf16, seq 128 and 512
DEMO_TIED = {
    "_model": {"tie_word_embeddings": True, "vocab_size": 1024},
    "bf16": True,
    "untie-embeddings-and-output-weights": False,
}
DEMO_EXTRA = [
    ("tied-bf16-s128", 1, {**DEMO_TIED, "seq-length": 128}),
    ("tied-bf16-mbs2-s512", 1, {**DEMO_TIED, "seq-length": 512, "micro-batch-size": 2}),
    ("tied-bf16-mbs2-s512-full", 1, {**DEMO_TIED, "seq-length": 512, "micro-batch-size": 2, **FULL}),
    (
        "tied-bf16-mbs2-s512-sel",
        1,
        {**DEMO_TIED, "seq-length": 512, "micro-batch-size": 2, "recompute-granularity": "selective"},
    ),
]
# --device cuda: the first GPU run's memory layouts (gpu/gpu_bench.py LAYOUTS) on the Qwen2-0.5B shape
CUDA_GRID = [
    ("mbs1-s1024", 1, {"bf16": True, "micro-batch-size": 1, "seq-length": 1024}),
    ("mbs4-s1024", 1, {"bf16": True, "micro-batch-size": 4, "seq-length": 1024}),
    ("mbs1-s4096", 1, {"bf16": True, "micro-batch-size": 1, "seq-length": 4096}),
    ("mbs4-s4096-full", 1, {"bf16": True, "micro-batch-size": 4, "seq-length": 4096, **FULL}),
    (
        "mbs4-s4096-selective",
        1,
        {"bf16": True, "micro-batch-size": 4, "seq-length": 4096, "recompute-granularity": "selective"},
    ),
]


def make_model(root: Path, shape: dict | None, extra: dict | None = None) -> Path:
    """A model folder: the demo tokenizer, config.json of `shape` (+ `extra`), no weights (random init)."""
    changes = {**(shape or {}), **(extra or {})}
    tag = "-".join(f"{k}{v}" for k, v in sorted((extra or {}).items()))
    model = root / ("model" + (f"-{tag}" if tag else ""))
    model.mkdir(parents=True, exist_ok=True)
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ):
        if (DEMO / name).exists():
            shutil.copy(DEMO / name, model / name)
    cfg = json.loads((DEMO / "config.json").read_text())
    cfg.update(changes)
    cfg["layer_types"] = ["full_attention"] * cfg["num_hidden_layers"]
    (model / "config.json").write_text(json.dumps(cfg, indent=1))
    return model


def make_moe_model(root: Path, family: str) -> Path:
    """The MoE quickstart's tiny model, built offline (`engine.demo`: the demo tokenizer, random weights)."""
    model = root / "model"
    if not (model / "config.json").exists():
        cmd = [sys.executable, "-m", "ascendfactory.engine.demo", str(model), "--family", family]
        subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True, timeout=600)
    return model


def overrides(model: Path, out: Path, nproc: int, flags: dict, port: int, *, seq: int = 256) -> list[str]:
    tied = json.loads((model / "config.json").read_text()).get("tie_word_embeddings", False)
    base = {
        "tokenizer-name-or-path": str(model),
        "train-iters": 2,
        "log-interval": 2,
        "save-interval": 1000,
        "eval-iters": 0,
        "eval-interval": 1000,
        "micro-batch-size": 1,
        "seq-length": seq,
        "untie-embeddings-and-output-weights": not tied,
    }
    base.update(flags)
    split = base.get("tensor-model-parallel-size", 1) * base.get("pipeline-model-parallel-size", 1)
    base.setdefault("global-batch-size", 2 * base["micro-batch-size"] * (nproc // split))
    args = [
        f"--af_output_dir={out}",
        f"--env.NPUS_PER_NODE={nproc}",
        f"--env.MASTER_PORT={port}",
        "--ckpt_load_type=0",
        "--train_auto_resume=false",
        "--convert_mg2hf_at_last=false",
        "--memory_check.on_exceed=warn",  # measure whatever the estimate says
    ]
    for k, v in base.items():
        if isinstance(v, list):
            args.append(f"--{T}{k}=[{','.join(v)}]")
        else:
            args.append(f"--{T}{k}={str(v).lower() if isinstance(v, bool) else v}")
    return args


def estimate_for(args: list[str], experiment: str = "quickstart.yaml") -> tuple[list[dict], dict]:
    """Our per-stage estimate for the same experiment (in-process, as `train --dry-run` makes it), and the
    layout it was made for (from the typed run)."""
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.cli._experiment_args import load_from_args

    plan = make_plan(load_from_args([str(REPO / "cfgs" / experiment), *args], collect=True), dry_run=True)
    run = plan.run
    return plan.memory["stages"], {"tp": run.tp, "pp": run.pp, "world_size": run.world_size}


def measure(args: list[str], out: Path, experiment: str = "quickstart.yaml") -> dict[int, float]:
    cmd = [sys.executable, "-m", "ascendfactory.cli.app", "train", str(REPO / "cfgs" / experiment), *args]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    return read_peaks(out)


def read_peaks(out: Path) -> dict[int, float]:
    """Each rank's `max allocated` from the memory lines in `out/logs` (bytes)."""
    peaks = {}
    for log in (out / "logs").glob("*run_log*") if (out / "logs").is_dir() else []:
        for m in MEM_LINE.finditer(log.read_text(errors="replace")):
            peaks[int(m.group(1))] = float(m.group(4)) * MiB
    return peaks


def stage_of(rank: int, layout: dict) -> int:
    tp, pp = layout.get("tp") or 1, layout.get("pp") or 1
    dp = layout["world_size"] // (tp * pp)
    return rank // (tp * dp)  # Megatron's order: TP fastest, then DP, then PP


def cases_for(shape: str, quick: bool) -> list[tuple[str, int, dict]]:
    if shape in MOE_SHAPES:
        by_name = {name: (name, n, f) for name, n, f in MOE_GRID}
        return [by_name[n] for n in MOE_LAYOUTS[shape] if not quick or n in MOE_QUICK]
    by_name = {name: (name, n, f) for name, n, f in GRID}
    names = SHAPE_LAYOUTS.get(shape, [])
    cases = [by_name[n] for n in names if not quick or n in QUICK]
    if shape == "demo" and not quick:
        cases += DEMO_EXTRA
    return cases


def run_measured(
    shapes: list[str], quick: bool, keep: str | None, reuse: bool, only: list[str] | None, device: str
) -> None:
    from ascendfactory.errors import ConfigError

    root = Path(keep or tempfile.mkdtemp(prefix="af-memest-"))
    rows: list[tuple[str, str, int, float, float, float]] = []
    failed: list[str] = []
    plan = [("qwen05", c) for c in CUDA_GRID] if device == "cuda" else []
    if device == "cuda":
        plan = [("demo", ("quickstart", 1, {"_quickstart": True}))] + plan
    else:
        plan = [(shape, c) for shape in shapes for c in cases_for(shape, quick)]
    print(f"{'shape':<7} {'layout':<26} {'rank':>4} {'measured':>12} {'estimate':>12} {'error':>8}")
    for i, (shape, (name, nproc, flags)) in enumerate(plan):
        if only and name not in only:
            continue
        out = root / shape / name
        flags = dict(flags)
        experiment = MOE_SHAPES[shape][1] if shape in MOE_SHAPES else "quickstart.yaml"
        if shape in MOE_SHAPES:
            model = make_moe_model(root / shape, MOE_SHAPES[shape][0])
            args = overrides(model, out, nproc, flags, 29700 + i)
        elif flags.pop("_quickstart", False):  # the README quickstart, on one device
            args = [
                f"--af_output_dir={out}",
                "--env.NPUS_PER_NODE=1",
                f"--env.MASTER_PORT={29700 + i}",
                "--backend_config.training.train-iters=2",
                "--convert_mg2hf_at_last=false",
            ]
        else:
            model = make_model(root / shape, SHAPES[shape], flags.pop("_model", None))
            args = overrides(model, out, nproc, flags, 29700 + i, seq=4096 if shape == "qwen05" else 256)
        try:
            stages, layout = estimate_for(args, experiment)
        except ConfigError as e:  # the plan refuses the layout: said, and the grid goes on
            failed.append(name)
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip().startswith("-")), str(e))
            print(f"{shape:<7} {name:<26}  refused by the plan: {first[:150]}", flush=True)
            continue
        peaks = read_peaks(out) if reuse else {}
        if not peaks:
            shutil.rmtree(out, ignore_errors=True)
            try:
                peaks = measure(args, out, experiment)
            except RuntimeError as e:  # the trainer failed: said, and the grid goes on
                failed.append(name)
                last = [line for line in str(e).splitlines() if line.strip()][-1:]
                print(f"{shape:<7} {name:<26}  training failed: {' '.join(last)[:150]}", flush=True)
                continue
        for rank, measured in sorted(peaks.items()):
            est = stages[stage_of(rank, layout)]["total"]
            err = (est - measured) / measured
            rows.append((shape, name, rank, measured, est, err))
            print(
                f"{shape:<7} {name:<26} {rank:>4} {measured / MiB:9.2f} MiB {est / MiB:9.2f} MiB "
                f"{err * 100:+7.1f}%",
                flush=True,
            )
    print(f"\n{'shape':<7} {'rank peaks':>10} {'median |error|':>15} {'largest |error|':>16}")
    for shape in dict.fromkeys(r[0] for r in rows):
        errs = [abs(r[5]) for r in rows if r[0] == shape]
        print(f"{shape:<7} {len(errs):>10} {statistics.median(errs) * 100:14.1f}% {max(errs) * 100:15.1f}%")
    errs = [abs(r[5]) for r in rows]
    if errs:
        print(
            f"{'all':<7} {len(errs):>10} {statistics.median(errs) * 100:14.1f}% {max(errs) * 100:15.1f}%"
            "   (goal: <= 3%, <= 10%)"
        )
    if failed:
        print(f"not measured (the trainer failed): {', '.join(failed)}")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


# --- 2. the shipped templates ------------------------------------------------------------------------------
TEMPLATE_MODELS = {  # the catalog models each backend's templates are rendered for here
    "torch": ("qwen2.5-7b", "qwen3-8b", "llama2-7b"),
    "mindspeed-llm": ("qwen2.5-7b", "qwen3-8b", "llama2-7b", "qwen2.5-72b"),
    "llamafactory": ("qwen2.5-7b", "qwen3-8b", "llama2-7b"),
    "verl": ("qwen2.5-7b",),
    "mindspeed-rl": ("qwen2.5-7b",),
    "mindspeed-mm": ("qwen2.5-vl-7b",),
}
DEVICES = ("ascend-910b2", "h100-80gb", "h200")


def run_templates() -> None:
    from ascendfactory.backends.planner import make_plan
    from ascendfactory.backends.registry import get_backend
    from ascendfactory.config.load import load_experiment
    from ascendfactory.errors import AscendFactoryError
    from ascendfactory.features.templates import render_experiment

    tmp = Path(tempfile.mkdtemp(prefix="af-memtpl-"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "VC_", "PET_"))}
    print(f"{'backend':<14} {'experiment':<9} {'model':<14} " + " ".join(f"{d:>24}" for d in DEVICES))
    refused = []
    for backend, models in TEMPLATE_MODELS.items():
        for exp in get_backend(backend).experiments():
            if exp == "tiny-sft":
                continue
            for model in models:
                path = tmp / f"{backend}-{exp}-{model}.yaml"
                try:
                    path.write_text(
                        render_experiment(
                            backend=backend, model_name=model, exp_name=exp, output_file=str(path)
                        )
                    )
                except AscendFactoryError:
                    continue  # the backend offers no such template for this model
                cells = []
                for device in DEVICES:
                    loaded = load_experiment(str(path), [f"--memory_check.device={device}"], collect=True)
                    plan = make_plan(loaded, dry_run=True, environ=environ)
                    m = plan.memory
                    stage = max(m["stages"], key=lambda s: s["total"])
                    verdict = "fits" if m["fits"] else "DOES NOT FIT"
                    cells.append(f"{m['per_device_peak_bytes'] / GiB:7.2f} GiB {verdict:>12}")
                    if not m["fits"]:
                        parts = {k: v for k, v in stage.items() if k not in ("stage", "total")}
                        largest = max(parts, key=parts.get)
                        refused.append(
                            (backend, exp, model, device, stage["stage"], largest, parts[largest] / GiB)
                        )
                print(f"{backend:<14} {exp:<9} {model:<14} " + " ".join(f"{c:>24}" for c in cells))
    print(f"\n{len(refused)} DOES NOT FIT verdicts (a refusal of a real run):")
    for backend, exp, model, device, stage, largest, size in refused:
        print(f"  {backend} {exp} {model} on {device}: stage {stage}, largest {largest} {size:.2f} GiB")
    shutil.rmtree(tmp, ignore_errors=True)


# --- 3. published peaks -------------------------------------------------------------------------------------
def megatron_theoretical(
    shape, *, tp, pp, dp, mbs, seq, dist_opt, vpp=None, micro_batches=None, sp=False, selective=False
) -> float:
    """Megatron-LM `report_theoretical_memory` (weights + optimizer for the most loaded shard, Korthikanti
    activations of the first stage; the 'without SP' path unless SP and selective recompute), bytes."""
    h, L, f, a = shape.hidden, shape.layers, shape.ffn, shape.heads
    g = shape.kv_heads
    attn = 2 * h * h * (1 + g / a) * (shape.q_size / h)
    layer = 2 * h * (f * 1.5 + 1) + attn
    vocab = shape.padded_vocab(tp)
    emb = h * vocab
    block = layer * L + h
    shard = (block / pp + emb) / tp + (emb / tp if (not shape.tied and pp == 1) else 0)
    states = shard * (6 + 12 / dp if dist_opt else 18)
    s, b = seq, mbs
    if sp and selective:
        act = s * b * h * (18 + 4 * f / h) * L + 8 * s * b * pp + s * b * h * pp
    else:
        act = s * b * h * (10 + 24 / tp) * L + 8 * s * b * pp + s * b * h * pp
    if vpp:
        act *= 1 + (pp - 1) / (pp * vpp)
    elif pp > 1 and micro_batches is not None:
        act *= min(1, micro_batches / pp)
    if sp and selective:
        if pp == 1:
            act += s * b * h * 4 * (1 + vocab / h)
        act /= tp
    else:
        if pp == 1:
            act += (s * b * vocab / tp + s * b * h) * 2
        act *= 1.05
    return states + act


def deepspeed_states(params: float, largest: float, *, stage: int, n: int) -> float:
    """DeepSpeed's model-state estimators (no activations): ZeRO-2 4P + 16P/N, ZeRO-3 4 largest + 18P/N."""
    return 4 * params + 16 * params / n if stage == 2 else 4 * largest + 18 * params / n


def accelerate_adam(params: float, dtype: str) -> float:
    """`accelerate estimate-memory`, 'Training using Adam': 16 bytes/param (fp32) or 8 (bf16), whole model."""
    return params * (16 if dtype == "fp32" else 8)


def published_cases():
    """(label, source, our job, measured bytes, what it measures, peer figures)."""
    from ascendfactory.config.catalog import from_catalog
    from ascendfactory.memory.hf import HFJob
    from ascendfactory.memory.megatron import MegatronJob
    from ascendfactory.memory.shape import shape_from_arch

    llama = shape_from_arch(from_catalog("llama2-7b"))
    src = (
        "NVIDIA/Megatron-LM tools/get_training_info/README.md (PR #482), torch.cuda.max_memory_allocated, "
        "seq 2048"
    )
    for dp, tp, pp, mbs, gbs, meas in (
        (8, 1, 1, 2, 2048, 69.1),
        (4, 2, 1, 4, 512, 55.7),
        (4, 1, 2, 2, 2048, 49.8),
        (1, 8, 1, 4, 128, 28.8),
    ):
        job = MegatronJob(
            shape=llama, tp=tp, pp=pp, dp=dp, mbs=mbs, gbs=gbs, seq=2048, distributed_optimizer=True
        )
        mt = megatron_theoretical(
            llama, tp=tp, pp=pp, dp=dp, mbs=mbs, seq=2048, dist_opt=True, micro_batches=gbs // (mbs * dp)
        )
        peers = {
            "megatron": mt,
            "deepspeed": None,
            "accelerate": accelerate_adam(llama.params(), "bf16") / (tp * pp),
        }
        yield (f"Llama-2-7B DP{dp} TP{tp} PP{pp} MBS{mbs}", src, job, meas * GB, "allocated", peers)
    qwen14 = shape_from_arch(from_catalog("qwen2.5-14b"))
    job = MegatronJob(
        shape=qwen14,
        tp=4,
        dp=2,
        mbs=1,
        gbs=16,
        seq=8192,
        distributed_optimizer=True,
        sequence_parallel=True,
        recompute="selective",
    )
    mt = megatron_theoretical(
        qwen14, tp=4, pp=1, dp=2, mbs=1, seq=8192, dist_opt=True, sp=True, selective=True
    )
    yield (
        "Qwen2.5-14B Megatron-SWIFT TP4 DP2 SP selective, 8192",
        "modelscope/ms-swift Megatron-SWIFT benchmark "
        "doc (64 GB) / examples/train/megatron/base_to_chat.sh ('8 * 65GiB'), nvidia-smi",
        job,
        64 * GiB,
        "process",
        {"megatron": mt, "deepspeed": None, "accelerate": accelerate_adam(qwen14.params(), "bf16") / 4},
    )
    for stage, meas in ((2, 80), (3, 58)):
        job = HFJob(
            shape=qwen14,
            devices=8,
            batch=1,
            seq=8192,
            finetuning="full",
            zero=stage,
            gradient_checkpointing=True,
        )
        ds = deepspeed_states(qwen14.params(), qwen14.largest_layer(), stage=stage, n=8)
        yield (
            f"Qwen2.5-14B swift sft ZeRO-{stage}, 8x A800, packed 8192",
            "modelscope/ms-swift Megatron-SWIFT benchmark doc ('8 * 80GiB' / 58 GiB), nvidia-smi",
            job,
            meas * GiB,
            "process",
            {"megatron": None, "deepspeed": ds, "accelerate": accelerate_adam(qwen14.params(), "bf16")},
        )


def moe_cases():
    """The mixture-of-experts rows (tests/support/published_moe.py), as `published_cases` rows."""
    from tests.support.published_moe import published

    for label, job, measured in published():
        source = "modelscope/ms-swift Megatron-SWIFT example (see published_moe.py), the device's reading"
        peers = {"megatron": None, "deepspeed": None, "accelerate": None}
        yield (label, source, job, measured * GiB, "process", peers)


def run_published() -> None:
    from ascendfactory.memory.devices import RESERVE_FIXED, RESERVE_FRACTION

    print(
        f"{'case':<58} {'measured':>9} {'ours':>9} {'err':>7} | "
        f"{'Megatron':>9} {'DeepSpeed':>9} {'accelerate':>10}"
    )
    errors = []
    for label, source, job, measured, kind, peers in (*published_cases(), *moe_cases()):
        est = job.estimate().peak
        if kind == "process":  # nvidia-smi: the process holds the runtime context and the allocator's reserve
            est += RESERVE_FIXED + RESERVE_FRACTION * 80 * GiB
        err = (est - measured) / measured
        errors.append(abs(err))

        def cell(v):
            return f"{(v - measured) / measured * 100:+8.1f}%" if v else f"{'-':>9}"

        print(
            f"{label:<58} {measured / GiB:8.1f}G {est / GiB:8.1f}G {err * 100:+6.1f}% | "
            f"{cell(peers['megatron'])} {cell(peers['deepspeed'])} {cell(peers['accelerate'])}"
        )
        print(f"    source: {source}")
        if kind == "process" and job.shape.experts:
            # the rank's peak stage by component, so that what the reading holds beyond it is plain
            stage = max(job.estimate().stages, key=lambda s: s.total)
            parts = ("weights", "gradients", "optimizer", "activations", "logits", "buffers")
            print(
                "    ours: "
                + ", ".join(f"{p} {getattr(stage, p) / GiB:.2f}" for p in parts)
                + f", reserve {(RESERVE_FIXED + RESERVE_FRACTION * 80 * GiB) / GiB:.2f} GiB"
            )
    print(f"\n{len(errors)} published cases: largest |error| {max(errors) * 100:.1f}% (goal: within 15%)")


# --- 4. timing ---------------------------------------------------------------------------------------------
def run_timing(runs: int) -> None:
    from ascendfactory.backends.planner import attach_memory, make_plan
    from ascendfactory.backends.registry import get_backend
    from ascendfactory.cli._experiment_args import load_from_args
    from ascendfactory.features.templates import render_experiment

    tmp = Path(tempfile.mkdtemp(prefix="af-memtime-"))
    ms7b = tmp / "ms7b.yaml"
    ms7b.write_text(
        render_experiment(
            backend="mindspeed-llm", model_name="qwen2.5-7b", exp_name="full-4k", output_file=str(ms7b)
        )
    )
    print(f"{'experiment':<22} {'estimate (median)':>18} {'min':>8} {'max':>8} {'whole dry run':>14}")
    for label, path in (
        ("quickstart (torch)", REPO / "cfgs" / "quickstart.yaml"),
        ("mindspeed-llm 7B", ms7b),
    ):
        loaded = load_from_args([str(path)], collect=True)
        backend = get_backend(loaded.config.backend)
        plans, estimates = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            plan = make_plan(loaded, dry_run=True)
            plans.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            attach_memory(
                plan, backend.memory_target(plan.run), loaded, dry_run=True, environ=dict(os.environ)
            )
            estimates.append(time.perf_counter() - t0)
        print(
            f"{label:<22} {statistics.median(estimates) * 1000:15.2f} ms {min(estimates) * 1000:6.2f}ms "
            f"{max(estimates) * 1000:6.2f}ms {statistics.median(plans) * 1000:11.1f} ms   (goal: < 5 ms)"
        )
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    sys.path.insert(0, str(REPO))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("measured")
    m.add_argument(
        "--shape",
        default="base,demo,vocab,qwen3moe,dsv2lite",
        help="comma-separated: base, demo, vocab, qwen3moe, dsv2lite",
    )
    m.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    m.add_argument("--quick", action="store_true")
    m.add_argument("--keep", help="work in this directory and keep it")
    m.add_argument("--reuse", action="store_true", help="with --keep: read the peaks of runs already there")
    m.add_argument("--only", help="comma-separated case names")
    sub.add_parser("templates")
    sub.add_parser("published")
    t = sub.add_parser("timing")
    t.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    os.chdir(REPO)
    if a.what == "measured":
        only = a.only.split(",") if a.only else None
        run_measured(a.shape.split(","), a.quick, a.keep, a.reuse, only, a.device)
    elif a.what == "templates":
        run_templates()
    elif a.what == "published":
        run_published()
    else:
        run_timing(a.runs)


if __name__ == "__main__":
    main()
