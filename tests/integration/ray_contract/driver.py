"""A small real Ray driver: data-parallel least squares, one shard per node, verl-style log lines.

Fits y = 3x + 1 by gradient descent; every step sends one shard to a task pinned to each alive node and
averages the gradients. Prints `step:N - actor/loss:L - perf/throughput:T - training/nodes:K`; exits 1
when the tasks did not run on `--nodes` distinct nodes.
"""

import argparse
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=1)
def gradient(shard, w, b, sleep_s):
    time.sleep(sleep_s)
    gw = gb = loss = 0.0
    for x, y in shard:
        err = w * x + b - y
        gw, gb, loss = gw + 2 * err * x, gb + 2 * err, loss + err * err
    n = len(shard)
    return gw / n, gb / n, loss / n, ray.get_runtime_context().get_node_id()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--step-sleep", type=float, default=0.0)
    args = p.parse_args()
    ray.init()
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    on_node = [NodeAffinitySchedulingStrategy(node, soft=False) for node in nodes[: args.nodes]]
    data = [(i / 64, 3 * i / 64 + 1) for i in range(64)]
    shards = [data[i :: args.nodes] for i in range(args.nodes)]
    w = b = 0.0
    seen = set()
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        parts = ray.get(
            [
                gradient.options(scheduling_strategy=where).remote(s, w, b, args.step_sleep)
                for s, where in zip(shards, on_node)
            ]
        )
        seen |= {node for *_, node in parts}
        gw, gb, loss = (sum(p[i] for p in parts) / len(parts) for i in range(3))
        w, b = w - 0.5 * gw, b - 0.5 * gb
        tokens_per_s = len(data) / (time.perf_counter() - t0) / args.nodes
        print(
            f"step:{step} - actor/loss:{loss:.6f} - perf/throughput:{tokens_per_s:.3f} - "
            f"training/nodes:{len(seen)}",
            flush=True,
        )
    print(f"fitted w={w:.3f} b={b:.3f} on {len(seen)} node(s)", flush=True)
    return 0 if len(seen) == args.nodes else 1


if __name__ == "__main__":
    sys.exit(main())
