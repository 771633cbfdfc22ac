"""The embedded trainer and the GRPO sampler on one GPU, against transformers in the same run.

    python benchmarks/bench_gpu.py run --out DIR [--parts env,checks,train,rollout,memory]   # on the GPU host
    python benchmarks/bench_gpu.py run --small --out DIR   # the same parts on CPU, tiny shapes: a test of
                                                           # this script (tests/integration/test_bench_gpu.py)

`benchmarks/gpu/run_all.sh` runs it on the device machine (torch 2.11 + CUDA 13, transformers 5.17, no
pydantic: that script unpacks carried wheels first and puts them on PYTHONPATH), one part per call, each
under its own timeout, beside the README quickstarts.

Parts (each child process under its own timeout; a part that fails or runs out of time is reported and the
rest goes on; everything is written to DIR/bench_gpu.json and printed):
0. env: device, versions, a bf16 matmul's TFLOP/s.
1. checks on the device: torch's varlen flash attention (packed rows) against SDPA with the block mask;
   the chunked output layer + cross-entropy against the full logits path, bf16; the fused RMSNorm.
2. training throughput: for the Qwen2-0.5B and Qwen2.5-1.5B shapes (bf16, seq 2048, MBS 8, random tokens
   from one Megatron-format dataset): `python -m ascendfactory.engine.train` (ours: bf16 weights, fp32
   masters, chunked cross-entropy, fused AdamW, SDPA) and `transformers.Trainer` (bf16 autocast over fp32
   weights, SDPA, fused AdamW: its `bf16=True`) with the same optimizer settings, no gradient accumulation,
   clipping at 1.0, interleaved (ours, theirs; then the other order if time is left). Step time: ours the
   log line's elapsed time per iteration, theirs on_step_begin -> on_step_end with CUDA synchronised; the
   first WARMUP steps dropped, median of the rest. Printed: tokens/s, MFU = 6 N tokens/s / peak with
   N = non-embedding parameters + the output layer (a tied embedding counted once), the peak (989 TFLOP/s
   dense bf16 for H100/H200), the ratio ours/theirs, and each side's peak allocated memory (ours: its
   Megatron memory line; theirs: torch.cuda.max_memory_allocated). A side that runs out of memory is
   reported as such. Ours once more with --use-fused-rmsnorm and with --af-torch-compile on the 0.5B shape.
   (`--small`: both sides fp32 on the CPU.)
3. GRPO rollout: `engine.rl.rollout.generate` (preallocated KV cache, device-side loop) against a plain
   `model.generate` of transformers (its own cache and sampler) on the same model and weights (bf16), the
   same left-padded prompts, sampling at temperature 1, no stop token (every response max_tokens long):
   tokens/s of both and the ratio, for the 0.5B shape and the quickstart's demo shape.
4. memory: the pre-launch estimate against the measured peak, through the CLI as a user runs it:
   `ascendfactory-cli train cfgs/quickstart.yaml` on one device (`--accelerator=auto`) with the Qwen2-0.5B
   shape (random weights, the demo tokenizer), bf16, seq 2048, MBS 8, 2 iterations; the estimate is the plan's
   (`train --dry-run` of the same overrides), the measured figure the run's Megatron memory line (`max
   allocated`: torch.cuda.max_memory_allocated on CUDA).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "A100": 312e12, "A800": 312e12}
SHAPES = {
    "qwen2-0.5b": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "demo": dict(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=960,
        tie_word_embeddings=True,
    ),
}
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    tie_word_embeddings=True,
)
WARMUP = 3


# ------------------------------------------------------------------------------------------------ helpers
def log(msg: str) -> None:
    print(f"[bench_gpu {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def child(args: list[str], *, timeout: float, env: dict[str, str]) -> tuple[int, str]:
    """Run `python <args>`; (exit code, stdout + stderr); 124 on timeout."""
    try:
        p = subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            timeout=max(5.0, timeout),
            env=env,
            cwd=ROOT,
        )
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out


def marked(text: str, tag: str) -> dict | None:
    """The JSON a child printed after `tag`."""
    for line in reversed(text.splitlines()):
        if line.startswith(tag):
            return json.loads(line[len(tag) :])
    return None


def model_params(cfg_kw: dict) -> tuple[int, int]:
    """(all parameters, N for 6N: non-embedding + the output layer, a tied embedding counted once)."""
    h, f, layers = cfg_kw["hidden_size"], cfg_kw["intermediate_size"], cfg_kw["num_hidden_layers"]
    heads, kv, vocab = cfg_kw["num_attention_heads"], cfg_kw["num_key_value_heads"], cfg_kw["vocab_size"]
    d = h // heads
    attn = h * heads * d + 2 * h * kv * d + (heads * d + 2 * kv * d) + heads * d * h  # q,k,v (+bias), o
    layer = attn + 3 * h * f + 2 * h
    emb = vocab * h
    tied = cfg_kw.get("tie_word_embeddings", False)
    total = layers * layer + h + emb + (0 if tied else emb)
    return total, layers * layer + h + emb


# ------------------------------------------------------------------------------------------------ parts
def part_env(a: argparse.Namespace) -> dict:
    import torch
    import transformers

    info = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "cpus": os.cpu_count(),
    }
    if torch.cuda.is_available():
        n = 8192
        x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        times = []
        for _ in range(6):
            t0 = time.perf_counter()
            x @ x
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        info["matmul_tflops"] = 2 * n**3 / min(times[1:]) / 1e12
        info["memory_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    peak = next((v for k, v in PEAK_BF16.items() if k in info["device"]), None)
    info["peak_flops"] = peak
    return info


def part_checks(a: argparse.Namespace) -> dict:
    """Device numerics of the new paths (the CPU tests cover the same maths on the CPU)."""
    import torch

    from ascendfactory.engine.train import packed
    from ascendfactory.engine.train.cross_entropy import linear_cross_entropy
    from ascendfactory.engine.train.kernels import FusedRMSNorm

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out: dict = {"device": str(dev)}
    g = torch.Generator(device=dev).manual_seed(0)
    # chunked cross-entropy against the full logits, bf16
    h = torch.randn(2, 512, 256, device=dev, generator=g).bfloat16().requires_grad_()
    w = (torch.randn(4096, 256, device=dev, generator=g) * 0.05).bfloat16().requires_grad_()
    y = torch.randint(0, 4096, (2, 512), device=dev, generator=g)
    full = torch.nn.functional.cross_entropy((h @ w.t()).float().flatten(0, 1), y.flatten())
    gh, gw = torch.autograd.grad(full, [h, w])
    mine = linear_cross_entropy(h, w, y, chunk=128)
    mh, mw = torch.autograd.grad(mine, [h, w])
    out["chunked_ce"] = {
        "loss_rel_diff": float(abs(mine.detach() - full.detach()) / full.detach()),
        "grad_h_max_rel": float((mh.float() - gh.float()).abs().max() / gh.float().abs().max()),
        "grad_w_max_rel": float((mw.float() - gw.float()).abs().max() / gw.float().abs().max()),
    }
    # fused RMSNorm against the formula in fp32
    x = torch.randn(4, 64, 256, device=dev, generator=g).bfloat16()
    weight = torch.nn.Parameter(torch.rand(256, device=dev, generator=g).bfloat16() + 0.5)
    ref = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    out["fused_rmsnorm_max_rel"] = float(
        (FusedRMSNorm(weight, 1e-6)(x).float() - ref).abs().max() / ref.abs().max()
    )
    # packed attention: varlen flash (CUDA) against SDPA with the block mask
    if not packed.varlen_available(dev, torch.bfloat16, 0.0):
        out["varlen"] = "not available here (needs CUDA and torch.nn.attention.varlen)"
        return out

    class _Attn(torch.nn.Module):
        num_key_value_groups, is_causal, training = 7, True, False

    q = torch.randn(2, 14, 1024, 64, device=dev, generator=g).bfloat16()
    k, v = (torch.randn(2, 2, 1024, 64, device=dev, generator=g).bfloat16() for _ in range(2))
    docs = torch.zeros(2, 1024, dtype=torch.long, device=dev)
    docs[0, 300:] = 1
    docs[0, 700:] = 2
    docs[1, 512:] = 1
    masked = packed.Packing(torch.zeros_like(docs), docs).layer_kwargs()
    flat = packed.Packing(torch.zeros_like(docs), docs, varlen=True).layer_kwargs()
    want, _ = packed.attention_forward(_Attn(), q, k, v, masked.pop("attention_mask"), scaling=0.125)
    got, _ = packed.attention_forward(_Attn(), q, k, v, flat.pop("attention_mask"), scaling=0.125, **flat)
    out["varlen_vs_mask_max_abs"] = float((got.float() - want.float()).abs().max())
    return out


def write_model(folder: Path, shape: dict) -> None:
    from transformers import Qwen2Config

    cfg = Qwen2Config(**shape, max_position_embeddings=4096, rms_norm_eps=1e-6, attention_dropout=0.0)
    cfg.save_pretrained(folder)


def write_data(prefix: Path, *, vocab: int, tokens: int) -> str:
    import numpy as np

    from ascendfactory.engine.data.indexed import IndexedDatasetBuilder

    rng = np.random.default_rng(0)
    builder = IndexedDatasetBuilder(str(prefix), dtype=np.int32 if vocab > 65500 else np.uint16)
    while tokens > 0:
        n = int(rng.integers(200, 4000))
        builder.add_document(rng.integers(1, vocab, size=n))
        tokens -= n
    builder.finalize()
    return str(prefix)


def run_ours(model: Path, data: str, seq: int, mbs: int, steps: int, extra: list[str], env, timeout) -> dict:
    from ascendfactory.engine.train.logline import parse_log_line

    flags = [
        *("-m", "ascendfactory.engine.train", "--tokenizer-name-or-path", str(model), "--data-path", data),
        *("--seq-length", str(seq), "--micro-batch-size", str(mbs), "--global-batch-size", str(mbs)),
        *("--train-iters", str(steps), "--lr", "1e-4", "--min-lr", "1e-4", "--lr-decay-style", "constant"),
        *("--weight-decay", "0.0", "--clip-grad", "1.0", "--adam-beta1", "0.9", "--adam-beta2", "0.95"),
        *("--adam-eps", "1e-8", "--seed", "1234", "--split", "100,0,0", "--eval-iters", "0"),
        *("--log-interval", "1", "--log-throughput", "--no-shuffle"),
        *extra,
    ]
    rc, text = child(flags, timeout=timeout, env=env)
    res: dict = {"rc": rc, "flags": extra}
    if rc:
        res["oom"] = "out of memory" in text.lower()
        res["tail"] = text.splitlines()[-8:]
        return res
    times, losses = [], []
    for line in text.splitlines():
        if "elapsed time per iteration (ms):" in line:
            f = parse_log_line(line)
            times.append(float(f["elapsed time per iteration (ms)"]) / 1000)
            losses.append(float(f.get("lm loss", "nan")))
        elif "max allocated:" in line and "memory (MB)" in line:
            res["max_allocated_mb"] = float(line.split("max allocated:")[1].split("|")[0])
    res["step_s"] = statistics.median(times[WARMUP:]) if len(times) > WARMUP else None
    res["losses"] = [losses[0], losses[-1]] if losses else None
    return res


HF_CHILD = r"""
import json, sys, time, torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments, TrainerCallback
from ascendfactory.engine.train.dataset import PretrainSamples
model_dir, data, seq, mbs, steps, out_dir = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6]
cuda = torch.cuda.is_available()
samples = PretrainSamples(data, seq_length=seq, split="100,0,0", seed=1234, num_samples=steps * mbs,
                          shuffle=False)
class DS(torch.utils.data.Dataset):
    def __len__(self): return steps * mbs
    def __getitem__(self, k):
        t, _ = samples[k]
        t = torch.from_numpy(t)
        return {"input_ids": t, "labels": t}
times = []
class Clock(TrainerCallback):
    def on_step_begin(self, *a, **k):
        if cuda: torch.cuda.synchronize()
        self.t = time.perf_counter()
    def on_step_end(self, *a, **k):
        if cuda: torch.cuda.synchronize()
        times.append(time.perf_counter() - self.t)
cfg = AutoConfig.from_pretrained(model_dir)
torch.manual_seed(1234)
model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=mbs, gradient_accumulation_steps=1,
    max_steps=steps, learning_rate=1e-4, lr_scheduler_type="constant", weight_decay=0.0, adam_beta1=0.9,
    adam_beta2=0.95, adam_epsilon=1e-8, max_grad_norm=1.0, logging_steps=1000, save_strategy="no",
    report_to=[], bf16=cuda, use_cpu=not cuda, dataloader_num_workers=0, disable_tqdm=True,
    optim="adamw_torch_fused")
if cuda: torch.cuda.reset_peak_memory_stats()
Trainer(model=model, args=args, train_dataset=DS(), callbacks=[Clock()]).train()
peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
print("HFRESULT " + json.dumps({"times": times, "max_allocated_mb": peak}))
"""


def run_hf(model: Path, data: str, seq: int, mbs: int, steps: int, work: Path, env, timeout) -> dict:
    rc, text = child(
        ["-c", HF_CHILD, str(model), data, str(seq), str(mbs), str(steps), str(work / "hf_out")],
        timeout=timeout,
        env=env,
    )
    res: dict = {"rc": rc}
    got = marked(text, "HFRESULT ")
    if rc or got is None:
        res["oom"] = "out of memory" in text.lower()
        res["tail"] = text.splitlines()[-8:]
        return res
    res["step_s"] = statistics.median(got["times"][WARMUP:]) if len(got["times"]) > WARMUP else None
    res["max_allocated_mb"] = got["max_allocated_mb"]
    return res


def train_setup(a: argparse.Namespace) -> dict:
    """The models (config.json only: random initialisation on both sides) and one dataset per shape."""
    shapes = {"tiny": TINY} if a.small else {k: SHAPES[k] for k in ("qwen2-0.5b", "qwen2.5-1.5b")}
    seq, mbs, steps = (64, 2, 8) if a.small else (2048, 8, 12)
    work = Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    results: dict = {
        "seq": seq,
        "mbs": mbs,
        "steps": steps,
        "warmup_dropped": WARMUP,
        "shapes": {},
        "work": work,
    }
    for name, shape in shapes.items():
        write_model(work / name, shape)
        data = write_data(
            work / f"{name}_text_document", vocab=shape["vocab_size"], tokens=(steps + 2) * mbs * (seq + 1)
        )
        total, n6 = model_params(shape)
        results["shapes"][name] = {"params": total, "N": n6, "ours": [], "hf": [], "data": data}
    return results


def train_run(a: argparse.Namespace, results: dict, name: str, who: str, env: dict, deadline: float) -> None:
    """One run of `who` ("ours", "hf", or a list of our flags: a variant) on shape `name`, if time is left."""
    row, work = results["shapes"][name], results["work"]
    seq, mbs, steps = results["seq"], results["mbs"], results["steps"]
    left = deadline - time.time()
    label = who if isinstance(who, str) else "ours " + " ".join(who)
    if left < 30 and not a.small:
        row.setdefault("skipped", []).append(f"{label}: {left:.0f} s left")
        return
    t0 = time.time()
    if who == "hf":
        r = run_hf(work / name, row["data"], seq, mbs, steps, work, env, min(left, 300))
    else:
        flags = ["--bf16"] if who == "ours" else list(who)
        if a.small:  # on the CPU both sides run fp32 (transformers.Trainer's bf16 needs an accelerator)
            flags = [f for f in flags if f != "--bf16"]
        r = run_ours(work / name, row["data"], seq, mbs, steps, flags, env, min(left, 300))
    r["wall_s"] = round(time.time() - t0, 1)
    row.setdefault(who if who in ("ours", "hf") else "variants", []).append(r)
    log(f"train {name} {label}: {json.dumps({k: v for k, v in r.items() if k != 'tail'})}")


def summarize_train(row: dict, tokens: int, peak: float | None) -> None:
    for who in ("ours", "hf"):
        steps = [r["step_s"] for r in row[who] if r.get("step_s")]
        if steps:
            s = statistics.median(steps)
            row[f"{who}_tokens_per_s"] = tokens / s
            row[f"{who}_mfu"] = 6 * row["N"] * tokens / s / peak if peak else None
            row[f"{who}_max_allocated_gib"] = max((r.get("max_allocated_mb") or 0) for r in row[who]) / 1024
    if row.get("ours_tokens_per_s") and row.get("hf_tokens_per_s"):
        row["ratio"] = row["ours_tokens_per_s"] / row["hf_tokens_per_s"]


ROLLOUT_CHILD = r"""
import json, statistics, sys, time, torch
from transformers import AutoConfig, AutoModelForCausalLM
from ascendfactory.engine.train.model import build_stage
from ascendfactory.engine.train.mixed_precision import cast_params
from ascendfactory.engine.rl.rollout import Sampling, StaticKVCache, generate
model_dir, batch, new, repeats = sys.argv[1], *map(int, sys.argv[2:5])
cuda = torch.cuda.is_available()
dev = torch.device("cuda" if cuda else "cpu")
dtype = torch.bfloat16 if cuda else torch.float32
cfg = AutoConfig.from_pretrained(model_dir)
torch.manual_seed(0)
hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype).to(dev).eval()
stage = build_stage(AutoConfig.from_pretrained(model_dir), layers=[cfg.num_hidden_layers], pp_rank=0,
                    device=dev)
result = stage.load_state_dict(hf.state_dict(), strict=False)
assert not [k for k in result.missing_keys if "rotary" not in k and "lm_head" not in k], result.missing_keys
cast_params(stage, dtype)
stage.eval()
g = torch.Generator().manual_seed(1)
lens = torch.randint(40, 61, (batch,), generator=g).tolist()
prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
width = max(lens)
ids = torch.zeros(batch, width, dtype=torch.long); mask = torch.zeros(batch, width, dtype=torch.long)
for i, p in enumerate(prompts):
    ids[i, width - len(p):] = torch.tensor(p); mask[i, width - len(p):] = 1
ids, mask = ids.to(dev), mask.to(dev)
u = torch.rand(batch, new, generator=g)
cache = StaticKVCache()
def ours():
    out = generate(stage, prompts, sampling=Sampling(max_tokens=new, temperature=1.0), uniforms=u,
                   stop_ids=(-1,), pad_id=0, vocab_limit=cfg.vocab_size, device=dev, cache=cache)
    return sum(len(r) for r in out.responses)
def theirs():
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                          do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0,
                          eos_token_id=None)
    return int((out.shape[1] - width) * batch)
def timed(fn):
    if cuda: torch.cuda.synchronize()
    t0 = time.perf_counter(); n = fn()
    if cuda: torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)
ours(); theirs()
a, b = [], []
for r in range(repeats):
    for fn, acc in ([(ours, a), (theirs, b)] if r % 2 == 0 else [(theirs, b), (ours, a)]):
        acc.append(timed(fn))
print("ROLLOUT " + json.dumps({"ours": a, "hf": b}))
"""


def part_rollout(a: argparse.Namespace, env: dict, deadline: float) -> dict:
    shapes = {"tiny": TINY} if a.small else {k: SHAPES[k] for k in ("qwen2-0.5b", "demo")}
    batch, new, repeats = (4, 8, 2) if a.small else (64, 128, 3)
    work = Path(tempfile.mkdtemp(prefix="bench_gpu_rollout_"))
    out: dict = {"batch": batch, "new_tokens": new, "repeats": repeats, "shapes": {}}
    for name, shape in shapes.items():
        left = deadline - time.time()
        if left < 30 and not a.small:
            out["shapes"][name] = {"skipped": f"{left:.0f} s left"}
            continue
        write_model(work / name, shape)
        rc, text = child(
            ["-c", ROLLOUT_CHILD, str(work / name), str(batch), str(new), str(repeats)],
            timeout=min(left, 240),
            env=env,
        )
        got = marked(text, "ROLLOUT ")
        if rc or got is None:
            out["shapes"][name] = {"rc": rc, "tail": text.splitlines()[-8:]}
        else:
            row = {k: statistics.median(v) for k, v in got.items()}
            row["ratio"] = row["ours"] / row["hf"]
            out["shapes"][name] = {"tokens_per_s": row, "per_repeat": got}
        log(f"rollout {name}: {json.dumps(out['shapes'][name])[:400]}")
    return out


ESTIMATE_CHILD = r"""
import json, sys
from ascendfactory.backends.planner import make_plan
from ascendfactory.cli._experiment_args import load_from_args
plan = make_plan(load_from_args(sys.argv[1:], collect=True), dry_run=True)
launch = plan.run.launch
found = {"stages": plan.memory["stages"], "device_kind": plan.memory.get("device_kind"),
         "argv": dict(launch.flags) if launch else None}
print("ESTIMATE " + json.dumps(found, default=str))
"""
MEM_LINE = re.compile(
    r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \(MB\) \| allocated: ([\d.]+) \| "
    r"max allocated: ([\d.]+)"
)


def part_memory(a: argparse.Namespace, env: dict, deadline: float) -> dict:
    """The plan's estimate and the measured `max allocated` of one CLI run (rank 0, after its iterations)."""
    shape = SHAPES["demo"] if a.small else SHAPES["qwen2-0.5b"]  # demo: the demo tokenizer's vocabulary
    seq, mbs = (64, 2) if a.small else (2048, 8)
    work = Path(tempfile.mkdtemp(prefix="bench_gpu_memory_"))
    model = work / "model"
    write_model(model, shape)
    demo = ROOT / "demo_assets" / "tiny-qwen2"  # the quickstart's tokenizer (ids < either vocabulary)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (demo / name).exists():
            shutil.copy(demo / name, model / name)
    t = "--backend_config.training."
    args = [
        str(ROOT / "cfgs" / "quickstart.yaml"),
        f"--af_output_dir={work / 'run'}",
        "--env.NPUS_PER_NODE=1",
        "--env.MASTER_PORT=29541",
        f"--accelerator={'cpu' if a.small else 'auto'}",
        "--ckpt_load_type=0",
        "--train_auto_resume=false",
        "--convert_mg2hf_at_last=false",
        *(f"{t}{k}={v}" for k, v in (("tokenizer-name-or-path", model), ("micro-batch-size", mbs),
                                     ("global-batch-size", mbs), ("seq-length", seq), ("train-iters", 2),
                                     ("log-interval", 1), ("save-interval", 1000), ("eval-iters", 0),
                                     ("eval-interval", 1000), ("bf16", "true"))),
    ]  # fmt: skip
    out: dict = {"shape": "demo" if a.small else "qwen2-0.5b", "seq": seq, "mbs": mbs, "precision": "bf16"}
    rc, text = child(["-c", ESTIMATE_CHILD, *args], timeout=min(60.0, deadline - time.time()), env=env)
    got = marked(text, "ESTIMATE ")
    if rc or got is None:
        out["estimate_error"] = {"rc": rc, "tail": text.splitlines()[-8:]}
        return out
    stage = got["stages"][0]
    out["estimate"] = stage
    out["device_kind"] = got["device_kind"]
    out["argv"] = got["argv"]
    rc, text = child(["-m", "ascendfactory.cli.app", "train", *args], timeout=deadline - time.time(), env=env)
    out["rc"] = rc
    peaks = {}
    for log_file in sorted((work / "run" / "logs").glob("*")) if (work / "run" / "logs").is_dir() else []:
        for m in MEM_LINE.finditer(log_file.read_text(errors="replace")):
            peaks[int(m.group(1))] = float(m.group(4)) * 2**20
    if 0 not in peaks:
        out["tail"] = text.splitlines()[-12:]
        return out
    est = float(stage["total"])
    out["measured_bytes"] = peaks[0]
    out["estimate_bytes"] = est
    out["error"] = (est - peaks[0]) / peaks[0]
    return out


def report(res: dict) -> list[str]:
    lines = []
    env = res.get("env")
    if env:
        lines.append(
            f"device {env.get('device')} ({env.get('memory_gib', 0):.0f} GiB), torch {env.get('torch')} "
            f"CUDA {env.get('cuda')}, transformers {env.get('transformers')}, matmul "
            f"{env.get('matmul_tflops', 0):.0f} TFLOP/s, MFU peak {env.get('peak_flops')}"
        )
    if "checks" in res:
        lines.append(f"checks: {json.dumps(res['checks'])}")
    train = res.get("train", {})
    for name, row in train.get("shapes", {}).items():

        def fmt(who: str) -> str:
            tps = row.get(f"{who}_tokens_per_s")
            mfu = row.get(f"{who}_mfu")
            mem = row.get(f"{who}_max_allocated_gib")
            runs = row.get(who, [])
            if not tps:
                why = (
                    "out of memory"
                    if any(r.get("oom") for r in runs)
                    else f"rc {[r.get('rc') for r in runs]}"
                )
                return f"{who}: no figure ({why})"
            return (
                f"{who}: {tps:,.0f} tokens/s"
                + (f", MFU {100 * mfu:.1f}%" if mfu else "")
                + f", peak {mem:.2f} GiB"
            )

        lines.append(
            f"train {name} (N = {row['N'] / 1e6:.0f}M for 6N, bf16, seq {train['seq']}, MBS {train['mbs']}): "
            f"{fmt('ours')} | {fmt('hf')} (transformers.Trainer)"
            + (f" | ratio {row['ratio']:.2f}x" if row.get("ratio") else "")
        )
        for r in row.get("variants", []):
            s = r.get("step_s")
            tokens = train["seq"] * train["mbs"]
            lines.append(
                f"    ours {' '.join(r['flags'])}: "
                + (f"{tokens / s:,.0f} tokens/s" if s else f"rc {r.get('rc')}")
            )
    for name, row in res.get("rollout", {}).get("shapes", {}).items():
        t = row.get("tokens_per_s")
        lines.append(
            f"rollout {name}: "
            + (
                f"ours {t['ours']:,.0f} tokens/s, transformers generate {t['hf']:,.0f} tokens/s, ratio "
                f"{t['ratio']:.2f}x"
                if t
                else json.dumps(row)[:300]
            )
        )
    mem = res.get("memory")
    if mem:
        if "error" in mem:
            lines.append(
                f"memory {mem['shape']} bf16 seq {mem['seq']} MBS {mem['mbs']} ({mem.get('device_kind')}): "
                f"measured max allocated {mem['measured_bytes'] / 2**20:,.1f} MiB, estimate "
                f"{mem['estimate_bytes'] / 2**20:,.1f} MiB ({100 * mem['error']:+.1f}%)"
            )
        else:
            lines.append(f"memory: no figure ({json.dumps(mem, default=str)[:300]})")
    return lines


def device_peak() -> float | None:
    """The dense bf16 peak of device 0 by its name (None on the CPU or an unknown device)."""
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def cmd_run(a: argparse.Namespace) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + a.budget
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
    if a.small:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU rehearsal stays on the CPU
    res: dict = {"small": a.small, "budget_s": a.budget}
    parts = a.parts.split(",")

    def save() -> None:  # after every run: a part killed by its timeout leaves what it measured
        if "train" in res:
            for row in res["train"]["shapes"].values():
                summarize_train(row, res["train"]["seq"] * res["train"]["mbs"], device_peak())
        res["text"] = report(res)
        (out / a.json).write_text(json.dumps(res, indent=1, default=str))

    if "env" in parts:
        res["env"] = part_env(a)
        log(f"env: {res['env']}")
        save()
    if "checks" in parts:
        try:
            res["checks"] = part_checks(a)
        except Exception as e:  # noqa: BLE001  (a failed check is reported; the other parts still run)
            res["checks"] = {"error": f"{type(e).__name__}: {e}"}
        log(f"checks: {res['checks']}")
        save()
    if "train" in parts:  # each shape once (ours, then theirs), the variants, then the other order
        train = res["train"] = train_setup(a)
        shapes = list(train["shapes"])
        for name in shapes:
            for who in ("ours", "hf"):
                train_run(a, train, name, who, env, deadline)
                save()
        variants = {"fused-rmsnorm": "--use-fused-rmsnorm", "compile": "--af-torch-compile"}
        for v in filter(None, a.variants.split(",")):
            train_run(a, train, shapes[0], ["--bf16", variants[v]], env, deadline)
            save()
        for name in shapes:
            for who in ("hf", "ours"):
                train_run(a, train, name, who, env, deadline)
                save()
    if "rollout" in parts:
        res["rollout"] = part_rollout(a, env, deadline)
        save()
    if "memory" in parts:
        res["memory"] = part_memory(a, env, deadline)
        log(f"memory: {json.dumps(res['memory'], default=str)[:600]}")
        save()
    save()
    print("\n".join(res["text"]), flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure (on the GPU host; --small: the CPU rehearsal)")
    r.add_argument("--out", required=True)
    r.add_argument("--json", default="bench_gpu.json", help="the result file's name in --out")
    r.add_argument("--small", action="store_true", help="tiny shapes on the CPU: a test of this script")
    r.add_argument(
        "--budget", type=float, default=540.0, help="seconds for the parts (each run skips when short)"
    )
    r.add_argument("--parts", default="env,checks,train,rollout,memory")
    r.add_argument(
        "--variants",
        default="fused-rmsnorm,compile",
        help="our extra runs on the first shape after the pairs: fused-rmsnorm, compile (comma-separated)",
    )
    a = p.parse_args()
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())
