"""A small real RL driver on Ray: group-normalised policy gradient (GRPO's advantage, no critic) on a
4-armed bandit. Each step samples `--group-size` actions per group in Ray tasks (one group per node),
normalises each group's rewards to advantages, and moves the policy's logits along them; it prints
OpenRLHF-style lines, saves `global_stepN/state.json` every `--save-every` steps with a `latest` file
naming it, and `--resume` continues from `latest`. `--logger csvlog` reports to the csvlog tracker's run.
"""

import argparse
import json
import math
import os
import random
import sys
import time

import ray

MEANS = (0.1, 0.3, 0.9, 0.5)  # each arm's reward probability: arm 2 is the one to learn


@ray.remote(num_cpus=1)
def rollout(logits, n, seed):
    rng = random.Random(seed)
    z = max(logits)
    weights = [math.exp(v - z) for v in logits]
    total = sum(weights)
    probs = [w / total for w in weights]
    actions = rng.choices(range(len(logits)), weights=probs, k=n)
    rewards = [1.0 if rng.random() < MEANS[a] else 0.0 for a in actions]
    return actions, rewards, probs


def save(root, step, logits):
    tag = f"global_step{step}"
    os.makedirs(os.path.join(root, tag), exist_ok=True)
    with open(os.path.join(root, tag, "state.json"), "w") as f:
        json.dump({"step": step, "logits": logits}, f)
    with open(os.path.join(root, "latest"), "w") as f:
        f.write(tag)


def open_logger(names):
    if "csvlog" not in names:
        return None
    import af_csvlog

    return af_csvlog.init_from_env()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--group-size", type=int, default=16)
    p.add_argument("--save-every", type=int, default=2)
    p.add_argument("--save-dir", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--logger", action="append", default=[])
    args = p.parse_args()
    ray.init()
    logits, start = [0.0] * len(MEANS), 0
    latest = os.path.join(args.save_dir, "latest")
    if args.resume and os.path.isfile(latest):
        with open(os.path.join(args.save_dir, open(latest).read().strip(), "state.json")) as f:
            state = json.load(f)
        logits, start = state["logits"], state["step"]
        print(f"resumed from global_step{start}", flush=True)
    logger = open_logger(args.logger)
    for step in range(start + 1, args.steps + 1):
        t0 = time.perf_counter()
        groups = ray.get(
            [rollout.remote(logits, args.group_size, step * 1000 + g) for g in range(args.nodes)]
        )
        grad = [0.0] * len(logits)
        loss = reward_sum = 0.0
        n = 0
        for actions, rewards, probs in groups:
            mean = sum(rewards) / len(rewards)
            std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)) or 1.0
            for a, r in zip(actions, rewards):
                adv = (r - mean) / std
                loss -= adv * math.log(probs[a])
                for k in range(len(logits)):
                    grad[k] += adv * ((1.0 if k == a else 0.0) - probs[k])
                reward_sum += r
                n += 1
        logits = [v + 0.5 * g / n for v, g in zip(logits, grad)]
        metrics = {
            "policy_loss": loss / n,
            "reward": reward_sum / n,
            "response_length": 1.0,
            "samples_per_s": n / (time.perf_counter() - t0),
        }
        print(
            f"Train step [{step}/{args.steps}] | " + " | ".join(f"{k}={v:.6f}" for k, v in metrics.items()),
            flush=True,
        )
        if logger is not None:
            logger.log(metrics, step)
        if step % args.save_every == 0:
            save(args.save_dir, step, logits)
    best = max(range(len(logits)), key=lambda k: logits[k])
    print(f"policy prefers arm {best}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
