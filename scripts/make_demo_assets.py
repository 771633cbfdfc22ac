"""Regenerate the shipped demo datasets, and optionally write the tiny demo model.

    python scripts/make_demo_assets.py --data-only            # cfgs/data/demo_*.jsonl
    python scripts/make_demo_assets.py --model-dir /tmp/demo  # the datasets and a qwen2 demo model

Everything is generated from fixed seeds, offline; running it twice gives the same bytes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ascendfactory.engine.data.demo_data import (  # noqa: E402
    grpo_records,
    grpo_warmup_records,
    pretrain_records,
    sft_records,
    write_jsonl,
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=ROOT / "cfgs" / "data", help="where the .jsonl files go")
    p.add_argument("--model-dir", type=Path, default=None, help="also write the demo model here")
    p.add_argument("--family", default="qwen2", help="demo model family: qwen2, qwen3 or llama")
    p.add_argument("--data-only", action="store_true", help="only the datasets")
    args = p.parse_args(argv)
    n_sft = write_jsonl(args.data_dir / "demo_sft.jsonl", sft_records())
    n_pre = write_jsonl(args.data_dir / "demo_pretrain.jsonl", pretrain_records())
    n_grpo = write_jsonl(args.data_dir / "demo_grpo.jsonl", grpo_records())
    n_warm = write_jsonl(args.data_dir / "demo_grpo_warmup.jsonl", grpo_warmup_records())
    print(
        f"wrote {n_sft} instruction records, {n_pre} pretraining records, {n_grpo} GRPO prompts and "
        f"{n_warm} GRPO warm-up records to {args.data_dir}"
    )
    if args.model_dir is not None and not args.data_only:
        from ascendfactory.engine.demo import count_parameters, make_demo_model

        out = make_demo_model(args.model_dir, family=args.family)
        print(f"wrote a {args.family} demo model ({count_parameters(out):,} parameters) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
