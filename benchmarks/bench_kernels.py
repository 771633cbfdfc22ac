"""The embedded trainer's kernel choices against their alternatives on this machine (CPU, or CUDA if there).

1. AdamW over the parameters of `bench_train.py`'s model (6M, fp32): torch's fused kernel (what the trainer
   uses) vs `foreach` vs the per-tensor loop; one optimizer step.
2. RMSNorm, forward + backward on [4, 256, 256]: HF's module (what runs without `--use-fused-rmsnorm`) vs
   `torch.nn.functional.rms_norm` (`--use-fused-rmsnorm`), fp32 and bf16.
3. The output layer + cross-entropy, forward + backward, fp32: the full logits path (`F.cross_entropy` on
   `(h @ W.T).float()`) vs the chunked one (`engine/train/cross_entropy.py`), 1024 tokens x 2048 entries
   (bench_train's) and 2048 x 32000.
4. A decoder layer of `bench_train.py`'s model, forward + backward, fp32: eager vs `torch.compile`
   (`--af-torch-compile`); the compilation time is printed apart and not in the step time.
RoPE and SwiGLU have no fused kernel in torch (their flags stay ignored): 4 covers what compiling fuses.

Each pair is timed interleaved (order alternating) over `--repeats` repeats of `--iters` calls after 3
warm-up calls; printed: the median per call of each side, the ratio (> 1: the trainer's choice is faster).

    python benchmarks/bench_kernels.py [--repeats 5] [--iters 20] [--threads N] [--skip-compile]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(fn: Callable[[], object], iters: int, sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


def pair(name: str, mine: Callable, other: Callable, *, repeats: int, iters: int, sync, labels) -> None:
    for fn in (mine, other):
        for _ in range(3):
            fn()
    a, b = [], []
    for r in range(repeats):
        order = [(mine, a), (other, b)] if r % 2 == 0 else [(other, b), (mine, a)]
        for fn, acc in order:
            acc.append(timed(fn, iters, sync))
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"  {name:42s} {labels[0]} {ma * 1e3:8.3f} ms | {labels[1]} {mb * 1e3:8.3f} ms | "
        f"gain {mb / ma:5.2f}x  (per repeat {', '.join(f'{y / x:.2f}' for x, y in zip(a, b))})",
        flush=True,
    )


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--skip-compile", action="store_true")
    a = p.parse_args()
    import torch
    import torch.nn.functional as F
    import transformers

    from ascendfactory.engine.train.cross_entropy import linear_cross_entropy
    from ascendfactory.engine.train.kernels import FusedRMSNorm

    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    print(
        f"device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}, load {os.getloadavg()}"
    )
    kw = dict(repeats=a.repeats, iters=a.iters, sync=sync)
    cfg = transformers.Qwen2Config(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=2048,
        max_position_embeddings=1024,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(dev)

    print("1. AdamW step over the 6M-parameter model (fp32)")
    params = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opts = {
        mode: torch.optim.AdamW(params, lr=1e-4, **{mode: True})
        for mode in ("fused", "foreach")
        if mode != "fused" or dev.type in ("cpu", "cuda")
    }
    loop = torch.optim.AdamW(params, lr=1e-4, foreach=False)
    pair("fused vs foreach", opts["fused"].step, opts["foreach"].step, labels=("fused", "foreach"), **kw)
    pair("fused vs per-tensor loop", opts["fused"].step, loop.step, labels=("fused", "loop"), **kw)

    print("2. RMSNorm forward + backward, [4, 256, 256]")
    for dtype in (torch.float32, torch.bfloat16):
        norm = model.model.layers[0].input_layernorm.to(dtype)
        fused = FusedRMSNorm(norm.weight, norm.variance_epsilon)
        x = torch.randn(4, 256, 256, device=dev, dtype=dtype, requires_grad=True)

        def run(module):
            return lambda: module(x).sum().backward()

        pair(f"F.rms_norm vs HF module ({dtype})", run(fused), run(norm), labels=("fused", "HF"), **kw)
        norm.to(torch.float32)

    print("3. output layer + cross-entropy, forward + backward, fp32")
    for tokens, vocab in ((1024, 2048), (2048, 32000)):
        h = torch.randn(1, tokens, 256, device=dev, requires_grad=True)
        w = (torch.randn(vocab, 256, device=dev) * 0.05).requires_grad_()
        y = torch.randint(0, vocab, (1, tokens), device=dev)

        def full():
            F.cross_entropy((h @ w.t()).float().flatten(0, 1), y.flatten()).backward()

        def chunked():
            linear_cross_entropy(h, w, y).backward()

        pair(f"chunked vs full ({tokens} x {vocab})", chunked, full, labels=("chunked", "full"), **kw)

    if a.skip_compile:
        return 0
    print("4. decoder layer forward + backward, fp32, [4, 256, 256]: compiled vs eager")
    layer = model.model.layers[1]
    x = torch.randn(4, 256, 256, device=dev, requires_grad=True)
    pos = torch.arange(256, device=dev).unsqueeze(0)
    cos_sin = model.model.rotary_emb(x, pos)

    def run_layer(fn):
        def once():
            out = fn(x, attention_mask=None, position_ids=pos, position_embeddings=cos_sin)
            (out[0] if isinstance(out, tuple) else out).sum().backward()

        return once

    compiled = torch.compile(layer)
    t0 = time.perf_counter()
    run_layer(compiled)()
    sync()
    print(f"  compilation (first call, forward + backward): {time.perf_counter() - t0:.1f} s")
    pair("torch.compile vs eager", run_layer(compiled), run_layer(layer), labels=("compiled", "eager"), **kw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
