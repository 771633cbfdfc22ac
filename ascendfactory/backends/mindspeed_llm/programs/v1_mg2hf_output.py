"""Runs MindSpeed-LLM's v1 converter (mg -> hf) so that its output lands where the v2 converter's does.

    python v1_mg2hf_output.py --stage-hf-config HF_DIR --collect-mg2hf OUT \
        -- PROGRAM [ARGS...]

--stage-hf-config HF   copy HF's config and tokenizer files (not its weights) into OUT before the program,
                       so the v1 converter (mg -> hf, --save-dir OUT --load-hf-from-config) builds the HF
                       model there
--collect-mg2hf OUT    after the program succeeds, move what v1 wrote into OUT/mg2hf/ up into OUT, so OUT
                       holds the HF model whichever converter ran

The program runs in the current directory with the current environment; its exit code is returned. One
step, so the pipeline's manifest sees the final OUT and a re-run with unchanged inputs is skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
V1_SUBDIR = "mg2hf"


def is_weight_file(name: str) -> bool:
    return name.endswith(WEIGHT_SUFFIXES) or name in WEIGHT_INDEXES


def stage_hf_config(hf_dir: str, out: str) -> list[str]:
    """Copy the non-weight files of `hf_dir` (config, generation config, tokenizer, code) into `out`."""
    if not os.path.isfile(os.path.join(hf_dir, "config.json")):
        raise FileNotFoundError(
            f"{hf_dir}/config.json not found: point tokenizer-name-or-path at the HF model"
        )
    os.makedirs(out, exist_ok=True)
    copied = []
    for name in sorted(os.listdir(hf_dir)):
        src = os.path.join(hf_dir, name)
        if os.path.isfile(src) and not is_weight_file(name):
            shutil.copy2(src, os.path.join(out, name))
            copied.append(name)
    return copied


def collect_mg2hf(out: str) -> list[str]:
    """Move `out/mg2hf/*` into `out` (replacing same-named entries) and remove `out/mg2hf`."""
    sub = os.path.join(out, V1_SUBDIR)
    if not os.path.isdir(sub):
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


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: ... --stage-hf-config HF --collect-mg2hf OUT -- PROGRAM [ARGS]")
    cut = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m ascendfactory.programs.v1_mg2hf_output")
    p.add_argument("--stage-hf-config")
    p.add_argument("--collect-mg2hf")
    opts = p.parse_args(argv[:cut])
    if not (opts.stage_hf_config and opts.collect_mg2hf):
        p.error("--stage-hf-config and --collect-mg2hf are both required")
    program = argv[cut + 1 :]
    if not program:
        p.error("no program after --")
    return opts, program


def main(argv: list[str] | None = None) -> int:
    opts, program = parse(list(sys.argv[1:] if argv is None else argv))
    try:
        names = stage_hf_config(opts.stage_hf_config, opts.collect_mg2hf)
        print(f"[files] copied {len(names)} config/tokenizer files into {opts.collect_mg2hf}", flush=True)
        code = subprocess.run(program, check=False).returncode
        if code == 0:
            names = collect_mg2hf(opts.collect_mg2hf)
            print(f"[files] moved {len(names)} files from {V1_SUBDIR}/ into {opts.collect_mg2hf}", flush=True)
    except OSError as e:
        print(f"[files] error: {e}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
