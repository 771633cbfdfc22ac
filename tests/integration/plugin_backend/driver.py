"""A small real torchrun program: data-parallel least squares over gloo, Lightning-style lines on rank 0,
a `step=N-consumed_samples=M/` directory every `--save-every` steps (written, then renamed complete) with a
`-last` copy of the newest; `--resume DIR` continues from one; `--fail-at N` exits 3 at step N once."""

import argparse
import os
import shutil
import sys
import time

import torch
import torch.distributed as dist


def save(root: str, step: int, samples: int, w: torch.Tensor) -> None:
    name = f"step={step}-consumed_samples={samples}"
    tmp = os.path.join(root, f".{name}.tmp")
    os.makedirs(tmp, exist_ok=True)
    torch.save({"step": step, "w": w.detach().clone()}, os.path.join(tmp, "state.pt"))
    os.replace(tmp, os.path.join(root, name))
    for old in os.listdir(root):
        if old.endswith("-last"):
            shutil.rmtree(os.path.join(root, old))
    shutil.copytree(os.path.join(root, name), os.path.join(root, name + "-last"))


def open_logger(names: list[str]):
    """The framework's csvlog integration: the run its tracker's variables name (the pipeline opened it)."""
    if "csvlog" not in names:
        return None
    import af_csvlog

    return af_csvlog.init_from_env()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-every", type=int, required=True)
    p.add_argument("--save-dir", required=True)
    p.add_argument("--fail-at", type=int, default=0)
    p.add_argument("--marker", required=True)
    p.add_argument("--resume")
    p.add_argument("--logger", action="append", default=[], help="a logger integration: csvlog")
    p.add_argument("--step-sleep", type=float, default=0.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    fail = args.fail_at > 0 and not os.path.exists(args.marker)
    dist.barrier()
    true_w = torch.tensor([3.0, -1.0, 0.5, 2.0])
    w, start = torch.zeros(4), 0
    if args.resume:
        state = torch.load(os.path.join(args.resume, "state.pt"))
        w, start = state["w"], state["step"]
        if rank == 0:
            print(f"resumed from {os.path.basename(args.resume)} at step {start}", flush=True)
    os.makedirs(args.save_dir, exist_ok=True)
    logger = open_logger(args.logger) if rank == 0 else None
    batch = 16
    for step in range(start + 1, args.steps + 1):
        t0 = time.perf_counter()
        g = torch.Generator().manual_seed(step * 100 + rank)
        x = torch.randn(batch, 4, generator=g)
        err = x @ w - x @ true_w
        grad = 2 * x.T @ err / batch
        loss = (err * err).mean()
        dist.all_reduce(grad)
        dist.all_reduce(loss)
        w = w - 0.1 * grad / world
        loss = loss / world
        time.sleep(args.step_sleep)
        if fail and step == args.fail_at:
            if rank == 0:
                open(args.marker, "w").close()
                print(f"step {step}: simulated node failure", flush=True)
            return 3
        if rank == 0:
            dt = time.perf_counter() - t0
            pct = 100 * step // args.steps
            print(
                f"Epoch 0: {pct:3d}%| {step}/{args.steps} [reduced_train_loss={loss.item():.5f}, "
                f"{'train_step_timing in s'}={dt:.6f}, global_step={step}]",
                flush=True,
            )
            if logger is not None:
                logger.log({"reduced_train_loss": loss.item()}, step)
            if step % args.save_every == 0:
                save(args.save_dir, step, step * batch * world, w)
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
