"""Embedded GRPO trainer figures on CPU (one process for 1 and 2, the quickstart's two for 3).

1. Rollout tokens/s: `engine.rl.rollout.generate` (the HF decoder layers, a static KV cache, our sampler)
   against a plain `model.generate` of transformers (its own cache and sampler) on the same model (same
   weights), the same left-padded batch of prompts, fp32, sampling at temperature 1, every response
   `--new-tokens` long (no stop token, so both produce exactly batch x new-tokens tokens). Goal >= 1x.
2. Update tokens/s: one GRPO optimizer step (`engine.rl.update.Updater`: forward, log-probs, clipped loss
   + KL + entropy statistic, backward, clip, AdamW) against one step of the SFT trainer
   (`engine.train.step.StepRunner` forward/backward + clip + AdamW) on the same token tensor, model and
   micro-batch size. Tokens = batch x sequence length.
3. The share of each phase in an iteration: the quickstart's GRPO (its rendered yaml, two processes,
   `--iterations`) from the `timing/*` keys of MindSpeed-RL's line; needs `outputs/tiny-demo-quickstart-grpo/`
   (run the two quickstart files first) or `--config-dir`.

Both sides of 1 and 2 run in one process with one intra-op thread (what torchrun gives each rank; more
threads than free cores slows both sides by an order of magnitude on a shared machine) and the trainers' CPU
allocator tuning, interleaved in each repeat (order alternating); reported: median over repeats of each
side's tokens/s, the ratio, per-repeat ratios, and the load average (other jobs may share the CPU).

    python benchmarks/bench_grpo.py [--repeats 5] [--threads N] [--skip-phases]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {  # the demo model, and bench_train.py's model
    "demo (215k params)": dict(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=960,
    ),
    "small (6M params)": dict(
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=2048,
    ),
}
PHASES = ("rollout", "rule_reward", "adv", "reference_model", "old_log_p", "update")


def build(size: dict, seed: int = 0):
    """(HF model, stage model with the same weights) in fp32."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from ascendfactory.engine.train.model import build_stage

    cfg = Qwen2Config(**size, max_position_embeddings=512, tie_word_embeddings=False)
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    stage = build_stage(
        Qwen2Config(**cfg.to_dict()), layers=[cfg.num_hidden_layers], pp_rank=0, device=torch.device("cpu")
    )
    stage.load_state_dict(hf.state_dict(), strict=False)
    return hf, stage


def prompts(batch: int, vocab: int, seed: int = 1) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(40, 60))] for _ in range(batch)]


def time_ours(stage, batch: list[list[int]], new: int, vocab: int) -> float:
    import torch

    from ascendfactory.engine.rl.rollout import Sampling, generate

    u = torch.rand(len(batch), new, generator=torch.Generator().manual_seed(0))
    t0 = time.perf_counter()
    out = generate(
        stage,
        batch,
        sampling=Sampling(max_tokens=new, temperature=1.0, top_k=-1),
        uniforms=u,
        stop_ids=(),
        pad_id=0,
        vocab_limit=vocab,
        device=torch.device("cpu"),
    )
    dt = time.perf_counter() - t0
    assert sum(map(len, out.responses)) == len(batch) * new
    return len(batch) * new / dt


def time_hf(hf, batch: list[list[int]], new: int) -> float:
    import torch

    width = max(map(len, batch))
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, p in enumerate(batch):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    t0 = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=0,
            eos_token_id=None,
        )
    dt = time.perf_counter() - t0
    assert out.shape[1] - width == new
    return len(batch) * new / dt


def rollout(size: dict, repeats: int, batch: int, new: int) -> tuple[list[float], list[float]]:
    hf, stage = build(size)
    b = prompts(batch, size["vocab_size"])
    time_ours(stage, b[:4], 4, size["vocab_size"]), time_hf(hf, b[:4], 4)  # warm-up
    ours, theirs = [], []
    for r in range(repeats):
        pair = [
            lambda: ours.append(time_ours(stage, b, new, size["vocab_size"])),
            lambda: theirs.append(time_hf(hf, b, new)),
        ]
        for run in pair if r % 2 == 0 else pair[::-1]:
            run()
    return ours, theirs


def update(
    size: dict, repeats: int, batch: int, new: int, micro: int, steps: int
) -> tuple[list[float], list[float]]:
    """tokens/s of a GRPO optimizer step and of an SFT step on the same tokens (median of `steps` each)."""
    import argparse as ap

    import torch

    from ascendfactory.engine.rl.update import Updater, build_experience
    from ascendfactory.engine.train import step as train_step
    from ascendfactory.engine.train.parallel import ParallelDims, build_mesh, init_distributed
    from ascendfactory.engine.train.schedule import LRSchedule

    env = init_distributed()
    args = ap.Namespace(
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_eps=1e-8,
        clip_grad=1.0,
        micro_batch_size=micro,
        lr=1e-4,
        min_lr=0.0,
        lr_decay_style="constant",
        lr_decay_iters=None,
        lr_warmup_fraction=None,
        lr_warmup_iters=0,
        lr_warmup_init=0.0,
        train_iters=1000,
        bf16=False,
        fp16=False,
    )
    dims = ParallelDims(tp=1, pp=1, dp=1, world_size=1, micro_batch_size=micro, global_batch_size=batch)
    mesh = build_mesh(dims, env.device)
    ps = prompts(batch, size["vocab_size"])
    g = torch.Generator().manual_seed(2)
    rs = [torch.randint(3, size["vocab_size"], (new,), generator=g).tolist() for _ in ps]
    exp = build_experience(ps, rs, pad_id=0, device=env.device)
    exp.advantages = torch.randn(batch, generator=g)
    exp.ref_log_prob = torch.zeros_like(exp.mask) - 5.0
    tokens = exp.tokens
    labels = torch.where(torch.arange(tokens.shape[1]) < exp.starts[:, None], -100, tokens)
    n_tokens = int(tokens.numel())
    rl = dict(epochs=1, entropy_coeff=0.0, clip_ratio=0.2, init_kl_coef=0.01, kl_penalty="low_var_kl")

    def grpo_runner():
        _, model = build(size)
        model.chunked_loss = True  # as both trainers run it: lm_head + loss in chunks
        opt = train_step.build_optimizer(model, args, env.device)
        up = Updater(
            model=model,
            optimizer=opt,
            scheduler=LRSchedule.from_args(args, batch),
            mesh=mesh,
            dp=1,
            args=args,
            rl=rl,
        )
        from ascendfactory.engine.rl.update import UpdateStats

        idx = torch.arange(batch)
        return lambda: up._step(exp, idx, micro, UpdateStats())

    def sft_runner():
        _, model = build(size)
        model.chunked_loss = True  # as both trainers run it: lm_head + loss in chunks
        opt = train_step.build_optimizer(model, args, env.device)
        runner = train_step.StepRunner(
            model, mesh=mesh, num_microbatches=batch // micro, device=env.device, pp=1, pp_rank=0
        )
        params = [p for p in model.parameters()]

        def one():
            opt.zero_grad(set_to_none=True)
            runner.forward_backward(tokens[:, :-1], labels[:, 1:])
            train_step.grad_norm_and_clip(params, mesh=mesh, clip=1.0)
            opt.step()

        return one

    def tps(fn) -> float:
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return n_tokens / statistics.median(times[2:])

    grpo, sft = grpo_runner(), sft_runner()
    ours, theirs = [], []
    for r in range(repeats):
        pair = [lambda: ours.append(tps(grpo)), lambda: theirs.append(tps(sft))]
        for run in pair if r % 2 == 0 else pair[::-1]:
            run()
    return ours, theirs


def phases(config_dir: Path, iterations: int) -> dict[str, float] | None:
    """Median seconds per phase of the quickstart's GRPO (two processes), and of the whole iteration."""
    from ascendfactory.metrics.mindspeed_rl import MindSpeedRLParser

    if not (config_dir / "mindspeed_rl_grpo.yaml").is_file():
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_port",
            "29731",
            "-m",
            "ascendfactory.engine.rl",
            "--config-path",
            str(config_dir),
            "--config-name",
            "mindspeed_rl_grpo",
            "--af-metrics-dir",
            tmp,
            f"megatron_training.train_iters={iterations}",
            f"actor_config.save={tmp}/ckpt",
        ]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode:
            print(proc.stderr[-2000:])
            return None
        parser = MindSpeedRLParser()
        log = next(Path(tmp).glob("grpo_metrics-*.log"))
        rows = [r.metrics for line in log.read_text().splitlines() for r in parser.feed(line)][2:]
    out = {p: statistics.median(r.get(f"timing/{p}", 0.0) for r in rows) for p in PHASES}
    out["all"] = statistics.median(r["timing/all"] for r in rows)
    return out


def report(name: str, ours: list[float], theirs: list[float], what: str) -> None:
    mo, mt = statistics.median(ours), statistics.median(theirs)
    ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(ours, theirs))
    print(f"  {name}: ours {mo:,.0f} tokens/s, {what} {mt:,.0f} tokens/s, ratio {mo / mt:.2f}x")
    print(f"    per repeat: {ratios}")


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (1: what torchrun gives a rank)")
    p.add_argument("--batch", type=int, default=64, help="sequences (prompts x samples) per rollout / step")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=8, help="optimizer steps timed per repeat")
    p.add_argument("--config-dir", type=Path, default=ROOT / "outputs" / "tiny-demo-quickstart-grpo")
    p.add_argument("--iterations", type=int, default=12)
    p.add_argument("--skip-phases", action="store_true")
    a = p.parse_args()
    import torch

    from ascendfactory.engine.train.parallel import tune_cpu_allocator

    torch.set_num_threads(a.threads)
    tune_cpu_allocator()  # as both trainers do on CPU (same process: both sides get it)
    print(f"load average before: {os.getloadavg()}; torch threads {torch.get_num_threads()}")
    print(f"1. rollout: {a.batch} prompts of 40-60 tokens, {a.new_tokens} new tokens each")
    for name, size in SIZES.items():
        report(name, *rollout(size, a.repeats, a.batch, a.new_tokens), "transformers generate")
    print(f"2. update: {a.batch} sequences x ~{50 + a.new_tokens} tokens, micro-batch {a.micro_batch}")
    for name, size in SIZES.items():
        report(name, *update(size, a.repeats, a.batch, a.new_tokens, a.micro_batch, a.steps), "SFT step")
    if not a.skip_phases:
        times = phases(a.config_dir, a.iterations)
        if times is None:
            print(f"3. phases: skipped (no {a.config_dir}/mindspeed_rl_grpo.yaml: run the quickstart first)")
        else:
            total = times.pop("all")
            print(f"3. phases of an iteration (quickstart, 2 processes, median {total:.3f} s per iteration;")
            print("   each phase's time is its slowest rank's, so the rest can come out below 0):")
            rest = total - sum(times.values())
            for phase, sec in [*times.items(), ("other (batching, metrics, logging)", rest)]:
                print(f"  {phase:36s} {sec:7.3f} s  {100 * sec / total:5.1f}%")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
