"""Embedded trainer throughput on CPU.

1. tokens/s of one process of `ascendfactory.engine.train` vs `transformers.Trainer` on the same tiny Qwen2
   model, batch and sequence length (fp32, AdamW, grad clipping 1.0). Step time = forward + backward +
   optimizer (ours: `time/train_step/execute` from the log; theirs: a callback from on_step_begin to
   on_step_end), the first WARMUP steps of each run dropped; median over repeats of each run's median, and
   the best single step (robust when other jobs share the CPU). Goal: ratio >= 1. Needs `accelerate`
   (transformers.Trainer requires it).
2. Time per step from 1 to 2 processes for DP, TP and PP (same global batch; torchrun gives each rank one
   thread, the single process uses every core).

    python benchmarks/bench_train.py [--repeats 5] [--steps 20] [--skip-scaling]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ascendfactory.engine.train import testing as T  # noqa: E402
from ascendfactory.engine.train.logline import parse_log_line  # noqa: E402

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


def our_step_times(
    work: Path, data: str, *, nproc: int, steps: int, extra: list[str], gbs: int = MBS
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
        "1e-4",
        "--lr-decay-style",
        "constant",
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
            timeout=600,
        )
    else:
        proc = T.torchrun(nproc, flags, timeout=600)
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


def hf_trainer_step_times(work: Path, data: str, *, steps: int) -> list[float]:
    """transformers.Trainer on the same samples (run in a child process so both start cold)."""
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
model = AutoModelForCausalLM.from_pretrained({str(work / "hf")!r}, dtype=torch.float32)
args = TrainingArguments(output_dir={str(work / "hf_out")!r}, per_device_train_batch_size={MBS},
                         max_steps={steps},
                         learning_rate=1e-4, lr_scheduler_type="constant", weight_decay=0.0,
                         max_grad_norm=1.0,
                         logging_steps=1000, save_strategy="no", report_to=[], use_cpu=True,
                         dataloader_num_workers=0, disable_tqdm=True, optim="adamw_torch")
Trainer(model=model, args=args, train_dataset=DS(), callbacks=[Clock()]).train()
print("TIMES", json.dumps(times))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    line = next(x for x in proc.stdout.splitlines() if x.startswith("TIMES"))
    return json.loads(line[5:])[WARMUP:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip-scaling", action="store_true")
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_train_"))
    T.make_tiny_model(work / "hf", family="qwen2", **MODEL)
    data = T.make_pretrain_data(work / "pt", vocab=MODEL["vocab_size"], docs=400)
    tokens = MBS * SEQ
    print(
        f"model: {MODEL}, seq {SEQ}, batch {MBS}, fp32, {opts.steps} steps ({WARMUP} warm-up dropped), "
        f"{opts.repeats} repeats"
    )
    ours, theirs = [], []  # per run: (median step, fastest step)
    for r in range(opts.repeats):
        o = our_step_times(work, data, nproc=1, steps=opts.steps, extra=[])
        ours.append((statistics.median(o), min(o)))
        try:
            h = hf_trainer_step_times(work, data, steps=opts.steps)
        except (RuntimeError, StopIteration) as e:
            print(f"transformers.Trainer run failed (it needs accelerate): {str(e)[-300:]}")
            break
        theirs.append((statistics.median(h), min(h)))
        print(
            f"  repeat {r + 1}: ours {ours[-1][0] * 1000:.1f} ms/step (best {ours[-1][1] * 1000:.1f}), "
            f"transformers.Trainer {theirs[-1][0] * 1000:.1f} ms/step (best {theirs[-1][1] * 1000:.1f})"
        )
    for label, runs in (("ascendfactory.engine.train", ours), ("transformers.Trainer", theirs)):
        if runs:
            med, best = statistics.median(r[0] for r in runs), min(r[1] for r in runs)
            print(
                f"{label:27s}: {tokens / med:8.0f} tokens/s per process (median {med * 1000:.1f} ms/step; "
                f"best step {best * 1000:.1f} ms = {tokens / best:.0f} tokens/s)"
            )
    if theirs:
        ratio_med = statistics.median(r[0] for r in theirs) / statistics.median(r[0] for r in ours)
        ratio_best = min(r[1] for r in theirs) / min(r[1] for r in ours)
        print(
            f"ratio ours / transformers.Trainer tokens/s: median {ratio_med:.2f}, best step {ratio_best:.2f}"
        )
    if opts.skip_scaling:
        return
    print("\nscaling, global batch 8 x seq 256 (MBS 4):")
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
            our_step_times(work, data, nproc=nproc, steps=opts.steps, extra=extra, gbs=8)
        )
        base = base or step
        print(
            f"  {name:30s} {step * 1000:8.1f} ms/step  {8 * SEQ / step / nproc:8.0f} tokens/s per process  "
            f"speed-up x{base / step:.2f}  (run {time.perf_counter() - t0:.0f} s)"
        )


if __name__ == "__main__":
    main()
