"""Benchmark hf->mg conversion against the bare I/O floor (read the safetensors, torch.save the same bytes).

    python benchmarks/bench_convert.py [--runs 5] [--tp 2] [--pp 2] [--workdir /tmp/bench_convert]

Builds a random Llama-style model of a few hundred MB locally (bf16, no hub), then times, `--runs` times
each and interleaved: (a) the converter in-process with verification on (the default), (b) with `--no-verify`,
(c) the floor: read every tensor with safetensors, write TP*PP torch.save files holding the same tensors,
(d) both as whole processes (`python -m ascendfactory.engine.convert`: start-up and first-use costs, such as
an import torch makes on its first meta-device `cat`, count), and (e) with `--peer DIR`, MindSpeed-LLM's own
`convert_ckpt_v2.py` from that checkout on the same model, as a process.

The peer (MindSpeed-LLM 2.3.0 or later: its v2 converter takes Qwen3, not Llama, among its dense families, so
`--peer` converts a Qwen3-shaped model with both) imports MindSpeed and Megatron-LM at start-up and patches
them: give their checkouts with `--peer-path` (MindSpeed-LLM 2.3.0's install guide pins MindSpeed
`2.3.0_core_r0.12.1` and Megatron-LM `core_v0.12.1`), and `--peer-python` an interpreter with its pure-Python
dependencies (einops, datasets, ...). `tests/support/peer_standins.py` stands in for the Ascend-only packages.
After the timed runs, both outputs are compared tensor by tensor (names, shapes, dtypes, values).

    python benchmarks/bench_convert.py --peer /ckpt/MindSpeed-LLM-2.3.0 \
        --peer-path /ckpt/MindSpeed:/ckpt/Megatron-LM --peer-python /venvs/peer/bin/python
Prints medians, the ratios of the medians to the floor's (goal: within 1.5x) and the load average before
and after the timed runs (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support

SIZES = dict(
    num_layers=8, hidden_size=1024, num_heads=16, num_kv_heads=8, intermediate_size=2816, vocab_size=32000
)


def build(workdir: Path, family: str) -> Path:
    """The model, its config.json also carrying `torch_dtype` and `rope_theta` at the top level as the hub's
    files do (transformers 5 writes `dtype` and `rope_parameters`; MindSpeed-LLM's v2 converter reads both
    older keys)."""
    import json

    from tests.support.tiny_model import build_tiny_model

    src = workdir / f"hf-{family}"
    if not (src / "config.json").is_file():
        build_tiny_model(src, family, seed=0, dtype="bfloat16", **SIZES)
        cfg = json.loads((src / "config.json").read_text())
        cfg.setdefault("torch_dtype", cfg.get("dtype", "bfloat16"))
        cfg.setdefault("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        (src / "config.json").write_text(json.dumps(cfg, indent=2))
    return src


def floor(src: Path, out: Path, files: int) -> None:
    """Bare I/O: read each tensor, write `files` torch.save files holding all of them."""
    import torch
    from safetensors import safe_open

    out.mkdir(parents=True)
    groups: list[dict] = [{} for _ in range(files)]
    for f in sorted(src.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            for i, k in enumerate(h.keys()):
                groups[i % files][k] = h.get_tensor(k)
    for i, g in enumerate(groups):
        torch.save({"model": g}, out / f"shard_{i}.pt")


def convert_argv(src: Path, out: Path, tp: int, pp: int, family: str = "llama2") -> list[str]:
    """MindSpeed-LLM's converter flags, which ours takes too."""
    return [
        "--load-model-type",
        "hf",
        "--save-model-type",
        "mg",
        "--load-dir",
        str(src),
        "--save-dir",
        str(out),
        "--target-tensor-parallel-size",
        str(tp),
        "--target-pipeline-parallel-size",
        str(pp),
        "--model-type-hf",
        family,
    ]


def convert(src: Path, out: Path, tp: int, pp: int, family: str, verify: bool) -> None:
    from ascendfactory.engine.convert.__main__ import main

    if main(convert_argv(src, out, tp, pp, family) + ([] if verify else ["--no-verify"])) != 0:
        raise SystemExit("conversion failed")


def process(argv: list[str], pythonpath: str = "") -> None:
    """A whole process, as a user runs it (start-up and first-use costs included)."""
    env = {**os.environ, "PYTHONPATH": pythonpath or str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} ... failed ({done.returncode}):\n{done.stdout[-3000:]}")


def timed(fn, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    fn(out)
    dt = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return dt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/bench_convert"))
    p.add_argument("--peer", type=Path, help="a MindSpeed-LLM checkout: its convert_ckpt_v2.py is timed too")
    p.add_argument("--peer-path", default="", help="PYTHONPATH for the peer: MindSpeed, Megatron-LM")
    p.add_argument("--peer-python", default=sys.executable, help="the interpreter the peer runs under")
    a = p.parse_args(argv)
    family = "qwen3" if a.peer else "llama2"
    import logging

    from tests.support.megatron_trees import compare_megatron_trees

    logging.getLogger("ascendfactory.convert").disabled = True
    src = build(a.workdir, family)
    size = sum(f.stat().st_size for f in src.glob("*.safetensors"))
    print(
        f"model: {size / 1e6:.0f} MB bf16 {family} ({SIZES}); TP {a.tp}, PP {a.pp}; {a.runs} runs each",
        file=sys.stderr,
    )
    out = a.workdir / "out"
    cases = {
        "floor (read + torch.save)": lambda o: floor(src, o, a.tp * a.pp),
        "convert hf->mg --no-verify": lambda o: convert(src, o, a.tp, a.pp, family, verify=False),
        "convert hf->mg (verify on)": lambda o: convert(src, o, a.tp, a.pp, family, verify=True),
        "process --no-verify": lambda o: process(
            [
                sys.executable,
                "-m",
                "ascendfactory.engine.convert",
                *convert_argv(src, o, a.tp, a.pp, family),
                "--no-verify",
            ]
        ),
        "process (verify on)": lambda o: process(
            [sys.executable, "-m", "ascendfactory.engine.convert", *convert_argv(src, o, a.tp, a.pp, family)]
        ),
    }
    if a.peer:
        peer = str(a.peer / "convert_ckpt_v2.py")
        standins = str(Path(__file__).resolve().parents[1] / "tests" / "support" / "peer_standins.py")
        cases["peer convert_ckpt_v2.py"] = lambda o: process(
            [a.peer_python, standins, peer, *convert_argv(src, o, a.tp, a.pp, family)], a.peer_path
        )
    for fn in cases.values():  # warm-up: page cache, imports
        timed(fn, out)
    times: dict[str, list[float]] = {k: [] for k in cases}
    load_before = os.getloadavg()
    for _ in range(a.runs):
        for name, fn in cases.items():
            times[name].append(timed(fn, out))
    load_after = os.getloadavg()
    if a.peer:
        mine, theirs = a.workdir / "cmp-ours", a.workdir / "cmp-peer"
        for d in (mine, theirs):
            shutil.rmtree(d, ignore_errors=True)
        cases["process (verify on)"](mine)
        cases["peer convert_ckpt_v2.py"](theirs)
        print("ours vs peer output: " + compare_megatron_trees(mine, theirs))
    print("load average " + " -> ".join("/".join(f"{x:.2f}" for x in la) for la in (load_before, load_after)))
    base = statistics.median(times["floor (read + torch.save)"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:30s} median {med:6.3f} s  ({size / 1e6 / med:7.0f} MB/s)  ratio {med / base:4.2f}x  "
            f"runs {', '.join(f'{t:.3f}' for t in ts)}"
        )
    if a.peer:
        ours = statistics.median(times["process (verify on)"])
        peer_s = statistics.median(times["peer convert_ckpt_v2.py"])
        print(f"ours (process, verify on) / peer: {ours / peer_s:.2f}x   goal <= 1.0x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
