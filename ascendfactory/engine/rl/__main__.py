"""`torchrun <dist args> -m ascendfactory.engine.rl --config-path DIR --config-name NAME [key=value ...]`.

Reads the MindSpeed-RL yaml `cli/train_grpo.py` reads (Hydra: `--config-path`, `--config-name`, then
`section.key=value` / `+section.key=value` overrides) and runs GRPO on CPU (gloo), GPU or NPU. Two
AscendFactory additions: `--af-metrics-dir DIR` writes the per-iteration lines to
`DIR/grpo_metrics-<YYYYmmdd_HHMMSS>.log` too, `--af-tensorboard-dir DIR` is where `rl_config.use_tensorboard`
writes (default: MindSpeed-RL's `./runs/<date>_<host>`).

Example (two CPU processes):

    torchrun --nproc_per_node 2 -m ascendfactory.engine.rl --config-path ./out --config-name grpo \
        rl_config.n_samples_per_prompt=8 megatron_training.train_iters=40
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

from ascendfactory.errors import AscendFactoryError, ConfigError, Problem


def _yaml_key(p: Problem, source: str) -> Problem:
    """A problem the shared Megatron pieces name by flag (`--load`), named by the yaml key instead."""
    if not p.key.startswith("--"):
        return p
    keys = ", ".join("actor_config." + k.strip().lstrip("-").replace("-", "_") for k in p.key.split(","))
    return Problem(key=keys, message=p.message, fix=p.fix, source=source or p.source)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun <dist args> -m ascendfactory.engine.rl",
        description="Embedded GRPO trainer reading MindSpeed-RL's yaml (cli/train_grpo.py).",
    )
    p.add_argument("--config-path", required=True, help="folder of the yaml (and its model/ entries)")
    p.add_argument("--config-name", required=True, help="yaml file name, without .yaml")
    p.add_argument("--af-metrics-dir", help="also write grpo_metrics-<time>.log here (first rank)")
    p.add_argument("--af-tensorboard-dir", help="TensorBoard folder for rl_config.use_tensorboard")
    p.add_argument(
        "overrides", nargs="*", help="Hydra-style overrides: section.key=value, +section.key=value"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    trainer, source, finished = None, "", False
    try:
        from ascendfactory.engine.rl.config import load_yaml, read_trainer_yaml

        raw, source = load_yaml(args.config_path, args.config_name, args.overrides)
        cfg = read_trainer_yaml(raw, source)
        from ascendfactory.engine.rl.trainer import GRPOTrainer

        trainer = GRPOTrainer(cfg, metrics_dir=args.af_metrics_dir, tensorboard_dir=args.af_tensorboard_dir)
        trainer.train()
        finished = True
    except AscendFactoryError as e:
        if os.environ.get("AF_DEBUG") == "1":
            traceback.print_exc()
        if isinstance(e, ConfigError):
            e = type(e)([_yaml_key(p, source) for p in e.problems])
        print(f"error (rank {os.environ.get('RANK', '0')}): {e}", file=sys.stderr, flush=True)
        return e.exit_code
    finally:
        if trainer is not None:
            trainer.close(finished=finished)
    if os.environ.get("RANK", "0") == "0":
        print("training process successfully!", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
