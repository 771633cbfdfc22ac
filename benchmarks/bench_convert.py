"""Benchmark hf->mg conversion against the bare I/O floor (read the safetensors, torch.save the same bytes).

    python benchmarks/bench_convert.py [--runs 5] [--tp 2] [--pp 2] [--workdir /tmp/bench_convert]

Builds a random Llama-style model of a few hundred MB locally (bf16, no hub), then times, `--runs` times
each and interleaved: (a) the converter in-process with verification on (the default), (b) with `--no-verify`,
(c) the floor: read every tensor with safetensors, write TP*PP torch.save files holding the same tensors,
(d) both as whole processes (`python -m ascendfactory.engine.convert`: start-up and first-use costs, such as
an import torch makes on its first meta-device `cat`, count), and (e) with `--peer DIR`, MindSpeed-LLM's own
`convert_ckpt_v2.py` from that checkout on the same model, as a process.
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


def build(workdir: Path) -> Path:
    from tests.support.tiny_model import build_tiny_model

    src = workdir / "hf"
    if not (src / "config.json").is_file():
        build_tiny_model(src, "llama2", seed=0, dtype="bfloat16", **SIZES)
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


def convert_argv(src: Path, out: Path, tp: int, pp: int) -> list[str]:
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
        "llama2",
    ]


def convert(src: Path, out: Path, tp: int, pp: int, verify: bool) -> None:
    from ascendfactory.engine.convert.__main__ import main

    if main(convert_argv(src, out, tp, pp) + ([] if verify else ["--no-verify"])) != 0:
        raise SystemExit("conversion failed")


def process(argv: list[str]) -> None:
    """A whole process, as a user runs it (start-up and first-use costs included)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


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
    a = p.parse_args(argv)
    import logging

    logging.getLogger("ascendfactory.convert").disabled = True
    src = build(a.workdir)
    size = sum(f.stat().st_size for f in src.glob("*.safetensors"))
    print(
        f"model: {size / 1e6:.0f} MB bf16 ({SIZES}); TP {a.tp}, PP {a.pp}; {a.runs} runs each",
        file=sys.stderr,
    )
    out = a.workdir / "out"
    cases = {
        "floor (read + torch.save)": lambda o: floor(src, o, a.tp * a.pp),
        "convert hf->mg --no-verify": lambda o: convert(src, o, a.tp, a.pp, verify=False),
        "convert hf->mg (verify on)": lambda o: convert(src, o, a.tp, a.pp, verify=True),
        "process --no-verify": lambda o: process(
            [
                sys.executable,
                "-m",
                "ascendfactory.engine.convert",
                *convert_argv(src, o, a.tp, a.pp),
                "--no-verify",
            ]
        ),
        "process (verify on)": lambda o: process(
            [sys.executable, "-m", "ascendfactory.engine.convert", *convert_argv(src, o, a.tp, a.pp)]
        ),
    }
    if a.peer:
        peer = str(a.peer / "convert_ckpt_v2.py")
        cases["peer convert_ckpt_v2.py"] = lambda o: process(
            [sys.executable, peer, *convert_argv(src, o, a.tp, a.pp)]
        )
    for fn in cases.values():  # warm-up: page cache, imports
        timed(fn, out)
    times: dict[str, list[float]] = {k: [] for k in cases}
    load_before = os.getloadavg()
    for _ in range(a.runs):
        for name, fn in cases.items():
            times[name].append(timed(fn, out))
    load_after = os.getloadavg()
    print("load average " + " -> ".join("/".join(f"{x:.2f}" for x in la) for la in (load_before, load_after)))
    base = statistics.median(times["floor (read + torch.save)"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:30s} median {med:6.3f} s  ({size / 1e6 / med:7.0f} MB/s)  ratio {med / base:4.2f}x  "
            f"runs {', '.join(f'{t:.3f}' for t in ts)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
