"""Stand-in for MindSpeed-RL's cli/train_grpo.py (../../README.md): same argv, yaml and Ray asks."""

import argparse
import logging
import os
import sys
import time

import ray
import yaml
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy


def parse() -> tuple[dict, list[str]]:
    p = argparse.ArgumentParser()
    p.add_argument("--config-path", required=True)
    p.add_argument("--config-name", required=True)
    args, overrides = p.parse_known_args()
    assert os.path.isabs(args.config_path), args.config_path
    assert not args.config_name.endswith(".yaml"), "Hydra takes the name without .yaml"
    for o in overrides:
        assert "=" in o and o.split("=", 1)[0].startswith("hydra."), f"unexpected override {o}"
    with open(os.path.join(args.config_path, args.config_name + ".yaml")) as f:
        return yaml.safe_load(f), overrides


@ray.remote(num_cpus=0)
def work(i: int) -> tuple[str, float]:
    return ray.get_runtime_context().get_node_id(), float(i)


@ray.remote
def train(config: dict, nodes: int) -> None:
    log = logging.getLogger("grpo_trainer_hybrid")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    mt, actor, rl = config["megatron_training"], config["actor_config"], config["rl_config"]
    iters, every = mt["train_iters"], mt.get("save_interval") or mt["train_iters"]
    save = actor["save"]
    metric = f"{rl['verifier_function'][0]}_rewards/mean"
    for it in range(1, iters + 1):
        t_all = 0.5 + 0.01 * it
        fields = {
            "timing/all": t_all,
            "timing/update": 0.2,
            "timing/rollout": 0.25,
            "actor/pg_loss": 0.5 / it,
            "actor/kl_loss": 0.001 * it,
            "actor/lr": 1e-6,
            metric: min(1.0, 0.1 * it),
            "response_length/mean": 100.0 + it,
            "prompt_length/mean": 50.0,
            "e2e_tps": 1000.0 + it,
            "update_tps": 2000.0 + it,
            "vllm_tps": 3000.0 + it,
        }
        body = " | ".join(f"{k} : {v:e}" if "lr" in k else f"{k} : {v:.4f}" for k, v in fields.items())
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        log.info(f"[{stamp}] iteration: {it} / {iters} | {body} ")
        if it % every == 0 or it == iters:
            path = os.path.join(save, f"iter_{it:07d}", "mp_rank_00")
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "model_optim_rng.pt"), "wb") as f:
                f.write(b"stand-in")
            with open(os.path.join(save, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(it))
            print(f"  successfully saved checkpoint from iteration {it:7d} to {save}", flush=True)
        time.sleep(0.2)


def main() -> int:
    config, _ = parse()
    ray.init()  # MindSpeed-RL: no address, attaches to the cluster `ray start` made (RAY_ADDRESS)
    rl = config["rl_config"]
    npus = rl["actor_resource"]["num_npus"]
    alive = [n for n in ray.nodes() if n["Alive"]]
    per_node = int(alive[0]["Resources"].get("NPU", 0))
    assert per_node >= 1, f"no NPU resource on the nodes: {alive[0]['Resources']}"
    cpus = rl.get("num_cpus_for_placement_group", 8)
    nodes = (npus + per_node - 1) // per_node
    groups = [
        placement_group([{"NPU": 1, "CPU": cpus}] * per_node, strategy="STRICT_PACK") for _ in range(nodes)
    ]
    for pg in groups:
        ray.get(pg.ready(), timeout=60)
    seen = ray.get(
        [
            work.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=b)
            ).remote(b)
            for pg in groups
            for b in range(per_node)
        ]
    )
    print(f"actor workers placed on {len({node for node, _ in seen})} node(s) for {npus} NPUs", flush=True)
    reward = placement_group([{"CPU": rl.get("num_cpus_for_local_task", 1)}] * len(alive), strategy="SPREAD")
    ray.get(reward.ready(), timeout=60)
    ray.get(train.remote(config, len(alive)))
    print("training process successfully!", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
