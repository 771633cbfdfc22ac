"""Our `train` on the llamafactory backend against bare `llamafactory-cli train` on the same generated yaml.

Interleaved rounds on the demo model (LoRA SFT, no merge), each a fresh output directory:

    ours   ascendfactory-cli train exp.yaml            (check + train + plot, and the runner around them)
    bare   llamafactory-cli train llamafactory_train.yaml   (the yaml our plan wrote, same environment
           variables: the environment's bin on PATH, OMP_NUM_THREADS)

Prints the medians, our overhead over bare excluding the `check` step (LLaMA-Factory's own validation,
which we add before training; reported on its own line), goal < 5% of the run.

    python benchmarks/bench_llamafactory.py [--runs 3] [--steps 30]
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

import yaml

REPO = Path(__file__).resolve().parents[1]
GOAL = 0.05


def run(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    base = yaml.safe_load((REPO / "cfgs" / "quickstart_llamafactory.yaml").read_text())
    base["backend_config"]["merge_lora"] = False
    base["backend_config"]["training"]["max_steps"] = args.steps
    base["backend_config"]["training"]["save_steps"] = args.steps
    base["train_auto_resume"] = False
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ours, bare, check, ours_wo_check = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            cfg = dict(base, af_output_dir=f"{tmp}/ours{i}")
            exp = Path(tmp) / f"exp{i}.yaml"
            exp.write_text(yaml.safe_dump(cfg))
            ours.append(run([sys.executable, "-m", "ascendfactory.cli.app", "train", str(exp)], env))
            summary = json.loads((Path(tmp) / f"ours{i}" / ".af" / "summary.json").read_text())
            walls = {s["name"]: s["wall_s"] for s in summary["steps"]}
            check.append(walls["check"])
            ours_wo_check.append(ours[-1] - walls["check"])
            # the same yaml, bare, in a fresh output directory, with the plan's step environment
            plan = json.loads(
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "ascendfactory.cli.app",
                        "train",
                        str(exp),
                        "--dry-run",
                        "--format",
                        "json",
                    ],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            train = next(s for s in plan["steps"] if s["name"] == "train")
            lf = yaml.safe_load((Path(tmp) / f"ours{i}" / "llamafactory_train.yaml").read_text())
            lf["output_dir"] = f"{tmp}/bare{i}"
            bare_yaml = Path(tmp) / f"bare{i}.yaml"
            bare_yaml.write_text(yaml.safe_dump(lf))
            bare.append(run([train["argv"][0], "train", str(bare_yaml)], {**env, **train["env"]}))
            print(
                f"round {i + 1}: ours {ours[-1]:.1f} s (check {check[-1]:.1f} s)  bare {bare[-1]:.1f} s",
                flush=True,
            )
    med = statistics.median
    overhead = med(ours_wo_check) / med(bare) - 1
    print(f"ours (all steps)     median {med(ours):6.1f} s")
    print(f"ours without check   median {med(ours_wo_check):6.1f} s")
    print(f"bare llamafactory    median {med(bare):6.1f} s")
    print(f"check step           median {med(check):6.1f} s   (LLaMA-Factory's own validation, added by us)")
    print(
        f"overhead without check: {overhead * 100:+.1f}%   goal < {GOAL * 100:.0f}%   "
        f"{'OK' if overhead < GOAL else 'OVER'}"
    )


if __name__ == "__main__":
    main()
