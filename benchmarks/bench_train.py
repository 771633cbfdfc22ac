"""Embedded trainer throughput on CPU.

1. tokens/s of one process of `ascendfactory.engine.train` vs `transformers.Trainer` on the same tiny Qwen2
   model, batch and sequence length, like with like (printed): fp32, SDPA attention, fused torch AdamW with
   the same lr / betas / eps and no weight decay, clipping at 1.0, no gradient accumulation, and the same
   intra-op thread count for both single processes (--threads; default: torch's default on this machine).
   Step time = forward + backward + clip + optimizer (ours: `time/train_step/execute` from the log; theirs: a
   callback from on_step_begin to on_step_end), the first WARMUP steps of each run dropped. The two runs of
   a repeat are interleaved (order alternating), as other jobs may share the CPU; reported: median over
   repeats of each run's median, the ratio of those medians, per-repeat ratios, the best single step and
   the load average. Goal: ratio >= 1. Needs `accelerate` (transformers.Trainer requires it).
2. Time per step from 1 to 2 processes for DP, TP and PP (same global batch; torchrun gives each rank one
   thread, the single process uses --threads).

    python benchmarks/bench_train.py [--repeats 5] [--steps 20] [--threads N] [--skip-scaling]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascendfactory.engine.train.logline import parse_log_line  # noqa: E402
from tests.support import training as T  # noqa: E402

MODEL = dict(
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    vocab_size=2048,
    max_position_embeddings=1024,
)
SEQ, MBS, WARMUP = 256, 4, 5
LR, BETAS, EPS, CLIP = 1e-4, (0.9, 0.999), 1e-8, 1.0


def torch_threads() -> int:
    """torch's default intra-op thread count on this machine (what an unconfigured process uses)."""
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True, text=True
    )
    return int(out.stdout.strip())


def our_step_times(
    work: Path, data: str, *, nproc: int, steps: int, extra: list[str], gbs: int = MBS, threads: int = 0
) -> list[float]:
    flags = [
        "--tokenizer-name-or-path",
        str(work / "hf"),
        "--load",
        str(work / extra_ckpt(work, extra)),
        "--finetune",
        "--data-path",
        data,
        "--seq-length",
        str(SEQ),
        "--micro-batch-size",
        str(MBS),
        "--global-batch-size",
        str(gbs),
        "--train-iters",
        str(steps),
        "--lr",
        str(LR),
        "--lr-decay-style",
        "constant",
        "--adam-beta1",
        str(BETAS[0]),
        "--adam-beta2",
        str(BETAS[1]),
        "--adam-eps",
        str(EPS),
        "--clip-grad",
        str(CLIP),
        "--log-interval",
        "1",
        "--split",
        "100,0,0",
        "--weight-decay",
        "0.0",
        *extra,
    ]
    if nproc == 1:
        proc = subprocess.run(
            [sys.executable, "-m", "ascendfactory.engine.train", *flags],
            capture_output=True,
            text=True,
            timeout=900,
            env=thread_env(threads),
        )
    else:
        proc = T.torchrun(nproc, flags, timeout=900)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    # `time/train_step/execute` (forward, backward, all-reduce, clip, optimizer) is what the
    # transformers.Trainer callback below measures too (its batch is fetched before on_step_begin).
    times = [
        float(parse_log_line(x)["time/train_step/execute"])
        for x in proc.stdout.splitlines()
        if x.startswith(" [metrics]") and "time/train_step/execute" in x
    ]
    return times[WARMUP:]


def thread_env(threads: int) -> dict[str, str]:
    """The environment of a single-process run: `threads` intra-op threads (0: torch's default)."""
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def extra_ckpt(work: Path, extra: list[str]) -> str:
    tp = (
        int(extra[extra.index("--tensor-model-parallel-size") + 1])
        if "--tensor-model-parallel-size" in extra
        else 1
    )
    pp = (
        int(extra[extra.index("--pipeline-model-parallel-size") + 1])
        if "--pipeline-model-parallel-size" in extra
        else 1
    )
    name = f"mg_{tp}_{pp}"
    if not (work / name).exists():
        T.hf_to_megatron(work / "hf", work / name, tp=tp, pp=pp)
    return name


def hf_trainer_step_times(work: Path, data: str, *, steps: int, threads: int = 0) -> tuple[list[float], dict]:
    """transformers.Trainer on the same samples (run in a child process so both start cold).

    Like ours: fp32, SDPA attention (causal, no mask tensor), fused torch AdamW (Trainer's default
    `adamw_torch_fused`) with the same lr / betas / eps / no weight decay, clipping at 1.0, one micro-batch
    per step (no gradient accumulation), the same number of threads. Returns (step times, its settings)."""
    code = f"""
import json, time, torch, numpy as np
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, TrainerCallback
from ascendfactory.engine.train.dataset import PretrainSamples
samples = PretrainSamples({data!r}, seq_length={SEQ}, split="100,0,0", seed=1234, num_samples={steps * MBS},
                          shuffle=True)
class DS(torch.utils.data.Dataset):
    def __len__(self): return {steps * MBS}
    def __getitem__(self, k):
        t, l = samples[k]
        return {{"input_ids": torch.from_numpy(t), "labels": torch.from_numpy(t)}}
times = []
class Clock(TrainerCallback):
    def on_step_begin(self, *a, **k): self.t = time.perf_counter()
    def on_step_end(self, *a, **k): times.append(time.perf_counter() - self.t)
model = AutoModelForCausalLM.from_pretrained({str(work / "hf")!r}, dtype=torch.float32,
                                             attn_implementation="sdpa")
args = TrainingArguments(output_dir={str(work / "hf_out")!r}, per_device_train_batch_size={MBS},
                         gradient_accumulation_steps=1, max_steps={steps},
                         learning_rate={LR}, lr_scheduler_type="constant", weight_decay=0.0,
                         adam_beta1={BETAS[0]}, adam_beta2={BETAS[1]}, adam_epsilon={EPS},
                         max_grad_norm={CLIP}, logging_steps=1000, save_strategy="no", report_to=[],
                         use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, optim="adamw_torch_fused")
trainer = Trainer(model=model, args=args, train_dataset=DS(), callbacks=[Clock()])
trainer.train()
opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
print("SETTINGS", json.dumps({{"threads": torch.get_num_threads(), "dtype": str(model.dtype),
      "attention": model.config._attn_implementation, "optimizer": type(opt).__name__,
      "fused": bool(opt.defaults.get("fused")), "betas": list(opt.defaults["betas"]),
      "eps": opt.defaults["eps"], "grad_accumulation": args.gradient_accumulation_steps}}))
print("TIMES", json.dumps(times))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=thread_env(threads),
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    settings = json.loads(next(x for x in lines if x.startswith("SETTINGS"))[8:])
    return json.loads(next(x for x in lines if x.startswith("TIMES"))[5:])[WARMUP:], settings


def our_settings(threads: int) -> dict:
    """What our single process runs with (the same probes as the Trainer child's)."""
    code = (
        "import json, torch; from ascendfactory.engine.train import model as m; import inspect; "
        "print(json.dumps({'threads': torch.get_num_threads(), "
        "'sdpa': '_attn_implementation = \"sdpa\"' in inspect.getsource(m.build_stage)}))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=thread_env(threads)
    )
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "threads": info["threads"],
        "dtype": "torch.float32",
        "attention": "sdpa" if info["sdpa"] else "?",
        "optimizer": "AdamW",
        "fused": True,
        "betas": list(BETAS),
        "eps": EPS,
        "grad_accumulation": 1,
    }


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads of both single-process runs")
    ap.add_argument("--skip-scaling", action="store_true")
    opts = ap.parse_args()
    threads = opts.threads or int(os.environ.get("OMP_NUM_THREADS") or 0) or torch_threads()
    work = Path(tempfile.mkdtemp(prefix="bench_train_"))
    T.make_tiny_model(work / "hf", family="qwen2", **MODEL)
    data = T.make_pretrain_data(work / "pt", vocab=MODEL["vocab_size"], docs=400)
    tokens = MBS * SEQ
    print(
        f"model: {MODEL}, seq {SEQ}, batch {MBS}, fp32, {opts.steps} steps ({WARMUP} warm-up dropped), "
        f"{opts.repeats} repeats, runs interleaved (order alternating), {os.cpu_count()} CPUs"
    )
    ours, theirs, loads = [], [], []  # per run: (median step, fastest step)
    hf_settings: dict = {}
    for r in range(opts.repeats):
        loads.append(os.getloadavg()[0])
        runs = ["ours", "hf"] if r % 2 == 0 else ["hf", "ours"]
        try:
            for who in runs:
                if who == "ours":
                    o = our_step_times(work, data, nproc=1, steps=opts.steps, extra=[], threads=threads)
                    ours.append((statistics.median(o), min(o)))
                else:
                    h, hf_settings = hf_trainer_step_times(work, data, steps=opts.steps, threads=threads)
                    theirs.append((statistics.median(h), min(h)))
        except (RuntimeError, StopIteration) as e:
            print(f"transformers.Trainer run failed (it needs accelerate): {str(e)[-300:]}")
            break
        loads.append(os.getloadavg()[0])
        print(
            f"  repeat {r + 1}: ours {ours[-1][0] * 1000:.1f} ms/step (best {ours[-1][1] * 1000:.1f}), "
            f"transformers.Trainer {theirs[-1][0] * 1000:.1f} ms/step (best {theirs[-1][1] * 1000:.1f}), "
            f"load {load()}"
        )
    mine = our_settings(threads)
    print("like with like (ours | transformers.Trainer):")
    for key in mine:
        print(f"  {key:18s} {str(mine[key]):18s} | {hf_settings.get(key, '?')}")
    for label, runs in (("ascendfactory.engine.train", ours), ("transformers.Trainer", theirs)):
        if runs:
            med, best = statistics.median(r[0] for r in runs), min(r[1] for r in runs)
            print(
                f"{label:27s}: {tokens / med:8.0f} tokens/s per process (median {med * 1000:.1f} ms/step; "
                f"best step {best * 1000:.1f} ms = {tokens / best:.0f} tokens/s)"
            )
    if theirs and len(theirs) == len(ours):
        ratio_med = statistics.median(r[0] for r in theirs) / statistics.median(r[0] for r in ours)
        ratio_best = min(r[1] for r in theirs) / min(r[1] for r in ours)
        per_repeat = [h[0] / o[0] for h, o in zip(theirs, ours)]
        spread = f"{min(per_repeat):.2f}-{max(per_repeat):.2f}"
        print(
            f"ratio ours / transformers.Trainer tokens/s: median {ratio_med:.2f}, "
            f"best step {ratio_best:.2f}, per repeat {spread}; "
            f"1-min load average while measuring {min(loads):.2f}-{max(loads):.2f}"
        )
    if opts.skip_scaling:
        return
    print(f"\nscaling, global batch 8 x seq 256 (MBS 4), 1 process with {threads} threads, 1 per rank:")
    layouts = {
        "1 process": (1, []),
        "DP=2": (2, []),
        "TP=2": (2, ["--tensor-model-parallel-size", "2"]),
        "PP=2 (1F1B, 2 micro-batches)": (2, ["--pipeline-model-parallel-size", "2"]),
    }
    base = None
    for name, (nproc, extra) in layouts.items():
        t0 = time.perf_counter()
        step = statistics.median(
            our_step_times(work, data, nproc=nproc, steps=opts.steps, extra=extra, gbs=8, threads=threads)
        )
        base = base or step
        print(
            f"  {name:30s} {step * 1000:8.1f} ms/step  {8 * SEQ / step / nproc:8.0f} tokens/s per process  "
            f"speed-up x{base / step:.2f}  (run {time.perf_counter() - t0:.0f} s, load {load()})"
        )


if __name__ == "__main__":
    main()
