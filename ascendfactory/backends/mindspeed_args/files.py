"""Small file steps around MindSpeed-LLM's programs, run as `python -m ascendfactory.backends.mindspeed_args.files`.

    mkdir DIR                          preprocess_data.py refuses an --output-prefix whose folder is missing
    stage-hf-config --hf-dir D --out O copy D's config and tokenizer files (not its weights) into O, so the v1
                                       converter (mg -> hf, --save-dir O --load-hf-from-config) can build the
                                       HF model there
    collect-mg2hf --out O              move what v1 wrote into O/mg2hf/ up into O, so O holds the HF model
                                       whichever converter ran

Each is safe to run again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
V1_SUBDIR = "mg2hf"


def is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES) or name in WEIGHT_INDEXES


def stage_hf_config(hf_dir: str, out: str) -> list[str]:
    """Copy the non-weight files of `hf_dir` (config, generation config, tokenizer, code) into `out`."""
    if not os.path.isfile(os.path.join(hf_dir, "config.json")):
        raise FileNotFoundError(f"{hf_dir}/config.json not found: point tokenizer-name-or-path at the HF model")
    os.makedirs(out, exist_ok=True)
    copied = []
    for name in sorted(os.listdir(hf_dir)):
        src = os.path.join(hf_dir, name)
        if os.path.isfile(src) and not is_weight_file(name):
            shutil.copy2(src, os.path.join(out, name))
            copied.append(name)
    return copied


def collect_mg2hf(out: str) -> list[str]:
    """Move `out/mg2hf/*` into `out` (replacing same-named files) and remove `out/mg2hf`."""
    sub = os.path.join(out, V1_SUBDIR)
    if not os.path.isdir(sub):
        if any(n.endswith(".safetensors") for n in os.listdir(out) if os.path.isfile(os.path.join(out, n))):
            return []  # collected by an earlier run
        raise FileNotFoundError(f"{sub} not found: the v1 converter wrote no HF weights")
    moved = []
    for name in sorted(os.listdir(sub)):
        target = os.path.join(out, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        os.replace(os.path.join(sub, name), target)
        moved.append(name)
    os.rmdir(sub)
    return moved


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ascendfactory.backends.mindspeed_args.files",
                                description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("mkdir").add_argument("dir")
    stage = sub.add_parser("stage-hf-config")
    stage.add_argument("--hf-dir", required=True)
    stage.add_argument("--out", required=True)
    sub.add_parser("collect-mg2hf").add_argument("--out", required=True)
    a = p.parse_args(argv)
    try:
        if a.command == "mkdir":
            os.makedirs(a.dir, exist_ok=True)
            print(f"[files] {a.dir} ready")
        elif a.command == "stage-hf-config":
            names = stage_hf_config(a.hf_dir, a.out)
            print(f"[files] copied {len(names)} config/tokenizer files into {a.out}: {', '.join(names)}")
        else:
            names = collect_mg2hf(a.out)
            print(f"[files] moved {len(names)} files from {V1_SUBDIR}/ into {a.out}")
    except OSError as e:
        print(f"[files] error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
