"""Merge the newest verl actor checkpoint into Hugging Face weights with verl's own model merger.

    <verl env>/bin/python verl_merge.py ROOT --backend fsdp|megatron [-- EXTRA MERGER ARGS...]

ROOT is `trainer.default_local_dir` (`{af_output_dir}/saved_checkpoints`). The step merged is the one
`latest_checkpointed_iteration.txt` names when its `actor/` is complete, else the newest complete one
(FSDP: `fsdp_config.json` and every `model_world_size_W_rank_r.pt`; Megatron: `ckpt_contents.json`).
Which step that is becomes known only after training, so this program resolves it and then runs, as a
child with an argv list:

    python -m verl.model_merger merge --backend B --local_dir ROOT/global_step_N/actor \
        --target_dir ROOT/global_step_N/actor/huggingface [EXTRA...]

the documented output (`huggingface/` beside the shards, where verl already keeps the model config and
tokenizer). Exit: the merger's code; 2 when there is no complete checkpoint. Imports nothing from
ascendfactory (it runs in verl's environment).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys

TRACKER = "latest_checkpointed_iteration.txt"


def say(text: str) -> None:
    print(f"[verl-merge] {text}", flush=True)


def actor_complete(actor: str) -> bool:
    if os.path.isfile(os.path.join(actor, "ckpt_contents.json")):
        return True
    try:
        with open(os.path.join(actor, "fsdp_config.json"), encoding="utf-8") as f:
            world = int(json.load(f)["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return world > 0 and all(
        os.path.isfile(os.path.join(actor, f"model_world_size_{world}_rank_{r}.pt")) for r in range(world)
    )


def pick_step(root: str) -> int | None:
    steps = sorted(
        int(m.group(1))
        for path in glob.glob(os.path.join(glob.escape(root), "global_step_*"))
        if (m := re.fullmatch(r"global_step_(\d+)", os.path.basename(path)))
    )
    complete = [n for n in steps if actor_complete(os.path.join(root, f"global_step_{n}", "actor"))]
    try:
        with open(os.path.join(root, TRACKER), encoding="utf-8") as f:
            text = f.read().strip()
        tracker = int(text) if text.isdigit() else None
    except OSError:
        tracker = None
    if tracker in complete:
        return tracker
    return complete[-1] if complete else None


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root")
    p.add_argument("--backend", required=True, choices=["fsdp", "megatron"])
    args = p.parse_args(argv)
    step = pick_step(args.root)
    if step is None:
        say(f"error: no complete actor checkpoint under {args.root} (global_step_N/actor): nothing to merge")
        return 2
    actor = os.path.join(args.root, f"global_step_{step}", "actor")
    target = os.path.join(actor, "huggingface")
    command = [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        args.backend,
        "--local_dir",
        actor,
        "--target_dir",
        target,
        *extra,
    ]
    say(f"global_step_{step}: " + " ".join(command))
    code = subprocess.run(command, check=False).returncode
    if code:
        say(f"error: the model merger exited with code {code}")
        return code
    weights = glob.glob(os.path.join(glob.escape(target), "*.safetensors"))
    if not (weights and os.path.isfile(os.path.join(target, "config.json"))):
        say(f"error: the merger exited 0 but {target} holds no config.json and *.safetensors")
        return 1
    say(f"merged global_step_{step} into {target} ({len(weights)} safetensors file(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
