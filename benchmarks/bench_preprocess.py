"""Preprocessing throughput: ours vs Megatron-LM's `tools/preprocess_data.py` vs the bare tokenizer.

    python benchmarks/bench_preprocess.py [--megatron-lm DIR] [--tokenizer DIR] [--docs 20000]
                                          [--workers 2] [--repeats 3]

All three tokenize the same generated pretraining corpus (JSON Lines, `text` field, EOD appended) with
the same Hugging Face tokenizer (default: the demo tokenizer, trained locally) and worker count:

- ours: `python -m ascendfactory.engine.data.preprocess ... --append-eod --workers N`;
- Megatron-LM: `DIR/tools/preprocess_data.py --tokenizer-type HuggingFaceTokenizer ... --workers N`, run
  with `PYTHONPATH=DIR` (a Megatron-LM checkout whose imports work here; core_v0.14.0 does on CPU without
  triton). Skipped, with a message, when `--megatron-lm` is not given. Its output is compared with ours
  byte for byte;
- bare tokenizer: `tokenizers.Tokenizer.encode_batch` over all texts already in memory (no I/O, no JSON,
  its own thread pool), the ceiling for any preprocessing program.

Both programs are timed end to end as subprocesses (start-up, reading, tokenizing, writing); tokens/s is
the output token count over the median wall time of `--repeats` runs. The runs are interleaved (ours,
bare tokenizer, Megatron-LM, then again) so that a change in machine load hits all of them alike; the
load average before and after is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ascendfactory.engine.data.demo_data import pretrain_records  # noqa: E402
from ascendfactory.engine.data.indexed import IndexedDataset  # noqa: E402


def make_corpus(path: Path, docs: int) -> list[str]:
    """`docs` documents of four demo paragraphs each, written as JSON Lines; returns the texts."""
    paragraphs = [r["text"] for r in pretrain_records(docs * 4, seed=7)]
    texts = [" ".join(paragraphs[i : i + 4]) for i in range(0, len(paragraphs), 4)]
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return texts


def timed(argv: list[str], *, env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Wall seconds of one run, and its stdout."""
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=3600, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout


def bare_tokenizer(tokenizer_dir: Path, texts: list[str]) -> float:
    """Seconds of one in-memory batch encode of `texts` (the tokenizer's own thread pool)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    start = time.perf_counter()
    encode(texts, add_special_tokens=True)
    return time.perf_counter() - start


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def output_files(prefix: Path) -> dict[str, bytes]:
    return {suffix: Path(f"{prefix}_text_document{suffix}").read_bytes() for suffix in (".bin", ".idx")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--megatron-lm", type=Path, default=None, help="a Megatron-LM checkout (tools/ and megatron/)"
    )
    p.add_argument("--tokenizer", type=Path, default=None, help="HF tokenizer dir (default: demo tokenizer)")
    p.add_argument("--docs", type=int, default=20000, help="documents in the generated corpus")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_preprocess_") as tmp_name:
        tmp = Path(tmp_name)
        tokenizer_dir = args.tokenizer
        if tokenizer_dir is None:
            from ascendfactory.engine.demo import save_demo_tokenizer

            tokenizer_dir = tmp / "tokenizer"
            save_demo_tokenizer(tokenizer_dir)
        corpus = tmp / "corpus.jsonl"
        texts = make_corpus(corpus, args.docs)
        mb = corpus.stat().st_size / 1e6
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

        ours_argv = [
            sys.executable,
            "-m",
            "ascendfactory.engine.data.preprocess",
            "--input",
            str(corpus),
            "--tokenizer-name-or-path",
            str(tokenizer_dir),
            "--output-prefix",
            str(tmp / "ours" / "c"),
            "--append-eod",
            "--workers",
            str(args.workers),
            "--log-interval",
            "100000",
        ]
        script = args.megatron_lm / "tools" / "preprocess_data.py" if args.megatron_lm else None
        mlm_argv: list[str] | None = None
        if script is not None and script.is_file():
            (tmp / "megatron").mkdir()
            mlm_env = {**os.environ, "PYTHONPATH": str(args.megatron_lm.resolve())}
            mlm_argv = [
                sys.executable,
                str(script),
                "--input",
                str(corpus),
                "--output-prefix",
                str(tmp / "megatron" / "c"),
                "--tokenizer-type",
                "HuggingFaceTokenizer",
                "--tokenizer-model",
                str(tokenizer_dir),
                "--append-eod",
                "--workers",
                str(args.workers),
                "--log-interval",
                "100000",
            ]
        load_before = load()
        ours_t: list[float] = []
        inner_t: list[float] = []
        bare_t: list[float] = []
        mlm_t: list[float] = []
        for _ in range(args.repeats):  # interleaved, so that load changes hit every program alike
            elapsed, out = timed(ours_argv, env=env, cwd=ROOT)
            ours_t.append(elapsed)
            # the program's own timing, after start-up
            inner_t.append(float(re.search(r"tokens in ([0-9.]+)s", out).group(1)))
            bare_t.append(bare_tokenizer(tokenizer_dir, texts))
            if mlm_argv is not None:
                mlm_t.append(timed(mlm_argv, env=mlm_env, cwd=args.megatron_lm)[0])
        load_after = load()
        ours, inner, bare = (statistics.median(t) for t in (ours_t, inner_t, bare_t))
        ds = IndexedDataset(tmp / "ours" / "c_text_document")
        tokens = int(ds.sizes.sum())

        print(
            f"corpus: {args.docs} documents, {mb:.1f} MB, {tokens:,} tokens; workers={args.workers}; "
            f"median of {args.repeats} interleaved runs; "
            f"load average {load_before} before, {load_after} after"
        )
        print(f"{'program':<28}{'seconds':>10}{'tokens/s':>14}   runs")
        rows = [
            ("ours (end to end)", ours, ours_t),
            ("ours (after start-up)", inner, inner_t),
            ("bare tokenizer (in memory)", bare, bare_t),
        ]
        if mlm_t:
            rows.append(("Megatron-LM preprocess_data", statistics.median(mlm_t), mlm_t))
        for name, median, runs in rows:
            each = " ".join(f"{t:.2f}" for t in runs)
            print(f"{name:<28}{median:>10.2f}{tokens / median:>14,.0f}   {each}")
        print(
            f"ours / bare tokenizer: {bare / ours:.0%} end to end, {bare / inner:.0%} after start-up "
            "(goal >= 70%)"
        )
        if args.megatron_lm is None:
            print("Megatron-LM: skipped (pass --megatron-lm DIR, a Megatron-LM checkout, to compare)")
        elif mlm_argv is None:
            print(f"Megatron-LM: skipped ({script} not found)")
        else:
            same = output_files(tmp / "ours" / "c") == output_files(tmp / "megatron" / "c")
            print(
                f"ours / Megatron-LM: {statistics.median(mlm_t) / ours:.2f}x (goal >= 1.5x); "
                f"outputs byte-identical: {same}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
